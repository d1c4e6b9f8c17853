/**
 * The socket side of a leasehold app: a WebSocket session any Effect app mounts, which
 * links each tab's socket to its token, runs the app's handler for each event under the
 * token's lock, answers every event, and applies an event that carries a `seq` exactly
 * once, across reconnects, workers and their deaths (docs/protocol.md#the-socket-session).
 *
 * ```ts
 * import { Effect, Layer, Schema } from "effect"
 * import { HttpRouter } from "effect/http"
 * import { SocketSession, StateManager, Worker } from "leasehold"
 *
 * const Count = Schema.Struct({ n: Schema.Int })
 * const Bump = Schema.Struct({ type: Schema.Literal("bump"), by: Schema.Int })
 * const Counter = StateManager.slice("counter", Count, { n: 0 })
 *
 * const session = SocketSession.make({
 *   events: Bump,
 *   updates: Count,
 *   slices: { counter: Counter },
 *   handle: (bump, { counter }) => {
 *     const next = { n: counter.n + bump.by }
 *     return Effect.succeed([next, { counter: next }] as const)
 *   },
 *   view: ({ counter }) => counter
 * })
 *
 * const app = HttpRouter.serve(SocketSession.route(session, "/ws")).pipe(
 *   Layer.provide(SocketSession.layer(session, Worker.layerFromEnv)),
 *   Layer.provide(SocketSession.layerHttpServer({ port: 8080 }))
 * )
 * ```
 *
 * @since 0.2.0
 */
import type * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as NodeServices from "@effect/platform-node/NodeServices"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Etag from "effect/http/Etag"
import type * as HttpPlatform from "effect/http/HttpPlatform"
import * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServer from "effect/http/HttpServer"
import type * as HttpServerError from "effect/http/HttpServerError"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import type * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import type * as Result from "effect/Result"
import type * as Schema from "effect/Schema"
import * as Apply from "./internal/socket/apply.js"
import * as Connection from "./internal/socket/connection.js"
import { updateEncoder } from "./internal/socket/frames.js"
import * as Registry from "./internal/socket/registry.js"
import * as Seq from "./internal/socket/seq.js"
import * as Served from "./internal/socket/served.js"
import * as Upgrade from "./internal/socket/upgrade.js"
import type * as LeaseholdConfig from "./LeaseholdConfig.js"
import type { Mailbox, SendOutcome } from "./Mailbox.js"
import type { EventFailed, EventRefused } from "./SocketSessionError.js"
import type * as StateManager from "./StateManager.js"
import type { InvalidToken } from "./StoreError.js"
import type { TokenManager } from "./TokenManager.js"
import type * as Worker from "./Worker.js"

/**
 * What an app gives its session: the Schema of one client event (without `seq`), the
 * Schema of the updates sent to the tab (an object: its fields are the frame's, beside
 * `type`, `seq`, `duplicate` and `overtaken`), the token's slices the handler reads and
 * writes, and the handler: `handle`, an effect, or `decide`, a pure function (`Decided`).
 *
 * @since 0.2.0
 * @category models
 */
export type Options<Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R> = Common<
  Ev,
  EvI,
  U,
  UI,
  S
> &
  (Handled<Ev, U, S, E, R> | Decided<Ev, U, S, E>)

/**
 * What every session's definition holds besides its handler.
 *
 * @since 0.2.0
 * @category models
 */
export interface Common<Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>> {
  readonly events: Schema.Codec<Ev, EvI>
  readonly updates: Schema.Codec<U, UI>
  readonly slices: S
  /** The token's state as an update: sent at link, and as the answer to a duplicate. */
  readonly view: (values: StateManager.Values<S>) => U
  /**
   * Whether `update` is a later state than `than` (a version the handler assigns): with it,
   * an update overtaken by a newer one on its way from another worker is not sent after it.
   */
  readonly isNewer?: ((update: U, than: U) => boolean) | undefined
  /** The most frames of one socket waiting to be handled (default 10,000). */
  readonly maxPendingFrames?: number | undefined
  /**
   * The most bytes of one socket's frames waiting to be handled (default 64 frame caps:
   * 4 MiB with `layerHttpServer`'s default cap). A frame beyond either bound is answered at
   * once, as `resend` from itself (with `seq`) or `error`.
   */
  readonly maxPendingBytes?: number | undefined
  /**
   * The most bytes of frames one socket's client has not taken yet, queued or written (default
   * 16 MiB): beyond them the socket is closed with `backlogCloseCode`, and the client reconnects.
   */
  readonly maxUnsentBytes?: number | undefined
}

