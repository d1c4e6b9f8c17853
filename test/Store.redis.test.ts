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
import { eventuallyTrue } from "./conformance/helpers.js"
import { storeSuite } from "./conformance/storeSuite.js"
import * as RedisServer from "./support/RedisServer.js"

const LOCK_EXPIRATION_MS = 300
/** Short, so that a test of an unclaimed grant waits little (on Redis, in real time). */
const HANDOFF_TIMEOUT_MS = 150
const COMMAND_TIMEOUT_MS = 500

/** Commands that do not touch data and that the harness itself sends. */
const uncounted = new Set(["cmdstat_ping", "cmdstat_info"])

const commandsProcessed = (server: RedisServer.RedisServer) =>
  server.info("commandstats").pipe(
    Effect.map((stats) => RedisServer.commandCalls(stats, (name) => uncounted.has(name))),
    Effect.orDie
  )

let testCount = 0

const redis: Backend = {
  name: "redis",
  canHang: true,
  test: (name, body) =>
    it.scopedLive(name, () =>
      Effect.gen(function* () {
        // a fresh server per test: isolated key space, subscriptions and faults
        const server = yield* RedisServer.start()
        const keyPrefix = `redis${++testCount}`
        const config = LeaseholdConfig.layerWith({
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
          settle: Effect.sleep(100),
          awaitBlockedRead: eventuallyTrue(
            "a blocked client on the server",
            2_000,
            Effect.map(Effect.orDie(server.info("clients")), (info) => Number(info.blocked_clients) > 0)
          ),
          putRaw: (key, value) => Effect.orDie(server.command("SET", key, value)),
          putRawExpiring: (key, value, ttlMs) => Effect.orDie(server.command("SET", key, value, "PX", ttlMs)),
          expireRaw: (key, ttlMs) => Effect.asVoid(Effect.orDie(server.command("PEXPIRE", key, ttlMs))),
          keyCount: Effect.orDie(server.dbsize),
          commandsProcessed: Option.some(commandsProcessed(server)),
          channelSubscribers: Option.some((channel) => Effect.orDie(server.numsub(channel))),
          outage: {
            begin: server.kill,
            // idempotent: the suite also runs it as a finalizer
            end: Effect.flatMap(server.pid, (pid) => (Option.isNone(pid) ? server.restart : Effect.void))
          },
          hang: Option.some({ begin: server.pause, end: server.resume }),
          dropSubscriptions: Effect.orDie(server.clientKill("pubsub"))
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
        LeaseholdConfig.layerWith({
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
  it.scopedLive("adds only the missing flags and keeps those already set", () =>
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

  it.scopedLive("sends no CONFIG SET when every flag is already there", () =>
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

  it.scopedLive("a server without CONFIG answers Refused, and a subscription still works", () =>
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
