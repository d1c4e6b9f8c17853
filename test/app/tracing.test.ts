/**
 * The example's HTTP tracing setting: the platform's per-request server span only with
 * `HTTP_TRACING=true`.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Tracer from "effect/Tracer"
import { appConfig, environment } from "../../examples/counter/AppConfig.js"
import { httpTracing } from "../../examples/counter/Server.js"

/** The server spans started while `effect` runs, under a tracer that records them. */
const serverSpans = (enabled: boolean) =>
  Effect.gen(function* () {
    const kinds: Array<Tracer.SpanKind> = []
    const base = yield* Effect.tracer
    const recording = Tracer.make({
      span: (options) => {
        kinds.push(options.kind)
        return base.span(options)
      },
      ...(base.context === undefined ? {} : { context: base.context })
    })
    const routes = HttpRouter.add("GET", "/x", HttpServerResponse.text("ok"))
    // served as the app serves its routes
    const server = httpTracing(enabled)(
      Layer.effectDiscard(Effect.flatMap(HttpRouter.toHttpEffect(routes), (app) => HttpServer.serveEffect(app)))
    )
    yield* Effect.scoped(
      Effect.gen(function* () {
        const client = yield* HttpClient.HttpClient
        for (let i = 0; i < 3; i++) {
          const response = yield* client.get("/x")
          assert.strictEqual(yield* response.text, "ok")
        }
      }).pipe(Effect.provide(Layer.provideMerge(server, NodeHttpServer.layerTest)), Effect.withTracer(recording))
    )
    return kinds.filter((kind) => kind === "server").length
  })

describe("counter HTTP tracing", () => {
  it.effect("off: requests make no server span; on: one each", () =>
    Effect.gen(function* () {
      assert.strictEqual(yield* serverSpans(false), 0)
      assert.strictEqual(yield* serverSpans(true), 3)
    })
  )

  it.effect("HTTP_TRACING: off by default, on when true, refused when not a boolean", () =>
    Effect.gen(function* () {
      const read = (env: Record<string, string>) => Effect.result(appConfig.parse(environment(env)))
      const unset = yield* read({})
      assert.isTrue(Result.isSuccess(unset) && unset.success.httpTracing === false)
      const on = yield* read({ HTTP_TRACING: "true" })
      assert.isTrue(Result.isSuccess(on) && on.success.httpTracing === true)
      assert.isTrue(Result.isFailure(yield* read({ HTTP_TRACING: "sometimes" })))
    })
  )
})
