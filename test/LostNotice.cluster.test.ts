/**
 * Notices lost for real on a 3-master Redis Cluster (`test/state/lostNotices.ts`): a token's
 * notices travel on its own master, where the worker's subscriber connection is cut. One
 * cluster serves the file; each test has its own key prefix.
 */
import { afterAll, describe } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { lostNoticeSuite } from "./state/lostNotices.js"
import * as RedisCluster from "./support/RedisCluster.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let tests = 0

describe("notices lost on a Redis Cluster", () => {
  lostNoticeSuite(
    Effect.map(clusters.get, (cluster) => ({
      nodes: cluster.nodes,
      urlFor: (user, password) =>
        cluster.nodes
          .map((node, i) => `${i === 0 ? `redis://${user}:${password}@` : ""}127.0.0.1:${node.port}`)
          .join(","),
      cluster: true,
      nodeFor: (key) => Effect.orDie(cluster.nodeFor(key)),
      keyPrefix: `lost${++tests}`
    }))
  )
})
