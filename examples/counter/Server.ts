/**
 * One worker of the app: leasehold's worker layer (on the store the `LEASEHOLD_*` variables
 * name: Redis when `LEASEHOLD_REDIS_URL` or `LEASEHOLD_REDIS_SENTINELS` is set, else the
 * embedded store) delivering to the counter's socket session, and the HTTP server.
 *
 * Shutdown order follows from the layers: the HTTP server closes first (no new
 * connection; every socket is sent its close, and its fiber removes its record as it ends;
 * a connection still open after `connectionCloseGrace` is cut), then the leasehold worker
 * (loops stopped, leases flushed, remaining records removed, store connections closed).
 */
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { InstanceId } from "leasehold/InstanceId"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as SocketSession from "leasehold/SocketSession"
import * as Worker from "leasehold/Worker"
import * as Api from "./Api.js"
import { type AppSettings, leaseholdEnvironment } from "./AppConfig.js"
import { session } from "./Counter.js"
import * as Limits from "./Limits.js"
import { client, clientPath, page } from "./Page.js"

/** Every route of the app. */
export const routes = Layer.mergeAll(
  HttpRouter.add("GET", "/", HttpServerResponse.text(page, { contentType: "text/html; charset=utf-8" })),
  HttpRouter.add("GET", clientPath, HttpServerResponse.text(client, { contentType: "text/javascript; charset=utf-8" })),
  SocketSession.route(session, "/ws"),
  HttpRouter.add("POST", "/api/bump", Api.bump),
  HttpRouter.add("GET", "/api/state", Api.state),
  HttpRouter.add("GET", "/healthz", Api.healthz),
  HttpRouter.add("GET", "/metrics", Api.metrics)
)

/**
 * The leasehold worker, delivering updates to this process's sockets, on the store and with
 * the settings the `LEASEHOLD_*` variables name (and the app's default data directory).
 */
export const workerLayer = SocketSession.layer(session, Worker.layerFromEnv).pipe(
  Layer.provide(ConfigProvider.layer(leaseholdEnvironment()))
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

/** The whole worker process: serve until interrupted. */
export const layer = (settings: AppSettings) => {
  const app = Layer.effectDiscard(
    Effect.gen(function* () {
      const routed = yield* HttpRouter.toHttpEffect(routes)
      // Interruptible, as a request is when its client goes or the server closes.
      yield* HttpServer.serveEffect(Effect.interruptible(Limits.bounded(settings)(routed)))
    })
  )
  return Layer.mergeAll(app, announce).pipe(
    httpTracing(settings.httpTracing),
    Layer.provide(
      SocketSession.layerHttpServer({
        port: settings.port,
        ...Option.match(settings.host, { onNone: () => ({}), onSome: (host) => ({ host }) }),
        maxFrameBytes: settings.maxFrameBytes,
        closeGrace: connectionCloseGrace,
        gracefulShutdownTimeout: connectionCloseGrace
      })
    ),
    Layer.provide(workerLayer)
  )
}
