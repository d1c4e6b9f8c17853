/**
 * One worker of the app: leasehold's worker (on the store the `LEASEHOLD_*` variables name)
 * delivering to the counter's socket session, and the HTTP server. The server closes first
 * (every socket sent its close, its record removed; a connection still open after
 * `connectionCloseGrace` cut), then the worker (leases flushed, records removed).
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

/** The leasehold worker, delivering to this process's sockets, as `LEASEHOLD_*` (and the app's data directory) say. */
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
 * How long a closing server waits for its connections to end by themselves before it cuts
 * them: a frozen peer never completes a close, and would hold the leases behind it.
 */
export const connectionCloseGrace = Duration.seconds(2)

/** The platform's per-request server span, only with `HTTP_TRACING=true`: it costs CPU, exported or not. */
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
