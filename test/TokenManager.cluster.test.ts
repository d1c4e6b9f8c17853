/**
 * The token-manager suite on a 3-master Redis Cluster: each worker's records live on the
 * masters of their tokens' slots, keyspace notifications come from every master, and an
 * outage is the whole cluster SIGKILLed and restarted empty.
 *
 * One cluster serves the whole file (starting one takes seconds): the fixture empties it
 * before each test, and each test has its own key prefix.
 */
import { afterAll, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Logs from "./support/logs.js"
import { untilReal } from "./support/poll.js"
import * as RedisCluster from "./support/RedisCluster.js"
import { onRedisCluster } from "./tokens/cluster.js"
import { deadRecordTakenOverAfterRefusedLink, maxmemory, probe } from "./tokens/refusedWrites.js"
import { type TokenBackend, tokenSuite } from "./tokens/suite.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let testCount = 0

const redisCluster: TokenBackend = {
  name: "redis-cluster",
  test: (name, input, options, body) =>
    it.live(
      name,
      () =>
        Effect.gen(function* () {
          const nodes = yield* clusters.get
          const cluster = yield* onRedisCluster(nodes, { keyPrefix: `tokens${++testCount}`, ...input }, options)
          yield* body(cluster, {
            advance: (ms) => Effect.sleep(ms),
            until: (label, check) => untilReal(label, check, { within: 15_000 })
          }).pipe(Effect.provide(Logs.into(cluster.logs)))
        }),
      60_000
    )
}

tokenSuite(redisCluster)

it.live(
  "redis-cluster: a tab linked while writes are refused, over a dead worker's record: taken over once they are accepted, not lost",
  () =>
    Effect.gen(function* () {
      const nodes = yield* clusters.get
      const cluster = yield* onRedisCluster(nodes, { keyPrefix: `tokens${++testCount}`, presenceExpiration: 600 })
      const onEveryMaster = (refused: boolean) =>
        Effect.forEach(nodes.nodes, (node) => Effect.orDie(node.command(...maxmemory(refused))), { discard: true })
      yield* Effect.addFinalizer(() => Effect.ignore(onEveryMaster(false)))
      yield* deadRecordTakenOverAfterRefusedLink(
        cluster,
        onEveryMaster,
        Effect.flatMap(nodes.nodeFor(probe[1]), (node) => node.command(...probe)),
        15_000
      )
    }),
  60_000
)
