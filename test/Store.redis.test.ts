import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { makeKeys } from "../src/internal/keys.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { Store } from "../src/Store.js"
import type { Backend, Fixture } from "./conformance/backend.js"
import { onServer } from "./conformance/onServer.js"
import { storeSuite } from "./conformance/storeSuite.js"
import * as RedisServer from "./support/RedisServer.js"

/**
 * Real time on a loaded machine: the suite's bounds leave a quarter of the lock expiration
 * (300 ms) either way, and a grant outlives a release, the grantee's next commands and a
 * notice's delivery by far. Short enough that the cases which wait for an expiry stay quick.
 */
const LOCK_EXPIRATION_MS = 1_200
const HANDOFF_TIMEOUT_MS = 500
const COMMAND_TIMEOUT_MS = 500

/** Commands that do not touch data and that the harness itself sends. */
const uncounted = new Set(["cmdstat_ping", "cmdstat_info"])

let testCount = 0

const redis: Backend = {
  name: "redis",
  canHang: true,
  test: (name, body) =>
    it.live(name, () =>
      Effect.gen(function* () {
        // a fresh server per test: isolated key space, subscriptions and faults
        const server = yield* RedisServer.start()
        const keyPrefix = `redis${++testCount}`
        const config = LeaseholdConfig.layer({
          keyPrefix,
          lockExpiration: LOCK_EXPIRATION_MS,
          handoffTimeout: HANDOFF_TIMEOUT_MS,
          lockWarningThreshold: 100,
          commandTimeout: COMMAND_TIMEOUT_MS,
          connectTimeout: COMMAND_TIMEOUT_MS
        })
        const context = yield* Layer.build(RedisStore.layer({ url: server.url }).pipe(Layer.provide(config))).pipe(
          Effect.orDie
        )
        const fixture: Fixture = {
          store: Context.get(context, Store),
          keys: makeKeys(keyPrefix),
          lockExpirationMs: LOCK_EXPIRATION_MS,
          handoffTimeoutMs: HANDOFF_TIMEOUT_MS,
          commandTimeoutMs: COMMAND_TIMEOUT_MS,
          exactTime: false,
          advance: (ms) => Effect.sleep(ms),
          ...onServer(server, uncounted),
          outage: {
            begin: server.kill,
            // idempotent: the suite also runs it as a finalizer
            end: Effect.flatMap(server.pid, (pid) => (Option.isNone(pid) ? server.restart : Effect.void))
          }
        }
        yield* body(fixture)
      })
    )
}

describe("Store conformance: RedisStore", () => {
  storeSuite(redis)
})

const buildStore = (server: RedisServer.RedisServer) =>
  Layer.build(
    RedisStore.layer({ url: server.url }).pipe(
      Layer.provide(
        LeaseholdConfig.layer({
          keyPrefix: "flags",
          commandTimeout: COMMAND_TIMEOUT_MS,
          connectTimeout: COMMAND_TIMEOUT_MS
        })
      )
    )
  ).pipe(
    Effect.orDie,
    Effect.map((context) => Context.get(context, Store))
  )

describe("RedisStore: keyspace notification flags", () => {
  it.live("adds only the missing flags and keeps those already set", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      yield* Effect.orDie(server.command("CONFIG", "SET", "notify-keyspace-events", "Elt"))
      const store = yield* buildStore(server)
      const setting = yield* store.enableSocketEvents
      assert.strictEqual(setting._tag, "Enabled")
      const [, flags] = (yield* Effect.orDie(server.command("CONFIG", "GET", "notify-keyspace-events"))) as [
        string,
        string
      ]
      for (const flag of ["K", "E", "g", "$", "l", "x", "e", "t"]) {
        assert.include(flags, flag, `flag ${flag} in ${flags}`)
      }
    })
  )

  it.live("sends no CONFIG SET when every flag is already there", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      yield* Effect.orDie(server.command("CONFIG", "SET", "notify-keyspace-events", "KA"))
      const store = yield* buildStore(server)
      const before = yield* Effect.orDie(server.info("commandstats"))
      deepStrictEqual(yield* store.enableSocketEvents, { _tag: "Enabled", flags: "AK" })
      const after = yield* Effect.orDie(server.info("commandstats"))
      const sets = (stats: Readonly<Record<string, string>>) =>
        Number(/calls=(\d+)/.exec(stats["cmdstat_config|set"] ?? "")?.[1] ?? 0)
      assert.strictEqual(sets(after), sets(before))
    })
  )

  it.live("a server without CONFIG answers Refused, and a subscription still works", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start({ extraArgs: ["--rename-command", "CONFIG", ""] })
      const store = yield* buildStore(server)
      const setting = yield* store.enableSocketEvents
      assert.strictEqual(setting._tag, "Refused")
      assert.include(setting._tag === "Refused" ? setting.reply : "", "unknown command")
      yield* store.socketEvents
    })
  )
})
