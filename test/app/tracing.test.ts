/**
 * The example's HTTP tracing setting: the platform's per-request server span only with
 * `HTTP_TRACING=true`.
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Tracer from "effect/Tracer"
import { appConfig } from "../../examples/counter/AppConfig.js"
import { httpTracing } from "../../examples/counter/Server.js"

/** The server spans started while `effect` runs, under a tracer that records them. */
const serverSpans = (enabled: boolean) =>
  Effect.gen(function* () {
    const kinds: Array<Tracer.SpanKind> = []
    const base = yield* Effect.tracer
    const recording = Tracer.make({
      span: (name, parent, context, links, startTime, kind, options) => {
        kinds.push(kind)
        return base.span(name, parent, context, links, startTime, kind, options)
      },
      context: (f, fiber) => base.context(f, fiber)
    })
    const router = HttpRouter.empty.pipe(HttpRouter.get("/x", Effect.succeed(HttpServerResponse.text("ok"))))
    const server = httpTracing(enabled)(HttpServer.serve(router))
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
      const read = (env: Record<string, string>) =>
        Effect.result(Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))
      const unset = yield* read({})
      assert.isTrue(unset._tag === "Right" && unset.right.httpTracing === false)
      const on = yield* read({ HTTP_TRACING: "true" })
      assert.isTrue(on._tag === "Right" && on.right.httpTracing === true)
      assert.strictEqual((yield* read({ HTTP_TRACING: "sometimes" }))._tag, "Left")
    })
  )
})
