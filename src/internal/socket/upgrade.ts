/**
 * The socket session's WebSocket server, which bounds what a client may send in one message.
 *
 * `@effect/platform-node` upgrades a request with a `ws` server of its own, made with ws's
 * defaults unless told otherwise: a message of up to 100 MiB is buffered whole before the
 * app sees it. the session upgrades with this one, whose `maxPayload` is
 * the frame cap: a frame whose header announces more (or a fragment that takes its
 * message past it) is answered with a close frame, code 1009, before its payload is read;
 * the connection is not read any further, and is cut once the close grace has passed (the
 * client's answer to the close is queued behind what it was sending).
 *
 * The platform hands the route the request, not the raw socket and the bytes that came
 * after the request's headers: `track` keeps those for each upgrade request as the server
 * receives it, and `upgrade` completes the handshake on them.
 *
 * Each frame written is a write to the connection of its own (ws corks a frame's header and
 * payload, no more): one system call per frame, most of the cost of a small update. An
 * upgraded socket's `batch` holds the connection's writes back to the end of the turn of
 * the event loop, so that the frames of a turn leave in one write.
 */
import { createServer, type IncomingMessage, type Server } from "node:http"
import type { Duplex } from "node:stream"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpServerError from "effect/http/HttpServerError"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Layer from "effect/Layer"
import * as Socket from "effect/socket/Socket"
import { type WebSocket, WebSocketServer } from "ws"
import type * as SocketSession from "../../SocketSession.js"

/** The close code of a socket that sent a message over the frame cap (RFC 6455: "message too big"). */
export const tooBigCloseCode = 1009

/** ws's error for a message over `maxPayload`. */
const tooBigErrorCode = "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH"

/** Why an upgrade failed when its connection closed before the handshake was completed. */
const handshakeRefused = "the WebSocket handshake was refused, or its connection closed before it completed"

/** Upgrade requests received and not yet upgraded: their socket and first bytes. */
export type Pending = WeakMap<IncomingMessage, { readonly socket: Duplex; readonly head: Buffer }>

/** Keep the socket and first bytes of each upgrade request `server` receives, for `upgrade`. */
export const track = (server: Server): Pending => {
  const pending: Pending = new WeakMap()
  // Registered before the platform's own listener, so it runs first.
  server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    pending.set(request, { socket, head })
  })
  return pending
}

/** A request upgraded: its WebSocket, and the batching of its writes. */
export interface Upgraded {
  readonly socket: Socket.Socket
  /**
   * `effect`, with the frames it writes held back until the end of this turn of the event
   * loop, then sent in one write with those of the turn's other batches (frames and their
   * order unchanged). A frame waits no longer than the rest of the turn.
   */
  readonly batch: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** The bytes written to the connection and not yet taken by the kernel: what the client has not read. */
  readonly buffered: () => number
}

/** Upgrades a request to a WebSocket whose messages are bounded. */
export interface Upgrader {
  /** The largest message a client may send, in bytes. */
  readonly maxFrameBytes: number
  /**
   * The request's socket, once run (as `HttpServerRequest.upgrade`). Its release closes the
   * WebSocket and waits until the connection is closed (cut after `closeGrace`), so that
   * nothing else is written on it after the close frame.
   */
  readonly upgrade: (
    request: HttpServerRequest.HttpServerRequest
  ) => Effect.Effect<Upgraded, HttpServerError.HttpServerError>
  /**
   * Start the close of every WebSocket open (the server is shutting down): each gets a
   * close frame before its connection is ended.
   */
  readonly closeAll: Effect.Effect<void>
}

/**
 * The upgrader of `SocketSession.layerHttpServer`'s server: in a context under the public
 * `SocketSession.Upgrades`, which an app composes and never opens.
 */
export const Upgrades: Context.Service<SocketSession.Upgrades, Upgrader> = Context.Service<
  SocketSession.Upgrades,
  Upgrader
>("leasehold/SocketSession/Upgrades")

