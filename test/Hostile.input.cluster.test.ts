/**
 * The hostile-input suite on a 3-master Redis Cluster: what a refused input must never
 * reach is watched on every master. One cluster serves the whole file (starting one takes
 * seconds); each test empties it first and has its own key prefix.
 */
import { afterAll } from "@effect/vitest"
import { redisCluster } from "./hostile/fixture.js"
import { hostileInputSuite } from "./hostile/inputSuite.js"
import * as RedisCluster from "./support/RedisCluster.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

hostileInputSuite(redisCluster(clusters.get))
