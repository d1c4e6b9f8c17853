/**
 * A socket session over the embedded store, served in this process, and WebSocket clients
 * of it that name their client id.
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as SocketSession from "leasehold/SocketSession"
import * as StateManager from "leasehold/StateManager"
import type { Store } from "leasehold/Store"
import * as Worker from "leasehold/Worker"
import { WebSocket } from "ws"
import { waitUntil } from "../support/waitUntil.js"

export const Count = Schema.Struct({ n: Schema.Int, v: Schema.Int, note: Schema.optional(Schema.String) })
export const Bump = Schema.Struct({
  type: Schema.Literal("bump"),
  by: Schema.Int,
  slowMs: Schema.optional(Schema.Int),
  /** The handler dies (a defect) instead of answering. */
  die: Schema.optional(Schema.Boolean),
  /** The next state carries a note of this many characters: one past `maxValueBytes` is not written. */
  noteBytes: Schema.optional(Schema.Int)
})
export const Counter = StateManager.slice("counter", Count, { n: 0, v: 0 })

export class Refused extends Data.TaggedError("Refused")<{ readonly message: string }> {}

/** How the handler was called: `fresh` counts calls on values not left by the previous call (a new modification). */
export const calls = { total: 0, fresh: 0, last: undefined as unknown }

export const session = SocketSession.make({
  events: Bump,
  updates: Count,
  slices: { counter: Counter },
  handle: (bump, { counter }) =>
    Effect.gen(function* () {
      calls.total++
      if (counter !== calls.last) calls.fresh++
      // on the fiber's clock: the TestClock in a test that runs on it
      if (bump.slowMs !== undefined) yield* Effect.sleep(Duration.millis(bump.slowMs))
      if (bump.by === 0) {
        calls.last = counter
        return yield* new Refused({ message: "a bump of 0" })
      }
      if (bump.die === true) return yield* Effect.die(new Error("the handler died"))
      const next =
        bump.noteBytes === undefined
          ? { n: counter.n + bump.by, v: counter.v + 1 }
          : { n: counter.n + bump.by, v: counter.v + 1, note: "x".repeat(bump.noteBytes) }
      calls.last = next
      return [next, { counter: next }] as const
    }),
  view: ({ counter }) => counter,
  isNewer: (a, b) => a.v > b.v,
  maxPendingFrames: 4,
  maxPendingBytes: 2048
})

/** How the pure handler was called, as `calls` counts the effectful one's. */
export const pureCalls = { total: 0, fresh: 0, last: undefined as unknown, now: 0 }

/** The same session with a pure handler (`decide`): a `slowMs` is not waited for. */
export const pureSession = SocketSession.make({
  events: Bump,
  updates: Count,
  slices: { counter: Counter },
  decide: (bump, { counter }, now) => {
    pureCalls.total++
    pureCalls.now = now
    if (counter !== pureCalls.last) pureCalls.fresh++
    if (bump.by === 0) {
      pureCalls.last = counter
      return Result.fail(new Refused({ message: "a bump of 0" }))
    }
    if (bump.die === true) throw new Error("the handler died")
    const next =
      bump.noteBytes === undefined
        ? { n: counter.n + bump.by, v: counter.v + 1 }
        : { n: counter.n + bump.by, v: counter.v + 1, note: "x".repeat(bump.noteBytes) }
    pureCalls.last = next
    return Result.succeed([next, { counter: next }] as const)
  },
  view: ({ counter }) => counter,
  isNewer: (a, b) => a.v > b.v,
  maxPendingFrames: 4,
  maxPendingBytes: 2048
})

export const maxFrameBytes = 1024

/** One worker serving the session on a free port, over the store and settings in `shared`. */
export const serveWorker = (
  shared: Context.Context<Store | LeaseholdConfig.LeaseholdConfig>,
  server: Partial<SocketSession.HttpServerOptions> = {},
  served: typeof session | typeof pureSession = session
): Effect.Effect<number, unknown, Scope.Scope> =>
  Effect.map(serveWorkerWith(shared, server, served), ({ port }) => port)

/**
 * `serveWorker`, with the worker's services: its `StateManager` is the one the session's
 * events go through; `context` serves `SocketSession.apply` on the worker.
 */