/**
 * Ping `ws` every `interval` of the clock; cut its connection when a ping went unanswered
 * for one: a connection left half-open (the client's network lost, its machine asleep)
 * ends then, with its socket's link to the token. Run for as long as the socket's scope.
 */
const keepAlive = (ws: WebSocket, interval: Duration.Duration): Effect.Effect<void> =>
  Effect.suspend(() => {
    let answered = true
    ws.on("pong", () => {
      answered = true
    })
    const tick = Effect.sync(() => {
      if (ws.readyState !== ws.OPEN) return
      if (!answered) return ws.terminate()
      answered = false
      ws.ping()
    })
    return Effect.forever(Effect.andThen(Effect.sleep(interval), tick)).pipe(
      // A defect ends the pings (the socket goes on, unwatched): said, not silent.
      Effect.catchCauseIf(
        (cause) => !Cause.hasInterruptsOnly(cause),
        (cause) => Effect.logWarning("a socket's pings stopped: the dead connection check failed", cause)
      )
    )
  })

/** Close `ws` and wait for its connection to close; cut it if that takes longer than `grace`. */
const closeFully = (ws: WebSocket, grace: Duration.Duration) =>
  Effect.callback<void>((resume) => {
    if (ws.readyState === ws.CLOSED) return resume(Effect.void)
    const timer = setTimeout(() => ws.terminate(), Duration.toMillis(grace))
    ws.once("close", () => {
      clearTimeout(timer)
      resume(Effect.void)
    })
    if (ws.readyState !== ws.CLOSING) ws.close()
  })

/** Whether a socket's failure is the close of a message over the bound (ws's error, seen through the platform's socket). */
export const isTooBig = (error: Socket.SocketError): boolean => {
  if (error.reason._tag !== "SocketReadError") return false
  const cause = error.reason.cause
  const inner = typeof cause === "object" && cause !== null && "error" in cause ? cause.error : undefined
  return typeof inner === "object" && inner !== null && "code" in inner && inner.code === tooBigErrorCode
}

/** The failure of an upgrade whose request `track` did not keep. */
const notTracked = (request: HttpServerRequest.HttpServerRequest) =>
  new HttpServerError.HttpServerError({
    reason: new HttpServerError.RequestParseError({
      request,
      description: "not an upgrade request, or not one received by SocketSession.layerHttpServer"
    })
  })

/**
 * `Upgraded.batch` over `connection`: held back from the first write of a turn of the event
 * loop to its end, so that the frames of the turn, from however many batches, leave in one
 * write.
 */
const batcher = (connection: Duplex): Upgraded["batch"] => {
  let held = false
  const release = () => {
    held = false
    connection.uncork()
  }
  const hold = Effect.sync(() => {
    if (held) return
    held = true
    connection.cork()
    setImmediate(release)
  })
  return (effect) => Effect.andThen(hold, effect)
}

/**
 * The handshake of `source` completed by `wss` on its connection and first bytes: the
 * WebSocket, kept in `open` until it closes, and its connection no longer read once it sent
 * a message over the cap.
 */
const handshake = (
  wss: WebSocketServer,
  open: Set<WebSocket>,
  source: IncomingMessage,
  raw: { readonly socket: Duplex; readonly head: Buffer }
) =>
  Effect.callback<WebSocket, Socket.SocketError>((resume) => {
    // A handshake ws refuses (no key, another version) is answered (400, 405) and
    // its connection ended, without a call back; the platform does not interrupt
    // the route then (the connection was ended, not cut). The route fails here
    // instead, and releases what it took (the tab's link) rather than wait for ever.
    const refused = () =>
      resume(
        Effect.fail(
          new Socket.SocketError({
            reason: new Socket.SocketOpenError({ kind: "Unknown", cause: new Error(handshakeRefused) })
          })
        )
      )
    if (raw.socket.destroyed || raw.socket.writableEnded) return refused()
    raw.socket.once("close", refused)
    wss.handleUpgrade(source, raw.socket, raw.head, (ws) => {
      raw.socket.off("close", refused)
      open.add(ws)
      ws.once("close", () => open.delete(ws))
      ws.on("error", (error: Error & { readonly code?: string }) => {
        // ws has sent the close frame (1009) and drains the connection unread; stop
        // reading it instead, so that the client cannot go on uploading: what it
        // has in flight stays in the kernel's buffers until the release cuts it.
        if (error.code === tooBigErrorCode) setImmediate(() => raw.socket.pause())
      })
      resume(Effect.succeed(ws))
    })
    return Effect.sync(() => raw.socket.off("close", refused))
  })

