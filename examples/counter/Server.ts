/**
 * One worker of the app: leasehold's worker layer (on the store the `LEASEHOLD_*` variables
 * name: Redis when `LEASEHOLD_REDIS_URL` or `LEASEHOLD_REDIS_SENTINELS` is set, else the
 * embedded store), the sockets it holds, and the HTTP server.
 *
 * Shutdown order follows from the layers: the HTTP server closes first (no new
 * connection; every socket is sent its close, and its fiber removes its record as it ends;
 * a connection still open after `connectionCloseGrace` is cut), then the leasehold worker (loops stopped, leases flushed, remaining
 * records removed, store connections closed).
 */
import { createServer } from "node:http"
import type { Socket as NetSocket } from "node:net"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { InstanceId } from "leasehold/InstanceId"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as TokenManager from "leasehold/TokenManager"
import * as Worker from "leasehold/Worker"
import * as Api from "./Api.js"
import { type AppSettings, leaseholdEnvironment } from "./AppConfig.js"
import * as Connection from "./Connection.js"
import { Count } from "./Counter.js"
import * as Limits from "./Limits.js"
import { page } from "./Page.js"
import * as Sockets from "./Sockets.js"
import * as Upgrade from "./Upgrade.js"

/** Every route of the app. */
export const routes = Layer.mergeAll(
  HttpRouter.add("GET", "/", HttpServerResponse.text(page, { contentType: "text/html; charset=utf-8" })),
  HttpRouter.add("GET", "/ws", Connection.handler),
  HttpRouter.add("POST", "/api/bump", Api.bump),
  HttpRouter.add("GET", "/api/state", Api.state),
  HttpRouter.add("GET", "/healthz", Api.healthz),
  HttpRouter.add("GET", "/metrics", Api.metrics)
)

/**
 * The leasehold worker, delivering updates to this process's sockets (the registry looked
 * up once, when the layer is built, not at every update), on the store and with the
 * settings the `LEASEHOLD_*` variables name (and the app's default data directory).
 */
export const workerLayer = Layer.unwrap(
  Effect.map(Sockets.Sockets, (sockets) =>
    Worker.layerFromEnv({ schema: Count, deliver: (token, count) => sockets.deliver(token, count) })
  )
).pipe(Layer.provideMerge(Sockets.layer), Layer.provide(ConfigProvider.layer(leaseholdEnvironment())))

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
    enabled
      ? layer
      : Layer.provide(
          layer,
          Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true)
        )

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
export const layer = (settings: AppSettings) => Layer.unwrap(Effect.sync(() => serving(settings, trackedServer())))

/** One server per build of `layer`. */
const serving = (settings: AppSettings, tracked: ReturnType<typeof trackedServer>) => {
  const app = Layer.effectDiscard(
    Effect.gen(function* () {
      const routed = yield* HttpRouter.toHttpEffect(routes)
      const upgrades = yield* Upgrade.Upgrades
      // Interruptible, as a request is when its client goes or the server closes.
      yield* HttpServer.serveEffect(Effect.interruptible(Limits.bounded(settings)(routed)))
      // Run before the server's own close (finalizers run last to first): the grace starts as
      // closing does, and every WebSocket is sent its close before its connection is ended.
      yield* Effect.addFinalizer(() => Effect.andThen(tracked.cutLingering, upgrades.closeAll))
    })
  )
  return Layer.mergeAll(app, announce, closeLost).pipe(
    httpTracing(settings.httpTracing),
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
    Layer.provide(workerLayer)
  )
}