export const serveWorkerWith = (
  shared: Context.Context<Store | LeaseholdConfig.LeaseholdConfig>,
  server: Partial<SocketSession.HttpServerOptions> = {},
  served: typeof session | typeof pureSession = session
) =>
  Effect.gen(function* () {
    const app = HttpRouter.serve(SocketSession.route(served), { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provideMerge(SocketSession.layer(served, Worker.layer)),
      Layer.provideMerge(SocketSession.layerHttpServer({ port: 0, host: "127.0.0.1", maxFrameBytes, ...server })),
      Layer.provide(Layer.succeedContext(shared))
    )
    const context = yield* Layer.build(app)
    const address = Context.get(context, HttpServer.HttpServer).address
    if (!("port" in address)) return yield* Effect.die(new Error("not a TCP address"))
    return { port: address.port, states: Context.get(context, StateManager.StateManager), context }
  })

export interface Frame {
  readonly type: string
  readonly [key: string]: any
}

export interface Client {
  readonly frames: Array<Frame>
  readonly send: (message: unknown) => void
  readonly waitFor: (predicate: (frame: Frame) => boolean, ms?: number) => Effect.Effect<Frame>
  readonly token: string
  readonly closed: Effect.Effect<number>
  readonly close: Effect.Effect<void>
  /**
   * A ping answered: the server has read every frame sent before it (the socket is real, and
   * its I/O takes real time), and its fibers have had a turn of the event loop to take them.
   */
  readonly flush: Effect.Effect<void>
}

/** Open the session's socket and wait for its `state` frame. Closed with the scope. */
export const connect = (
  port: number,
  query: { readonly token?: string; readonly client?: string } = {},
  options: { readonly autoPong?: boolean } = {}
): Effect.Effect<Client, never, Scope.Scope> =>
  Effect.gen(function* () {
    const params = new URLSearchParams()
    if (query.token !== undefined) params.set("token", query.token)
    if (query.client !== undefined) params.set("client", query.client)
    const frames: Array<Frame> = []
    const listeners = new Set<() => void>()
    let closeCode: number | undefined
    const socket = yield* Effect.acquireRelease(
      Effect.sync(() => new WebSocket(`ws://127.0.0.1:${port}/ws?${params}`, options)),
      (socket) =>
        Effect.callback<void>((resume) => {
          if (socket.readyState === WebSocket.CLOSED) return resume(Effect.void)
          socket.once("close", () => resume(Effect.void))
          socket.terminate()
        })
    )
    socket.on("error", () => {})
    socket.on("message", (data) => {
      frames.push(JSON.parse(data.toString()) as Frame)
      for (const listener of [...listeners]) listener()
    })
    socket.on("close", (code) => {
      closeCode = code
      for (const listener of [...listeners]) listener()
    })
    const waitFor = (predicate: (frame: Frame) => boolean, ms = 10_000) =>
      waitUntil(
        listeners,
        () => frames.find(predicate),
        ms,
        () => `no matching frame within ${ms} ms; frames: ${JSON.stringify(frames.slice(-20))}`
      )
    const hello = yield* waitFor((frame) => frame.type === "hello")
    yield* waitFor((frame) => frame.type === "state")
    return {
      frames,
      send: (message) => socket.send(typeof message === "string" ? message : JSON.stringify(message)),
      waitFor,
      token: hello.token as string,
      closed: waitUntil(
        listeners,
        () => closeCode,
        10_000,
        () => "socket not closed"
      ),
      close: Effect.callback<void>((resume) => {
        if (socket.readyState === WebSocket.CLOSED) return resume(Effect.void)
        socket.once("close", () => resume(Effect.void))
        socket.close()
      }),
      flush: Effect.andThen(
        Effect.callback<void>((resume) => {
          socket.once("pong", () => resume(Effect.void))
          socket.ping()
        }),
        Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
      )
    }
  })

/** The answers carrying a `seq`, as `[type, seq]`. */
export const answers = (client: Client) =>
  client.frames.filter((frame) => frame.seq !== undefined).map((frame) => [frame.type, frame.seq as number] as const)
