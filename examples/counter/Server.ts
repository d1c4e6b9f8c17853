/**
 * One worker of the app: leasehold's worker layer (on Redis when `LEASEHOLD_REDIS_URL` is
 * set, else on the embedded store), the sockets it holds, and the HTTP server.
 *
 * Shutdown order follows from the layers: the HTTP server closes first (no new
 * connection; every socket's fiber is interrupted, which closes the socket and removes
 * its record; a connection still open after `connectionCloseGrace` is cut), then the
 * leasehold worker (loops stopped, leases flushed, remaining
 * records removed, store connections closed).
 */
import { createServer } from "node:http"
import type { Socket as NetSocket } from "node:net"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { InstanceId } from "leasehold/InstanceId"
import type { InvalidConfig } from "leasehold/LeaseholdConfig"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import * as RedisStore from "leasehold/RedisStore"
import type { Store } from "leasehold/Store"
import type { StoreUnavailable } from "leasehold/StoreError"
import * as TokenManager from "leasehold/TokenManager"
import * as Worker from "leasehold/Worker"
import * as Api from "./Api.js"
import type { AppSettings } from "./AppConfig.js"
import * as Connection from "./Connection.js"
import { Count } from "./Counter.js"
import * as Limits from "./Limits.js"
import { page } from "./Page.js"
import * as Sockets from "./Sockets.js"
import * as Upgrade from "./Upgrade.js"

/** Every route of the app. */
export const router = HttpRouter.empty.pipe(
  HttpRouter.get("/", Effect.succeed(HttpServerResponse.text(page, { contentType: "text/html; charset=utf-8" }))),
  HttpRouter.get("/ws", Connection.handler),
  HttpRouter.post("/api/bump", Api.bump),
  HttpRouter.get("/api/state", Api.state),
  HttpRouter.get("/healthz", Api.healthz),
  HttpRouter.get("/metrics", Api.metrics)
)

/** leasehold's settings from the environment, with the app's default data directory. */
export const configLayer = (settings: AppSettings) => LeaseholdConfig.layerConfig({ dataDir: settings.dataDir })

const storeLayer = Layer.unwrapEffect(
  Effect.map(
    LeaseholdConfig.LeaseholdConfig,
    (
      config
    ): Layer.Layer<
      Store,
      Layer.Layer.Error<typeof MemoryStore.layer> | StoreUnavailable | InvalidConfig,
      LeaseholdConfig.LeaseholdConfig
    > => (LeaseholdConfig.usesRedis(config) ? RedisStore.layer() : MemoryStore.layer)
  )
)

/**
 * The leasehold worker, delivering updates to this process's sockets (the registry looked
 * up once, when the layer is built, not at every update).
 */
export const workerLayer = (settings: AppSettings) =>
  Layer.unwrapEffect(
    Effect.map(Sockets.Sockets, (sockets) =>
      Worker.layer({ schema: Count, deliver: (token, count) => sockets.deliver(token, count) })
    )
  ).pipe(Layer.provideMerge(storeLayer), Layer.provideMerge(Sockets.layer), Layer.provideMerge(configLayer(settings)))

/** Close every socket whose token another worker took over (it found this worker gone). */
const closeLost = Layer.effectDiscard(
  Effect.gen(function* () {
    const tokens = yield* TokenManager.TokenManager
    const sockets = yield* Sockets.Sockets
    yield* Effect.forkScoped(Stream.runForEach(tokens.lost, (lost) => sockets.close(lost.token, lost.connectionId)))
  })
)

const announce = Layer.effectDiscard(
  Effect.gen(function* () {
    const instanceId = yield* InstanceId
    const config = yield* LeaseholdConfig.LeaseholdConfig
    const address = yield* HttpServer.addressFormattedWith(Effect.succeed)
    const store = LeaseholdConfig.usesRedis(config)
      ? "redis"
      : `memory${Option.match(config.dataDir, { onNone: () => "", onSome: (dir) => `, data in ${dir}` })}`
    yield* Effect.logInfo(
      `counter: listening on ${address} (pid ${process.pid}, instance ${instanceId}, store ${store}, oplock ${config.oplock ? "on" : "off"})`
    )
    yield* Effect.addFinalizer(() => Effect.logInfo(`counter: pid ${process.pid} closing`))
  })
)

/**
 * How long a closing server waits for its connections to end by themselves (a WebSocket's
 * close handshake, a request under way) before it cuts them: a peer that is frozen or gone
 * never completes a close handshake, and the server's close would wait for it, keeping the
 * leases and records behind it from their last write.
 */
export const connectionCloseGrace = Duration.seconds(2)

/**
 * The platform's per-request server span, kept only with `HTTP_TRACING=true`: it costs
 * CPU on every request whether or not a tracer exports it.
 */
export const httpTracing =
  (enabled: boolean) =>
  <A, E, R>(layer: Layer.Layer<A, E, R>): Layer.Layer<A, E, R> =>
    enabled ? layer : HttpMiddleware.withTracerDisabledWhen(layer, () => true)

/**
 * An HTTP server that remembers its open connections, and can cut them once it closes; and
 * keeps each upgrade request's socket for `Upgrade`.
 */
const trackedServer = () => {
  const server = createServer()
  const pending = Upgrade.track(server)
  const open = new Set<NetSocket>()
  server.on("connection", (socket) => {
    open.add(socket)
    socket.once("close", () => open.delete(socket))
  })
  return {
    server,
    pending,
    /** From now on, cut whatever is still open after the grace. */
    cutLingering: Effect.sync(() => {
      // A timer outside the scope being closed: it must fire while the server's close waits.
      const timer = setTimeout(() => {
        for (const socket of open) socket.destroy()
      }, Duration.toMillis(connectionCloseGrace))
      timer.unref()
      server.once("close", () => clearTimeout(timer))
    })
  }
}

/** The whole worker process: serve until interrupted. */
export const layer = (settings: AppSettings) =>
  Layer.unwrapEffect(Effect.sync(() => serving(settings, trackedServer())))

/** One server per build of `layer`. */
const serving = (settings: AppSettings, tracked: ReturnType<typeof trackedServer>) => {
  // Released before the HTTP server (which it needs), so the grace starts as closing does.
  const cutOnClose = Layer.effectDiscard(Effect.addFinalizer(() => tracked.cutLingering))
  return Layer.mergeAll(HttpServer.serve(Limits.bounded(settings)(router)), announce, closeLost).pipe(
    httpTracing(settings.httpTracing),
    Layer.provide(cutOnClose),
    Layer.provide(
      Upgrade.layer(tracked.pending, { maxFrameBytes: settings.maxFrameBytes, closeGrace: connectionCloseGrace })
    ),
    Layer.provide(
      NodeHttpServer.layer(
        () => tracked.server,
        Option.match(settings.host, {
          onNone: () => ({ port: settings.port }),
          onSome: (host) => ({ port: settings.port, host })
        })
      )
    ),
    Layer.provide(workerLayer(settings))
  )
}
