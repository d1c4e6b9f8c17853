/**
 * The state manager's behaviour suite and the delivery suite (the end-to-end routing of
 * updates to the worker holding the socket) on a 3-master Redis Cluster. Each worker has
 * its own RedisStore, as separate processes would; one cluster serves the whole file and
 * each test has its own key prefix.
 *
 * The fault cases of `Mailbox.redis.test.ts` and `Signals.test.ts` (a killed or paused
 * single server, a proxy cut) are not repeated here: `Store.cluster.test.ts` covers a
 * killed and a paused cluster at the store level.
 */
import { afterAll, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { eventuallyTrue } from "./conformance/helpers.js"
import { type DeliveryBackend, deliverySuite } from "./delivery/suite.js"
import { redisWorkers } from "./delivery/workers.js"
import { type StateBackend, stateSuite } from "./state/suite.js"
import { redisClusterWorkers } from "./state/workers.js"
import * as RedisCluster from "./support/RedisCluster.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let testCount = 0

const state: StateBackend = {
  name: "redis-cluster",
  test: (name, input, body) =>
    it.scopedLive(
      name,
      () =>
        Effect.gen(function* () {
          const cluster = yield* clusters.get
          const raw = (key: string) =>
            Effect.gen(function* () {
              const node = yield* cluster.nodeFor(key)
              const reply = yield* node.command("GET", key)
              return typeof reply === "string" ? Option.some(reply) : Option.none<string>()
            }).pipe(Effect.orDie)
          const workers = yield* redisClusterWorkers(cluster.url, raw, {
            commandTimeout: 1_000,
            keyPrefix: `state${++testCount}`,
            ...input
          })
          yield* body(workers, {
            advance: (ms) => Effect.sleep(ms),
            settle: Effect.sleep(30),
            until: (label, check) => eventuallyTrue(label, 10_000, check)
          })
        }),
      60_000
    )
}

stateSuite(state)

const delivery: DeliveryBackend = {
  name: "redis-cluster",
  test: (name, body) =>
    it.scopedLive(
      name,
      () =>
        Effect.gen(function* () {
          const cluster = yield* clusters.get
          const fx = yield* redisWorkers(cluster.url, { redisCluster: true, keyPrefix: `delivery${++testCount}` })
          yield* body(fx, {
            until: (label, check) => eventuallyTrue(label, 10_000, Effect.zipRight(Effect.sleep(10), check)),
            settle: Effect.sleep(200)
          })
        }),
      60_000
    )
}

deliverySuite(delivery)
