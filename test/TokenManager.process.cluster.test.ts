/**
 * The process tests of `TokenManager.process.test.ts` on a 3-master Redis Cluster: a tab
 * linked by a real worker process (`test/tokens/child.ts`, in cluster mode through the
 * environment), whose owner is SIGKILLed or frozen, then linked by a worker of this
 * process. One cluster serves the file; each test has its own key prefix, which the child
 * is given too.
 */
import { afterAll, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as RedisCluster from "./support/RedisCluster.js"
import { onRedisCluster } from "./tokens/cluster.js"
import { frozenOwnerTakenOver, killedOwnerTakenOver, type ProcessBackend } from "./tokens/processes.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let testCount = 0

const onCluster: ProcessBackend = {
  workers: (input) =>
    Effect.gen(function* () {
      const nodes = yield* clusters.get
      const keyPrefix = `process${++testCount}`
      const cluster = yield* onRedisCluster(nodes, { ...input, keyPrefix })
      return {
        cluster,
        env: { LEASEHOLD_REDIS_URL: nodes.url, LEASEHOLD_REDIS_CLUSTER: "true", LEASEHOLD_KEY_PREFIX: keyPrefix }
      }
    })
}

describe("TokenManager (redis-cluster, processes): a dead owner is not a duplicate", () => {
  it.live(
    "SIGKILL of the owner: a link elsewhere one second later keeps the token and the state",
    () => killedOwnerTakenOver(onCluster),
    60_000
  )

  it.live(
    "an owner SIGSTOPped past the presence expiration: its record is taken over; resumed, it closes that socket and leaves the record",
    () => frozenOwnerTakenOver(onCluster),
    60_000
  )
})
