import { it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import { eventuallyTrue } from "./conformance/helpers.js"
import { memoryCluster } from "./tokens/cluster.js"
import { type TokenBackend, tokenSuite } from "./tokens/suite.js"

const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow(), { discard: true })

const memory: TokenBackend = {
  name: "memory",
  test: (name, input, options, body) =>
    it.scoped(name, () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input, options)
        yield* body(cluster, {
          advance: (ms) => Effect.zipRight(TestClock.adjust(ms), settle),
          until: (label, check) =>
            eventuallyTrue(
              label,
              5_000,
              Effect.gen(function* () {
                yield* settle
                if (yield* check) return true
                yield* TestClock.adjust(1)
                return false
              })
            )
        })
      })
    )
}

tokenSuite(memory)