interface Options {
  readonly maxFrameBytes: number
  readonly closeGrace: Duration.Duration
  readonly pingInterval: Duration.Duration
}

/** `Upgrades.upgrade` over `wss`, for the requests tracked in `pending`. */
const upgradeWith =
  (wss: WebSocketServer, open: Set<WebSocket>, pending: Pending, options: Options) =>
  (request: HttpServerRequest.HttpServerRequest): Effect.Effect<Upgraded, HttpServerError.HttpServerError> => {
    const source = NodeHttpServerRequest.toIncomingMessage(request) as IncomingMessage
    const raw = pending.get(source)
    if (raw === undefined) return Effect.fail(notTracked(request))
    pending.delete(source)
    const batch = batcher(raw.socket)
    const socket = Socket.fromWebSocket(
      Effect.acquireRelease(handshake(wss, open, source, raw), (ws) => closeFully(ws, options.closeGrace)).pipe(
        // on the clock of the route's fiber, for as long as the socket's scope
        Effect.tap((ws) => Effect.forkScoped(keepAlive(ws, options.pingInterval))),
        Effect.map((ws) => ws as unknown as Socket.WebSocketLike)
      ),
      // one connection: its socket is not opened again once closed
      { disableReconnects: true }
    )
    const buffered = () => raw.socket.writableLength
    return Effect.map(socket, (socket): Upgraded => ({ socket, batch, buffered }))
  }

/** The upgrader of requests tracked in `pending`, for messages of at most `maxFrameBytes`. */
export const layer = (pending: Pending, options: Options) =>
  Layer.effect(
    Upgrades,
    Effect.gen(function* () {
      const wss = yield* Effect.acquireRelease(
        Effect.sync(() => new WebSocketServer({ noServer: true, maxPayload: options.maxFrameBytes })),
        (wss) => Effect.callback<void>((resume) => wss.close(() => resume(Effect.void)))
      )
      const open = new Set<WebSocket>()
      // Run before the server's close (finalizers run last to first): every WebSocket is sent its close.
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          for (const ws of open) if (ws.readyState === ws.OPEN) ws.close(1001)
        })
      )
      return Upgrades.of({
        maxFrameBytes: options.maxFrameBytes,
        closeAll: Effect.sync(() => {
          for (const ws of open) if (ws.readyState === ws.OPEN) ws.close()
        }),
        upgrade: upgradeWith(wss, open, pending, options)
      })
    })
  )

/**
 * `SocketSession.layerHttpServer`: a Node server whose upgrade requests are tracked for the
 * session to complete, served by `NodeHttpServer.layer`, with the session's upgrader.
 *
 * @internal
 */
export const serverLayer = (
  options: SocketSession.HttpServerOptions,
  defaults: { readonly maxFrameBytes: number; readonly pingInterval: Duration.Duration }
) =>
  Layer.unwrap(
    Effect.sync(() => {
      const {
        maxFrameBytes = defaults.maxFrameBytes,
        closeGrace = Duration.seconds(2),
        pingInterval = defaults.pingInterval,
        ...listen
      } = options
      const server = createServer()
      return Layer.merge(
        layer(track(server), {
          maxFrameBytes,
          closeGrace: Duration.fromInputUnsafe(closeGrace),
          pingInterval: Duration.fromInputUnsafe(pingInterval)
        }),
        NodeHttpServer.layer(() => server, listen)
      )
    })
  )
