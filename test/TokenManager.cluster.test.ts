/**
 * The token-manager suite on a 3-master Redis Cluster: each worker's records live on the
 * masters of their tokens' slots, keyspace notifications come from every master, and an
 * outage is the whole cluster SIGKILLed and restarted empty.
 *
 * One cluster serves the whole file (starting one takes seconds): the fixture empties it
 * before each test, and each test has its own key prefix.
 */
import { afterAll, assert, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { eventuallyTrue } from "./conformance/helpers.js"
import * as RedisCluster from "./support/RedisCluster.js"
import { onRedisCluster } from "./tokens/cluster.js"
import { type TokenBackend, tokenSuite } from "./tokens/suite.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let testCount = 0

const redisCluster: TokenBackend = {
  name: "redis-cluster",
  test: (name, input, options, body) =>
    it.scopedLive(
      name,
      () =>
        Effect.gen(function* () {
          const nodes = yield* clusters.get
          const cluster = yield* onRedisCluster(nodes, { keyPrefix: `tokens${++testCount}`, ...input }, options)
          yield* body(cluster, {
            advance: (ms) => Effect.sleep(ms),
            until: (label, check) => eventuallyTrue(label, 15_000, check)
          })
        }),
      60_000
    )
}

tokenSuite(redisCluster)

it.scopedLive(
  "redis-cluster: a tab linked while writes are refused, over a dead worker's record: taken over once they are accepted, not lost",
  () =>
    Effect.gen(function* () {
      const nodes = yield* clusters.get
      const cluster = yield* onRedisCluster(nodes, { keyPrefix: `tokens${++testCount}`, presenceExpiration: 600 })
      const onEveryMaster = (...args: ReadonlyArray<string>) =>
        Effect.forEach(nodes.nodes, (node) => Effect.orDie(node.command(...args)), { discard: true })
      yield* Effect.addFinalizer(() => Effect.ignore(onEveryMaster("CONFIG", "SET", "maxmemory", "0")))
      const b = yield* cluster.worker()
      const lost = yield* Effect.fork(Stream.runCollect(Stream.take(b.tokens.lost, 1)))
      // the tab's worker was SIGKILLed: its record stays, it has no presence
      yield* cluster.overwrite("tab-1", { instanceId: "dead-worker", connectionId: "c-dead" })
      yield* onEveryMaster("CONFIG", "SET", "maxmemory", "1")
      const refused = yield* Effect.flip(b.tokens.link("tab-1", "cb"))
      assert.strictEqual(refused._tag, "RecordNotStored")
      yield* onEveryMaster("CONFIG", "SET", "maxmemory", "0")
      // a resubscription restores: the record found is the dead worker's
      yield* cluster.dropSubscriptions
      yield* eventuallyTrue(
        "the dead worker's record taken over",
        15_000,
        Effect.map(cluster.record("tab-1"), (record) => Option.isSome(record) && record.value.instanceId === b.id)
      )
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some({ instanceId: b.id, connectionId: "cb" }))
      deepStrictEqual(yield* b.tokens.local("tab-1"), Option.some("cb"))
      assert.isTrue(Option.isNone(yield* Fiber.poll(lost)), "no socket reported lost")
    }),
  60_000
)
