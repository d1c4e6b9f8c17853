/**
 * A worker process for the cross-process tests: one Redis worker (its own InstanceId)
 * that adds 1 to a token's counter COUNT times and reports each acknowledgement.
 *
 *   LEASEHOLD_REDIS_URL=… TOKEN=t COUNT=10 [LEASEHOLD_OPLOCK=true] [STAY=1] node --import tsx test/state/child.ts
 *
 * Prints `id <instanceId>`, then `ack <value>` after each acknowledged modification, then
 * `done`; with STAY=1 it then waits to be killed, holding whatever lease it has.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as References from "effect/References"
import { InstanceId } from "../../src/InstanceId.js"
import * as StateManager from "../../src/StateManager.js"
import * as Worker from "../../src/Worker.js"
import { Counter } from "./workers.js"

const token = process.env.TOKEN ?? "t"
const count = Number(process.env.COUNT ?? "1")
const stay = process.env.STAY === "1"

const program = Effect.gen(function* () {
  const states = yield* StateManager.StateManager
  console.log(`id ${yield* InstanceId}`)
  for (let i = 0; i < count; i++) {
    const value = yield* states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }])
    console.log(`ack ${value}`)
  }
  console.log("done")
  if (stay) yield* Effect.never
}).pipe(Effect.provide(Worker.layerStateFromEnv), Effect.provideService(References.MinimumLogLevel, "Warn"))

NodeRuntime.runMain(program)
