/**
 * A dead owner is not a duplicate, with real worker processes on a real redis-server: a
 * SIGKILLed owner's tab, linked elsewhere one second later, keeps its token and its state;
 * an owner SIGSTOPped longer than the presence expiration loses its tab's record to the
 * link elsewhere and, once resumed, reports that socket lost and leaves the record alone.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { makeKeys } from "../src/internal/keys.js"
import { untilReal } from "./support/poll.js"
import { redisCluster } from "./tokens/cluster.js"
import { frozenOwnerTakenOver, killedOwnerTakenOver, type ProcessBackend, presenceMs } from "./tokens/processes.js"

const singleServer: ProcessBackend = {
  workers: (input) =>
    Effect.map(redisCluster(input), (cluster) => ({ cluster, env: { LEASEHOLD_REDIS_URL: cluster.server.url } }))
}

describe("TokenManager (redis, processes): a dead owner is not a duplicate", () => {
  it.live(
    "SIGKILL of the owner: a link elsewhere one second later keeps the token and the state",
    () => killedOwnerTakenOver(singleServer),
    60_000
  )

  it.live(
    "an owner SIGSTOPped past the presence expiration: its record is taken over; resumed, it closes that socket and leaves the record",
    () => frozenOwnerTakenOver(singleServer),
    60_000
  )

  it.live(
    "a store restart longer than the presence expiration takes no live tab over",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({
          presenceExpiration: presenceMs,
          retryDelayInitial: 100,
          retryDelayMax: 500
        })
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-r", "ca")
        yield* cluster.outage.begin
        yield* Effect.sleep(presenceMs * 2)
        // restarted empty: every record and presence entry is gone until the workers write them back
        yield* cluster.outage.end
        yield* untilReal("a's record is back", Effect.map(cluster.record("tab-r"), Option.isSome), { within: 15_000 })
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
