/**
 * The baseline of `bench:events`: the example's socket protocol in the example's stack
 * (effect/http's router and server, effect/socket's WebSocket through the platform's
 * upgrade, on Node), with no leasehold. A
 * bump is a read-increment-write on an in-process Map; frames are handled one at a time
 * by one fiber in the order they arrived, and frames out go through the connection's
 * queue to its writer, as in the example. Nothing is locked, fenced, stored or delivered
 * through a mailbox: what is left is the cost of the stack per event.
 *
 * With `BATCH_WRITES=1` its socket's writes are held back to the end of each turn of the
 * event loop, as the socket session's are (src/internal/socket/upgrade.ts): one write to the
 * connection for the frames of a turn rather than one per frame. Without it, this is the
 * minimal server; with it, the same server with the example's one change to its socket path.
 *
 * It also answers `GET /healthz` with a small JSON body, and with `WORKERS=N` (N > 1) a
 * `node:cluster` primary forks N such servers sharing the port, as the example's primary
 * does: `bench:e2e` measures its floor beside the app's and the plain server's (the
 * platform's share of the app's floor).
 *
 *   PORT=3001 HOST=127.0.0.1 [BATCH_WRITES=1] [WORKERS=4] node --import tsx bench/events-baseline.ts
 *
 * Prints `baseline: listening on <port>` once it serves (every worker, with `WORKERS`).
 */
import cluster from "node:cluster"
import { randomUUID } from "node:crypto"
import { createServer } from "node:http"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Socket from "effect/socket/Socket"

interface Count {
  readonly n: number
  readonly v: number
}

const counts = new Map<string, Count>()

const batchWrites = process.env.BATCH_WRITES === "1"

/** The connection's writes held back from the first of a turn to its end (a no-op without BATCH_WRITES). */
const holder = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<void> => {
  if (!batchWrites) return Effect.void
  // An upgrade request's socket is the connection itself.
  const raw = NodeHttpServerRequest.toIncomingMessage(request).socket
  let held = false
  const release = () => {
    held = false
    raw.uncork()
  }
  return Effect.sync(() => {
    if (held) return
    held = true
    raw.cork()
    setImmediate(release)
  })
}

const ws = Effect.gen(function* () {
  const request = yield* HttpServerRequest.HttpServerRequest
  const params = yield* HttpServerRequest.ParsedSearchParams
  const token = typeof params.token === "string" ? params.token : randomUUID()
  const socket = yield* request.upgrade
  const hold = holder(request)
  const { write } = yield* socket.writer
  const outgoing = yield* Queue.unbounded<string>()
  const incoming = yield* Queue.unbounded<string>()
  const decoder = new TextDecoder()
  yield* Queue.offer(outgoing, JSON.stringify({ type: "hello", token, instanceId: "baseline" }))
  const handle = (text: string) =>
    Effect.suspend(() => {
      const message = JSON.parse(text) as { type?: unknown; by?: unknown }
      if (message.type !== "bump" || typeof message.by !== "number" || !Number.isSafeInteger(message.by)) {
        return Queue.offer(outgoing, JSON.stringify({ type: "error", message: "malformed message" }))
      }
      const count = counts.get(token) ?? { n: 0, v: 0 }
      const next = { n: count.n + message.by, v: count.v + 1 }
      counts.set(token, next)
      return Queue.offer(outgoing, JSON.stringify({ type: "update", n: next.n, v: next.v }))
    })
  yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(incoming), handle)))
  yield* Effect.forkScoped(
    Effect.forever(Effect.flatMap(Queue.take(outgoing), (frame) => Effect.andThen(hold, write(frame)))).pipe(
      Effect.ignore
    )
  )
  const count = counts.get(token) ?? { n: 0, v: 0 }
  yield* Queue.offer(outgoing, JSON.stringify({ type: "state", n: count.n, v: count.v }))
  // The WebSocket opens here (the handshake completed), its messages read until it closes.
  const reading = Effect.gen(function* () {
    const pull = yield* socket.reader
    while (true) {
      for (const data of yield* pull.pull) {
        Queue.offerUnsafe(incoming, typeof data === "string" ? data : decoder.decode(data))
      }
    }
  }).pipe(Effect.scoped)
  yield* reading.pipe(Effect.catchIf(Socket.isSocketError, () => Effect.void))
  return HttpServerResponse.empty()
}).pipe(Effect.scoped)

const routes = Layer.mergeAll(
  HttpRouter.add("GET", "/ws", ws),
  HttpRouter.add("GET", "/healthz", HttpServerResponse.jsonUnsafe({ status: "ok", pid: process.pid }))
)

const port = Number(process.env.PORT ?? "3001")
const host = process.env.HOST ?? "127.0.0.1"
const workers = Number(process.env.WORKERS ?? "1")

if (workers > 1 && cluster.isPrimary) {
  let listening = 0
  cluster.on("listening", () => {
    if (++listening === workers) console.log(`baseline: listening on ${port}`)
  })
  for (let i = 0; i < workers; i++) cluster.fork()
} else {
  const announce = Layer.effectDiscard(
    Effect.sync(() => {
      if (workers === 1) console.log(`baseline: listening on ${port}`)
    })
  )
  const app = Layer.effectDiscard(
    Effect.gen(function* () {
      const routed = yield* HttpRouter.toHttpEffect(routes)
      yield* HttpServer.serveEffect(Effect.interruptible(routed))
    })
  )
  // As the example by default: no per-request server span.
  Layer.mergeAll(app, announce).pipe(
    Layer.provide(Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true)),
    Layer.provide(NodeHttpServer.layer(() => createServer(), { port, host })),
    Layer.launch,
    NodeRuntime.runMain
  )
}