/**
 * A session whose handler is an effect.
 *
 * @since 0.2.0
 * @category models
 */
export interface Handled<Ev, U, S extends Record<string, StateManager.Slice<any, any>>, E, R> {
  /**
   * One event applied to the values under the token's lock: its answer (an update) and the
   * next values. A failure or a defect refuses the event (answered `error` with
   * `applied: false`; the other events of its burst are unaffected; a defect is logged,
   * and its message not sent). It runs inside a modification: keep effects
   * outside the state out of it, or make them idempotent, since a handler's effects
   * outside the state happen at least once.
   */
  readonly handle: (
    event: Ev,
    values: StateManager.Values<S>
  ) => Effect.Effect<readonly [U, StateManager.Values<S>], E, R>
  readonly decide?: undefined
}

/**
 * A session whose handler is a pure function: a burst is then one pure modification
 * (`StateManager.modifyAllPure`), which the store decides in one step when nothing stands
 * in its way. The cheaper way, for a handler that needs no effect.
 *
 * @since 0.2.0
 * @category models
 */
export interface Decided<Ev, U, S extends Record<string, StateManager.Slice<any, any>>, E> {
  /**
   * One event applied to the values under the token's lock: `Result.succeed([update, next])`,
   * or `Result.fail(error)`, which refuses the event (answered `error` with the error's
   * message and `applied: false`). `now` is the clock's time in milliseconds, read when the
   * burst's values are (under the lock, once any wait for it is over), the same for every
   * event of the burst. It must be pure: on Redis it may run more than once for a burst
   * (only the last run counts, with its own `now`). A throw is a defect: it refuses its own event only (logged, its message not
   * sent); the other events of the burst are unaffected.
   */
  readonly decide: (
    event: Ev,
    values: StateManager.Values<S>,
    now: number
  ) => Result.Result<readonly [U, StateManager.Values<S>], E>
  readonly handle?: undefined
}

/**
 * A session, as `make` defines it: mount it with `layer` and `route`.
 *
 * @since 0.2.0
 * @category models
 */
export interface SocketSession<Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R> {
  readonly options: Options<Ev, EvI, U, UI, S, E, R>
  /** The route's handler: `GET <path>?token=T&client=C`. */
  readonly handler: Effect.Effect<
    HttpServerResponse.HttpServerResponse,
    never,
    | HttpServerRequest.HttpServerRequest
    | HttpServerRequest.ParsedSearchParams
    | Upgrades
    | Sockets
    | TokenManager
    | StateManager.StateManager
    | R
  >
}

/**
 * The sockets of a session's worker, as a service: `layer` provides it, and the session's
 * route (`route`, `SocketSession.handler`) needs it, to link each socket and send it its
 * updates. An app only composes it: it has nothing to call.
 *
 * @since 0.2.0
 * @category tags
 */
export interface Sockets {
  readonly "leasehold/SocketSession/Sockets": unique symbol
}

/**
 * The WebSocket upgrader of a session's HTTP server, as a service: `layerHttpServer`
 * provides it, and the session's route (`route`, `SocketSession.handler`) needs it, to
 * complete each socket's upgrade itself. An app only composes it: it has nothing to call.
 *
 * @since 0.2.0
 * @category tags
 */
export interface Upgrades {
  readonly "leasehold/SocketSession/Upgrades": unique symbol
}

/**
 * The close code of a socket whose token a socket of another worker holds now: the
 * client reconnects.
 *
 * @since 0.2.0
 * @category constants
 */
export const lostCloseCode: number = Connection.lostCloseCode

/**
 * The close code of a socket whose client did not take what it was sent: over
 * `maxUnsentBytes` waited for it (1013, "try again later"). The client reconnects.
 *
 * @since 0.2.0
 * @category constants
 */
