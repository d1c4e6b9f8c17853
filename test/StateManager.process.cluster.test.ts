/**
 * The process tests of `StateManager.process.test.ts` on a 3-master Redis Cluster: real
 * worker processes (`test/state/child.ts`, in cluster mode through the environment) beside
 * workers of this process, SIGKILLed or frozen as a host does. One cluster serves the file;
 * each test has its own key prefix, which the children are given too.
 */
import { afterAll, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { killedHoldingALease, killedInTheQueue, killedInTheQueueCases, type ProcessBackend } from "./state/processes.js"
import { redisClusterWorkers } from "./state/workers.js"
import * as RedisCluster from "./support/RedisCluster.js"
import * as RedisServer from "./support/RedisServer.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let testCount = 0

const onCluster: ProcessBackend = {
  workers: (input) =>
    Effect.gen(function* () {
      const nodes = yield* clusters.get
      const keyPrefix = `process${++testCount}`
      const cluster = yield* redisClusterWorkers(
        nodes.url,
        (key) => Effect.flatMap(Effect.orDie(nodes.nodeFor(key)), (node) => RedisServer.getRaw(node, key)),
        (key) => Effect.orDie(nodes.nodeFor(key)),
        { ...input, keyPrefix }
      )
      return {
        cluster,
        env: { LEASEHOLD_REDIS_URL: nodes.url, LEASEHOLD_REDIS_CLUSTER: "true", LEASEHOLD_KEY_PREFIX: keyPrefix }
      }
    })
}

describe("redis-cluster: durability", () => {
  it.live(
    "a worker killed while it holds a lease loses no acknowledged modification",
    () => killedHoldingALease(onCluster),
    60_000
  )
})

describe("redis-cluster: the queue with a worker killed", () => {
  for (const [name, stop] of killedInTheQueueCases) {
    it.live(name, () => killedInTheQueue(onCluster, stop), 60_000)
  }
})
