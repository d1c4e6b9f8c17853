import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import { makeKeys } from "../src/internal/keys.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { Store } from "../src/Store.js"
import type { Backend, Fixture } from "./conformance/backend.js"
import { liveSleep } from "./conformance/helpers.js"
import { storeSuite } from "./conformance/storeSuite.js"
import { untilReal } from "./support/poll.js"
import { pendingSleeps } from "./support/testClock.js"

const LOCK_EXPIRATION_MS = 300
/** How long a grant to the queue's head stays pending (the same on every backend of the suite). */
const HANDOFF_TIMEOUT_MS = 150
const COMMAND_TIMEOUT_MS = 500

let testCount = 0

/** `persisted`: the store keeps its tokens in a data directory, which must change none of its behaviour. */
const memory = (persisted: boolean): Backend => ({
  name: "memory",
  canHang: false,
  test: (name, body) =>
    it.effect(name, () =>
      Effect.gen(function* () {
        const keyPrefix = `mem${++testCount}`
        const dataDir = persisted
          ? Option.some(
              yield* Effect.acquireRelease(
                Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "leasehold-store-"))),
                (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
              )
            )
          : Option.none()
        const config = LeaseholdConfig.layer({
          keyPrefix,
          lockExpiration: LOCK_EXPIRATION_MS,
          handoffTimeout: HANDOFF_TIMEOUT_MS,
          lockWarningThreshold: 100,
          commandTimeout: COMMAND_TIMEOUT_MS,
          dataDir
        })
        const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provide(config))).pipe(Effect.orDie)
        const control = Context.get(context, MemoryStore.MemoryStoreControl)
        const fixture: Fixture = {
          store: Context.get(context, Store),
          keys: makeKeys(keyPrefix),
          lockExpirationMs: LOCK_EXPIRATION_MS,
          handoffTimeoutMs: HANDOFF_TIMEOUT_MS,
          commandTimeoutMs: COMMAND_TIMEOUT_MS,
          exactTime: true,
          advance: (ms) => TestClock.adjust(ms),
          awaitBlockedRead: untilReal(
            "a sleep registered with the TestClock",
            Effect.map(pendingSleeps, (sleeps) => sleeps.length > 0),
            { within: 2_000 }
          ),
          putRaw: (key, value) => control.setRaw(key, value),
          putRawExpiring: (key, value, ttlMs) => control.setRaw(key, value, ttlMs),
          expireRaw: (key, ttlMs) => Effect.asVoid(control.expireRaw(key, ttlMs)),
          keyCount: control.keyCount,
          commandsProcessed: Option.some(control.operations),
          channelSubscribers: Option.none(),
          quiet: { _tag: "Settle", settle: liveSleep(10) },
          outage: { begin: control.setAvailable(false), end: control.setAvailable(true) },
          hang: Option.none(),
          dropSubscriptions: Effect.as(control.dropSubscriptions, 1)
        }
        yield* body(fixture)
      })
    )
})

describe("Store conformance: MemoryStore", () => {
  storeSuite(memory(false))
})

describe("Store conformance: MemoryStore with a data directory", () => {
  storeSuite(memory(true))
})