export const backlogCloseCode: number = Registry.backlogCloseCode

/**
 * The close code of a socket whose client opened a newer one with the same client id and
 * token on this worker before this one was seen to close (a half-open connection): the
 * newer socket keeps the token.
 *
 * @since 0.2.0
 * @category constants
 */
export const replacedCloseCode: number = Connection.replacedCloseCode

/**
 * The close code of a socket that sent a frame over the cap, refused before it was read.
 *
 * @since 0.2.0
 * @category constants
 */
export const tooBigCloseCode: number = Upgrade.tooBigCloseCode

/**
 * How long a socket whose token another socket holds waits for that one to close before
 * it gets a fresh token: a reload keeps its token, a duplicated tab gets its own.
 *
 * @since 0.2.0
 * @category constants
 */
export const reloadGrace: Duration.Duration = Connection.reloadGrace

/**
 * The clients whose last applied `seq` a token remembers; the least recently used beyond
 * them is dropped, and answered `forgotten` when it next sends.
 *
 * @since 0.2.0
 * @category constants
 */
export const maxClients: number = Seq.maxClients

/**
 * The default frame cap of `layerHttpServer`, in bytes (64 KiB).
 *
 * @since 0.2.0
 * @category constants
 */
export const defaultMaxFrameBytes = 64 * 1024

/**
 * The slice that keeps each client's last applied `seq` in the token's state. An app's
 * own slices must not use its name.
 *
 * @since 0.2.0
 * @category constants
 */
export const seqSliceName: string = Seq.seqSlice.name

/**
 * The most bytes the session's own slice (`seqSliceName`) takes stored: `layer` refuses a
 * `maxValueBytes` below it.
 *
 * @since 0.2.0
 * @category constants
 */
export const seqSliceMaxBytes: number = Seq.maxEncodedBytes

/**
 * Define a session. Throws (a definition error) when an app's slice takes the name or the
 * key of the session's own.
 *
 * @since 0.2.0
 * @category constructors
 */
export const make = <
  Ev,
  EvI,
  U,
  UI,
  const S extends Record<string, StateManager.Slice<any, any>>,
  E = never,
  R = never
>(
  options: Options<Ev, EvI, U, UI, S, E, R>
): SocketSession<Ev, EvI, U, UI, S, E, R> => {
  for (const [key, slice] of Object.entries(options.slices)) {
    if (key === Connection.seqKey || slice.name === Seq.seqSlice.name) {
      throw new TypeError(`slice ${key} takes the name of the session's own slice, ${Seq.seqSlice.name}`)
    }
  }
  return { options, handler: Connection.handler(options) }
}

/**
 * The route of a session at `path` (default `/ws`).
 *
 * @since 0.2.0
 * @category routes
 */
export const route = <Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R>(
  session: SocketSession<Ev, EvI, U, UI, S, E, R>,
  path: HttpRouter.PathInput = "/ws"
) => HttpRouter.add("GET", path, session.handler)

