/**
 * A dead owner is not a duplicate, with real worker processes on a real redis-server: a
 * SIGKILLed owner's tab, linked elsewhere one second later, keeps its token and its state;
 * an owner SIGSTOPped longer than the presence expiration loses its tab's record to the
 * link elsewhere and, once resumed, reports that socket lost and leaves the record alone.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { makeKeys } from "../src/internal/keys.js"
import { eventuallyTrue } from "./conformance/helpers.js"
import { spawnChild } from "./support/children.js"
import { redisCluster } from "./tokens/cluster.js"

const child = "test/tokens/child.ts"
const presenceMs = 1_000
const input = { presenceExpiration: presenceMs }

const childEnv = (url: string, token: string, count: number) => ({
  LEASEHOLD_REDIS_URL: url,
  LEASEHOLD_PRESENCE_EXPIRATION_MS: String(presenceMs),
  LEASEHOLD_RETRY_JITTER: "false",
  TOKEN: token,
  COUNT: String(count)
})

describe("TokenManager (redis, processes): a dead owner is not a duplicate", () => {
  it.scopedLive(
    "SIGKILL of the owner: a link elsewhere one second later keeps the token and the state",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster(input)
        const b = yield* cluster.worker()
        const owner = yield* spawnChild(child, childEnv(cluster.server.url, "tab-k", 5))
        const ownerId = (yield* owner.waitFor(/^linked /)).slice("linked ".length)
        yield* owner.waitFor(/^n 5$/)
        deepStrictEqual(
          yield* cluster.record("tab-k"),
          Option.some({ instanceId: ownerId, connectionId: "child-socket" })
        )
        yield* owner.kill("SIGKILL")
        yield* owner.exited
        yield* Effect.sleep(1_000)
        const start = yield* Clock.currentTimeMillis
        const linked = yield* b.tokens.link("tab-k", "cb")
        const waited = (yield* Clock.currentTimeMillis) - start
        deepStrictEqual(linked, { token: "tab-k", fresh: false, takenOver: true })
        // at most the presence expiration (the dead worker's entry, or its silence), with margin
        assert.isBelow(waited, presenceMs + 2_000)
        deepStrictEqual(yield* cluster.record("tab-k"), Option.some({ instanceId: b.id, connectionId: "cb" }))
        const [counter] = yield* Effect.orDie(cluster.store.readSlices("tab-k", ["counter"]))
        deepStrictEqual(
          Option.map(counter!, (raw) => JSON.parse(raw)),
          Option.some({ n: 5 })
        )
      }),
    60_000
  )

  it.scopedLive(
    "an owner SIGSTOPped past the presence expiration: its record is taken over; resumed, it closes that socket and leaves the record",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster(input)
        const b = yield* cluster.worker()
        const owner = yield* spawnChild(child, childEnv(cluster.server.url, "tab-s", 0))
        const ownerId = (yield* owner.waitFor(/^linked /)).slice("linked ".length)
        // a live owner holding the socket: a duplicate, as before
        const duplicate = yield* b.tokens.link("tab-s", "cb-dup")
        assert.isTrue(duplicate.fresh && !duplicate.takenOver)
        yield* owner.kill("SIGSTOP")
        yield* Effect.sleep(presenceMs * 2)
        const linked = yield* b.tokens.link("tab-s", "cb")
        deepStrictEqual(linked, { token: "tab-s", fresh: false, takenOver: true })
        yield* owner.kill("SIGCONT")
        assert.strictEqual(yield* owner.waitFor(/^lost tab-s /, 15_000), `lost tab-s ${b.id}`)
        deepStrictEqual(yield* cluster.record("tab-s"), Option.some({ instanceId: b.id, connectionId: "cb" }))
        assert.notStrictEqual(ownerId, b.id)
      }),
    60_000
  )

  it.scopedLive(
    "a store restart longer than the presence expiration takes no live tab over",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ ...input, retryDelayInitial: 100, retryDelayMax: 500 })
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-r", "ca")
        yield* cluster.outage.begin
        yield* Effect.sleep(presenceMs * 2)
        // restarted empty: every record and presence entry is gone until the workers write them back
        yield* cluster.outage.end
        yield* eventuallyTrue("a's record is back", 15_000, Effect.map(cluster.record("tab-r"), Option.isSome))
        // the order where a's presence comes back after its record (its next refresh still to come)
        yield* Effect.orDie(cluster.server.command("DEL", makeKeys("leasehold").presence(a.id)))
        const linked = yield* b.tokens.link("tab-r", "cb")
        assert.isTrue(linked.fresh && !linked.takenOver)
        deepStrictEqual(yield* cluster.record("tab-r"), Option.some({ instanceId: a.id, connectionId: "ca" }))
        deepStrictEqual(yield* a.tokens.local("tab-r"), Option.some("ca"))
      }),
    60_000
  )
})
