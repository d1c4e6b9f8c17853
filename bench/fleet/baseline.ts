/**
 * A baseline worker of `bench:fleet`: the example's stack without leasehold, as
 * bench/events-baseline.ts has it (effect/http's router and server, effect/socket's WebSocket,
 * frames handled in order by one fiber per socket, the socket's writes held to the end of each
 * turn of the event loop), speaking the session's wire protocol as far as the fleet's load
 * uses it: `hello` and `state` on link, each event `{"type":"bump","by":K,"seq":S}` answered
 * `{"type":"update","n","v","seq":S}` once the design applied it, updates from the API without
 * `seq`. Only the state module differs between the baselines (bench/fleet/designs.ts says how
 * each stores a count and routes an API call).
 *
 * Routes: `GET /ws?token=T`, `POST /api/bump?token=T&by=K`, `GET /api/state?token=T` (on the
 * worker that holds the tab's socket), `POST /internal/bump` (a call forwarded to the owner),
 * `GET /healthz`.
 *
 *   FLEET_IMPL=bare|bare-durable|reflex-style FLEET_WORKER_ID=0 FLEET_PEERS=3001,3002 \
 *   FLEET_REDIS_NODES=127.0.0.1:6379[,…] [FLEET_CLUSTER=1] PORT=3001 node --import tsx bench/fleet/baseline.ts
 *
 * Prints `baseline: listening on <port>` once it serves.
 */
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
import { Cluster, Redis } from "ioredis"
import * as Designs from "./designs.js"

const name = process.env.FLEET_IMPL as Designs.Name
if (!Designs.names.includes(name)) throw new Error(`FLEET_IMPL must be one of ${Designs.names.join(", ")}`)
const port = Number(process.env.PORT ?? "3001")
const workerId = process.env.FLEET_WORKER_ID ?? "0"
const peers = new Map((process.env.FLEET_PEERS ?? "").split(",").map((peer, i) => [String(i), Number(peer)] as const))
const nodes = (process.env.FLEET_REDIS_NODES ?? "127.0.0.1:6379").split(",").map((node) => {
  const [host, nodePort] = node.split(":")
  return { host: host!, port: Number(nodePort) }
})
const redis = process.env.FLEET_CLUSTER === "1" ? new Cluster(nodes) : new Redis(nodes[0]!)
const subscribers = nodes.map((node) => new Redis(node))

/** The sockets of this worker, by token: how an update reaches one. */
const sockets = new Map<string, (frame: string) => void>()

const design = await Designs.make({
  name,
  workerId,
  peers,
  redis,
  subscribers,
  push: (token, count) => sockets.get(token)?.(JSON.stringify({ type: "update", n: count.n, v: count.v })),
  holds: (token) => sockets.has(token)
})

/** The connection's writes held back from the first of a turn to its end, as the session's are. */
const holder = (request: HttpServerRequest.HttpServerRequest): Effect.Effect<void> => {
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

const single = (params: Readonly<Record<string, string | ReadonlyArray<string>>>, key: string) => {
  const value = params[key]
  return typeof value === "string" ? value : value?.[0]
}

interface Event {
  readonly type?: unknown
  readonly by?: unknown
  readonly seq?: unknown
}

const ws = Effect.gen(function* () {
  const request = yield* HttpServerRequest.HttpServerRequest
  const token = single(yield* HttpServerRequest.ParsedSearchParams, "token") ?? randomUUID()
  const socket = yield* request.upgrade
  const hold = holder(request)
  const { write } = yield* socket.writer
  const outgoing = yield* Queue.unbounded<string>()
  const incoming = yield* Queue.unbounded<string>()
  const decoder = new TextDecoder()
  yield* Queue.offer(outgoing, JSON.stringify({ type: "hello", token, instanceId: `baseline-${workerId}` }))
  const handle = (text: string) =>
    Effect.suspend(() => {
      const event = JSON.parse(text) as Event
      if (event.type !== "bump" || typeof event.by !== "number" || !Number.isSafeInteger(event.by)) {
        return Queue.offer(outgoing, JSON.stringify({ type: "error", message: "malformed message", seq: event.seq }))
      }
      return Effect.flatMap(
        Effect.promise(() => design.socketBump(token, event.by as number)),
        (count) => Queue.offer(outgoing, JSON.stringify({ type: "update", n: count.n, v: count.v, seq: event.seq }))
      )
    })
  yield* Effect.forkScoped(Effect.forever(Effect.flatMap(Queue.take(incoming), handle)))
  yield* Effect.forkScoped(
    Effect.forever(Effect.flatMap(Queue.take(outgoing), (frame) => Effect.andThen(hold, write(frame)))).pipe(
      Effect.ignore
    )
  )
  const push = (frame: string) => Queue.offerUnsafe(outgoing, frame)
  sockets.set(token, push)
  yield* Effect.addFinalizer(() =>
    Effect.suspend(() => {
      if (sockets.get(token) !== push) return Effect.void
      sockets.delete(token)
      return Effect.promise(() => design.unlinked(token))
    })
  )
  yield* Effect.promise(() => design.linked(token))
  const count = yield* Effect.promise(() => design.read(token))
  yield* Queue.offer(outgoing, JSON.stringify({ type: "state", n: count.n, v: count.v }))
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

/** A route taking `token` and `by` from the query: `run`'s count as JSON, 400 without a token. */
const bumpRoute = (run: (token: string, by: number) => Promise<Designs.Count>) =>
  Effect.gen(function* () {
    const params = yield* HttpServerRequest.ParsedSearchParams
    const token = single(params, "token")
    if (token === undefined) return HttpServerResponse.jsonUnsafe({ error: "missing token" }, { status: 400 })
    const count = yield* Effect.promise(() => run(token, Number(single(params, "by") ?? "1")))
    return HttpServerResponse.jsonUnsafe(count)
  })

const routes = Layer.mergeAll(
  HttpRouter.add("GET", "/ws", ws),
  HttpRouter.add("POST", "/api/bump", bumpRoute(design.apiBump)),
  HttpRouter.add("POST", "/internal/bump", bumpRoute(design.forwardedBump)),
  HttpRouter.add(
    "GET",
    "/api/state",
    bumpRoute((token) => design.read(token))
  ),
  HttpRouter.add("GET", "/healthz", HttpServerResponse.jsonUnsafe({ status: "ok", pid: process.pid }))
)

const announce = Layer.effectDiscard(Effect.sync(() => console.log(`baseline: listening on ${port}`)))
const app = Layer.effectDiscard(
  Effect.gen(function* () {
    const routed = yield* HttpRouter.toHttpEffect(routes)
    yield* HttpServer.serveEffect(Effect.interruptible(routed))
  })
)
// As the example by default: no per-request server span.
Layer.mergeAll(app, announce).pipe(
  Layer.provide(Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true)),
  Layer.provide(NodeHttpServer.layer(() => createServer(), { port, host: "127.0.0.1" })),
  Layer.launch,
  NodeRuntime.runMain
)
