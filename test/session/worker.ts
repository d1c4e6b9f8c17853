/**
 * A worker process serving a socket session over Redis: a counter, bumped by the events
 * of its sockets, on a free loopback port.
 *
 *   LEASEHOLD_REDIS_URL=… node --import tsx test/session/worker.ts
 *
 * Prints `listening <port> <instanceId>` once it serves, and runs until killed. An event
 * may ask the worker to stop at a point of its handling, for the test to kill it there:
 * `{"hold":"commit"}` before its change is committed (the handler waits for ever, under
 * the token's lock), `{"hold":"answer"}` after the commit and before the answer is queued
 * (the whole process stops in the app's `isNewer`, which the session calls before it
 * sends an answer). Each prints `holding <point>` first.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as SocketSession from "../../src/SocketSession.js"
import * as StateManager from "../../src/StateManager.js"
import { TokenManager } from "../../src/TokenManager.js"
import * as Worker from "../../src/Worker.js"

const Count = Schema.Struct({ n: Schema.Int, v: Schema.Int })
const Bump = Schema.Struct({
  type: Schema.Literal("bump"),
  by: Schema.Int,
  hold: Schema.optional(Schema.Literals(["commit", "answer"]))
})
const Counter = StateManager.slice("counter", Count, { n: 0, v: 0 })

/** The update whose answer stops the process, once it is about to be sent. */
let holdAnswerOf: unknown

/** Stop the whole process (its event loop included) until it is killed, without spinning. */
const stopHere = (point: string) => {
  console.log(`holding ${point}`)
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)
}

const session = SocketSession.make({
  events: Bump,
  updates: Count,
  slices: { counter: Counter },
  handle: (bump, { counter }) =>
    Effect.gen(function* () {
      if (bump.hold === "commit") {
        console.log("holding commit")
        return yield* Effect.never
      }
      const next = { n: counter.n + bump.by, v: counter.v + 1 }
      holdAnswerOf = bump.hold === "answer" ? next : undefined
      return [next, { counter: next }] as const
    }),
  view: ({ counter }) => counter,
  isNewer: (update, than) => {
    // called with the answer on either side, before it is queued
    if (holdAnswerOf !== undefined && (update === holdAnswerOf || than === holdAnswerOf)) stopHere("answer")
    return update.v > than.v
  }
})

const program = Effect.gen(function* () {
  const app = HttpRouter.serve(SocketSession.route(session), { disableLogger: true, disableListenLog: true }).pipe(
    Layer.provideMerge(SocketSession.layer(session, Worker.layerFromEnv)),
    Layer.provideMerge(SocketSession.layerHttpServer({ port: 0, host: "127.0.0.1" }))
  )
  const context = yield* Layer.build(app)
  const address = Context.get(context, HttpServer.HttpServer).address
  if (!("port" in address)) return yield* Effect.die(new Error("not a TCP address"))
  console.log(`listening ${address.port} ${Context.get(context, TokenManager).instanceId}`)
  return yield* Effect.never
}).pipe(Effect.scoped, Effect.provideService(References.MinimumLogLevel, "Warn"))

NodeRuntime.runMain(program)
