/** The HTTP API: bump and read a tab's counter from any worker, health and metrics. */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { Health } from "leasehold/Health"
import { InstanceId } from "leasehold/InstanceId"
import { LeaseholdConfig, usesRedis } from "leasehold/LeaseholdConfig"
import * as Prometheus from "leasehold/Prometheus"
import * as SocketSession from "leasehold/SocketSession"
import { tokenProblem } from "leasehold/TokenManager"
import * as Counter from "./Counter.js"

/** A request the API cannot serve as asked: answered 400. */
export class BadRequest extends Data.TaggedError("BadRequest")<{ readonly message: string }> {}

/** No answer from the store within the lock expiration: answered 503. */
export class Timeout extends Data.TaggedError("Timeout")<{ readonly message: string }> {}

const json = (body: unknown, status = 200) => HttpServerResponse.jsonUnsafe(body, { status })

const single = (params: Readonly<Record<string, string | ReadonlyArray<string>>>, name: string): string | undefined => {
  const value = params[name]
  return typeof value === "string" ? value : value?.[0]
}

const tokenParam = Effect.gen(function* () {
  const token = single(yield* HttpServerRequest.ParsedSearchParams, "token")
  if (token === undefined) return yield* new BadRequest({ message: "missing query parameter token" })
  const problem = tokenProblem(token)
  if (problem !== undefined) return yield* new BadRequest({ message: `invalid token: ${problem}` })
  return token
})

const decodeStep = Schema.decodeUnknownResult(Schema.NumberFromString.pipe(Schema.decodeTo(Counter.Step)))

const stepParam = Effect.gen(function* () {
  const by = single(yield* HttpServerRequest.ParsedSearchParams, "by")
  if (by === undefined) return 1
  const step = decodeStep(by.trim() === "" ? "x" : by)
  if (Result.isFailure(step)) {
    return yield* new BadRequest({ message: `invalid by ${JSON.stringify(by)}: ${step.failure.message}` })
  }
  return step.success
})

/** An API failure as JSON: 400 for bad input, 503 while the store cannot serve (or ack), 500 for a defect. */
const answerFailure = <A, E extends { readonly _tag: string; readonly message: string }, R>(
  effect: Effect.Effect<A, E, R>
) =>
  Effect.gen(function* () {
    const { lockExpiration } = yield* LeaseholdConfig
    return yield* effect.pipe(
      // An unreachable store fails each command after its timeout; this bounds the whole request.
      Effect.timeoutOrElse({
        duration: lockExpiration,
        orElse: () =>
          Effect.fail(
            new Timeout({
              message: "the store did not answer within the lock expiration; whether the request took effect is unknown"
            })
          )
      }),
      Effect.catch((error: E | Timeout) => {
        // an event the session applied reports its own failure's tag: the handler's, or the store's
        const code = "code" in error && typeof error.code === "string" ? error.code : error._tag
        const status =
          error._tag === "EventRefused" || ["BadRequest", "InvalidToken", "CounterOverflow"].includes(error._tag)
            ? 400
            : error._tag === "EventFailed" ||
                ["StoreUnavailable", "StoreRefused", "NotAcknowledged", "LockExpired", "Timeout"].includes(error._tag)
              ? 503
              : 500
        const log = status === 400 ? Effect.void : Effect.logWarning(`api: ${error.message}`)
        return Effect.as(log, json({ error: error.message, code }, status))
      })
    )
  })

/**
 * `POST /api/bump?token=T&by=K`: the tab's own `bump` event, applied by the session where
 * the tab's socket is (on the worker holding it, whose lease then serves it from memory),
 * and its update sent to that socket. `delivery`: `delivered` (the socket is on this
 * worker), `sent` (on the worker that applied it), `no-owner` (the tab has no socket).
 */
export const bump = answerFailure(
  Effect.gen(function* () {
    const token = yield* tokenParam
    const by = yield* stepParam
    const instanceId = yield* InstanceId
    const { update, delivery } = yield* SocketSession.apply(Counter.session, token, { type: "bump", by })
    return json({ n: update.n, v: update.v, instanceId, delivery })
  })
)

/** `GET /api/state?token=T` */
export const state = answerFailure(
  Effect.gen(function* () {
    const count = yield* Counter.read(yield* tokenParam)
    return json({ n: count.n, v: count.v })
  })
)

/** `GET /healthz`: 200 when every loop runs, 503 with the same body otherwise. */
export const healthz = Effect.gen(function* () {
  const health = yield* Health
  const config = yield* LeaseholdConfig
  const loops = yield* health.loops
  const healthy = yield* health.healthy
  return json(
    {
      instanceId: yield* InstanceId,
      pid: process.pid,
      store: usesRedis(config) ? "redis" : "memory",
      loops: loops.map(({ name, state }) => ({
        name,
        state: state._tag.toLowerCase(),
        since: new Date(state.since).toISOString(),
        ...(state._tag === "Retrying"
          ? { error: state.lastError }
          : state._tag === "Failed"
            ? { error: state.error }
            : {})
      }))
    },
    healthy ? 200 : 503
  )
})

/** `GET /metrics` */
export const metrics = Effect.map(Prometheus.render, (body) =>
  HttpServerResponse.text(body, { contentType: Prometheus.contentType })
)
