/**
 * A worker process for the take-over tests: one Redis worker that links a tab's socket to
 * TOKEN, bumps the tab's counter COUNT times, and reports every socket it loses.
 *
 *   LEASEHOLD_REDIS_URL=… LEASEHOLD_PRESENCE_EXPIRATION_MS=… TOKEN=t COUNT=5 node --import tsx test/tokens/child.ts
 *
 * Prints `linked <instanceId>`, then `n <value>` once the bumps are acknowledged, then
 * `lost <token> <holder instance>` for each socket whose token another worker took over;
 * it runs until killed.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as StateManager from "../../src/StateManager.js"
import * as TokenManager from "../../src/TokenManager.js"
import * as Worker from "../../src/Worker.js"
import { Counter } from "../state/workers.js"

const token = process.env.TOKEN ?? "t"
const count = Number(process.env.COUNT ?? "0")

const program = Effect.gen(function* () {
  const tokens = yield* TokenManager.TokenManager
  const states = yield* StateManager.StateManager
  yield* Effect.forkDetach(
    Stream.runForEach(tokens.lost, (lost) =>
      Effect.sync(() => console.log(`lost ${lost.token} ${lost.holder.instanceId}`))
    )
  )
  yield* tokens.link(token, "child-socket")
  console.log(`linked ${tokens.instanceId}`)
  let n = 0
  for (let i = 0; i < count; i++) n = yield* states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }])
  console.log(`n ${n}`)
  yield* Effect.never
}).pipe(
  Effect.provide(Worker.layerFromEnv({ schema: Schema.Unknown, deliver: () => Effect.void })),
  Effect.provideService(References.MinimumLogLevel, "Warn")
)

NodeRuntime.runMain(program)
