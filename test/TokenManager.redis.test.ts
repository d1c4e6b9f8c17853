import { it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { eventuallyTrue } from "./conformance/helpers.js"
import { redisCluster } from "./tokens/cluster.js"
import { type TokenBackend, tokenSuite } from "./tokens/suite.js"

const redis: TokenBackend = {
  name: "redis",
  test: (name, input, options, body) =>
    it.scopedLive(name, () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster(input, options)
        yield* body(cluster, {
          advance: (ms) => Effect.sleep(ms),
          until: (label, check) => eventuallyTrue(label, 8_000, check)
        })
      })
    )
}

tokenSuite(redis)
