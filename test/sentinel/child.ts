/**
 * A worker process for the Sentinel-over-TLS test: one Redis worker, configured from the
 * environment only (`LEASEHOLD_REDIS_SENTINELS`, `LEASEHOLD_REDIS_SENTINEL_NAME`, and the
 * CA through `NODE_EXTRA_CA_CERTS`, which Node reads at its start), that bumps TOKEN's
 * counter COUNT times, then, on each SIGUSR2, COUNT times more, retrying a bump that fails.
 *
 *   LEASEHOLD_REDIS_SENTINELS=rediss://… NODE_EXTRA_CA_CERTS=ca.pem TOKEN=t COUNT=5 node --import tsx test/sentinel/child.ts
 *
 * Prints `n <value>` after each round of bumps (and `failed <n> <tag>` for the bumps that
 * failed and were retried in it); it runs until killed.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as StateManager from "../../src/StateManager.js"
import * as Worker from "../../src/Worker.js"
import { Counter } from "../state/workers.js"

const token = process.env.TOKEN ?? "t"
const count = Number(process.env.COUNT ?? "0")

const program = Effect.gen(function* () {
  const states = yield* StateManager.StateManager
  const rounds = yield* Queue.unbounded<void>()
  process.on("SIGUSR2", () => Queue.offerUnsafe(rounds, undefined))
  const bump = states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }])
  for (;;) {
    let n = 0
    let failed = 0
    let tag = ""
    for (let i = 0; i < count; ) {
      const result = yield* Effect.result(bump)
      if (result._tag === "Success") {
        n = result.success
        i++
      } else {
        failed++
        tag = result.failure._tag
        yield* Effect.sleep(200)
      }
    }
    if (failed > 0) console.log(`failed ${failed} ${tag}`)
    console.log(`n ${n}`)
    yield* Queue.take(rounds)
  }
}).pipe(
  Effect.provide(Worker.layerFromEnv({ schema: Schema.Unknown, deliver: () => Effect.void })),
  Effect.provideService(References.MinimumLogLevel, "Warn")
)

NodeRuntime.runMain(program)