/**
 * A worker that delivers its updates to the session's sockets: `worker` is given the
 * session's update schema and `deliver` (`Worker.layerFromEnv`, or `Worker.layer`), and
 * the sockets of another worker's token are closed with `lostCloseCode`. Fails with
 * `InvalidConfig` when `leaseDurability` is `memory`: an event is answered once its
 * change is stored, which a lease acknowledging from memory does not wait for; and when
 * `maxValueBytes` is below `seqSliceMaxBytes`.
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = <Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R, ROut, E2, R2>(
  session: SocketSession<Ev, EvI, U, UI, S, E, R>,
  worker: (options: Worker.Options<U, UI, never>) => Layer.Layer<ROut, E2, R2>
): Layer.Layer<
  ROut | Sockets,
  E2 | LeaseholdConfig.InvalidConfig,
  R2 | Exclude<R | TokenManager | StateManager.StateManager | Mailbox | LeaseholdConfig.LeaseholdConfig, ROut>
> =>
  Layer.unwrap(
    Effect.sync(() => {
      const { updates, isNewer, maxUnsentBytes } = session.options
      const registry = Registry.make(
        updateEncoder(updates) as (type: "state" | "update", update: unknown, marks: object) => string,
        isNewer as ((update: unknown, than: unknown) => boolean) | undefined,
        maxUnsentBytes
      )
      const watch = Layer.effectDiscard(Served.serve(session.options, registry))
      const workerLayer = worker({ schema: updates, deliver: (token, update) => registry.deliver(token, update) })
      return Layer.merge(Layer.succeed(Registry.Sockets, registry), watch).pipe(Layer.provideMerge(workerLayer))
    })
  ).pipe(Layer.fresh)

/**
 * An event applied by `apply`: its update (the handler's answer), and where the update went,
 * as `Mailbox.SendOutcome` says: to the token's socket on this worker (`delivered`), to its
 * socket on another worker (`sent`: the worker that applied it, or the one the socket moved
 * to), or nowhere, the token having no socket (`no-owner`); `buffered` and `dropped` as the
 * mailbox's (the event is stored either way).
 *
 * @since 0.2.0
 * @category models
 */
export interface Applied<U> {
  readonly update: U
  readonly delivery: SendOutcome
}

/**
 * Apply one event to `token` from outside its socket (an API call, a job), on any worker of
 * the session, as the tab's own events are: under the token's lock, by the session's
 * handler, its update sent to the tab's socket. It is applied where the socket is: here when
 * the socket is on this worker or on none, otherwise by the worker holding it, asked through
 * the mailboxes. That worker leases the token while its tab is busy, so the event is served
 * from the lease's memory and goes in its group commit; the lease does not move to this worker
 * and back. Done once the event is stored.
 *
 * The worker holding the socket is waited for at most `lockExpiration`; past it (that worker
 * is frozen, or died with the socket's record still naming it) the event fails with
 * `applied: "unknown"`: the worker may apply it when it resumes, and it is never applied
 * twice. Unlike a socket frame, an event applied here carries no `seq`: an app that sends it
 * again after an unknown outcome may apply it twice.
 *
 * @since 0.2.0
 * @category accessors
 */
export const apply = <Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R>(
  session: SocketSession<Ev, EvI, U, UI, S, E, R>,
  token: string,
  event: NoInfer<Ev>
): Effect.Effect<Applied<U>, EventRefused | EventFailed | InvalidToken, Sockets | R> =>
  Effect.flatMap(Registry.Sockets, (registry) =>
    Apply.applyTo(Apply.applierOf(registry), session.options, token, event)
  )

/**
 * How often `layerHttpServer` pings each socket by default: a socket whose pong has not come
 * by the next ping is cut (a half-open connection ends within two intervals).
 *
 * @since 0.2.0
 * @category constants
 */
export const defaultPingInterval: Duration.Duration = Duration.seconds(30)

/**
 * @since 0.2.0
 * @category models
 */
export interface HttpServerOptions extends NodeHttpServer.Options {
  /** The largest message a client may send, in bytes: a larger one is refused with 1009 before it is read. */
  readonly maxFrameBytes?: number | undefined
  /** How long a socket being closed waits for the client's close before its connection is cut (default 2 s). */
  readonly closeGrace?: Duration.Input | undefined
  /**
   * How often each socket is pinged (default 30 s): one whose pong has not come by the next
   * ping is cut, and its link to the token goes with it.
   */
  readonly pingInterval?: Duration.Input | undefined
}

/**
 * A Node HTTP server for a session: `NodeHttpServer.layer` on a server whose upgrade
 * requests the session completes itself (the platform's WebSocket server buffers a
 * message whole before a route sees it, and writes each frame on its own), with the
 * upgrader the session's route needs. At shutdown every session socket is sent its close.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerHttpServer = (
  options: HttpServerOptions
): Layer.Layer<
  Upgrades | HttpServer.HttpServer | NodeServices.NodeServices | HttpPlatform.HttpPlatform | Etag.Generator,
  HttpServerError.ServeError
> => Upgrade.serverLayer(options, { maxFrameBytes: defaultMaxFrameBytes, pingInterval: defaultPingInterval })
