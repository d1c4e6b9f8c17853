/**
 * An event applied to a token from outside its socket (`SocketSession.apply`): an API call,
 * a job. It is applied where the tab's socket is: on this worker when the socket is here or
 * nowhere, else by the worker holding it, asked over the mailboxes (`mailbox/calls.ts`).
 * That worker leases the token while its tab is busy, so the event joins the lease's queue,
 * is served from memory and goes in its group commit, and its update reaches the socket
 * there; the lease does not move to the caller's worker and back.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type { SendOutcome } from "../../Mailbox.js"
import type { Options } from "../../SocketSession.js"
import { EventFailed, EventRefused } from "../../SocketSessionError.js"
import type * as StateManager from "../../StateManager.js"
import { InvalidToken } from "../../StoreError.js"
import type { TokenManager } from "../../TokenManager.js"
import { type Answer, type Caller, call } from "../mailbox/calls.js"
import type { Send } from "../mailbox/untyped.js"
import { describeParseError, parseSafely } from "../parse.js"
import { tokenProblem } from "../validate.js"
import { appliedAfter } from "./batch.js"
import { type Outcome as BurstOutcome, codeOf, type Judging, judgeEffect, judgePure, messageOf } from "./burst.js"
import type { Registry } from "./registry.js"

type Slices = Record<string, StateManager.Slice<any, any>>

/**
 * Where an applied event's update went, as `Mailbox.SendOutcome` says: to the socket on
 * this worker (`delivered`), to the socket of another worker (`sent`: the worker that
 * applied it, or the one the socket moved to), or nowhere (`no-owner`; `buffered` and
 * `dropped` as the mailbox's).
 *
 * @internal
 */
export type Delivery = SendOutcome

/** An event's failure, as a call's answer carries it. */
type Failed = Extract<Answer, { readonly _tag: "Failed" }>

/** What one event came to: its update and where it went, or its failure. */
type Outcome<U> = { readonly _tag: "Applied"; readonly update: U; readonly delivery: Delivery } | Failed

/**
 * What applying an event on a worker needs, set by `SocketSession.layer` for its registry.
 *
 * @internal
 */
export interface Applier<Ev, EvI, U, UI, S extends Slices, E, R> {
  readonly definition: Options<Ev, EvI, U, UI, S, E, R>
  readonly states: StateManager.StateManager.Service
  readonly tokens: TokenManager.Service
  /** The worker's registry of sockets: the applier is found by it (`applierOf`). */
  readonly registry: Registry
  /** The worker's mailbox's send: the update of an event applied here. */
  readonly send: Send
  readonly caller: Caller
  /** How long a caller waits for the worker holding the socket: the lock expiration. */
  readonly timeout: Duration.Duration
  /** The layer's context: a call from another worker runs the handler in it. */
  readonly context: Context.Context<R>
  readonly encodeEvent: (event: Ev) => Result.Result<unknown, Schema.SchemaError>
  readonly decodeEvent: (input: unknown) => Result.Result<Ev, Schema.SchemaError>
  readonly encodeUpdate: (update: U) => Result.Result<unknown, Schema.SchemaError>
  readonly decodeUpdate: (input: unknown) => Result.Result<U, Schema.SchemaError>
}

/** The applier of a session's worker, made once by its layer. */
export const makeApplier = <Ev, EvI, U, UI, S extends Slices, E, R>(
  parts: Pick<
    Applier<Ev, EvI, U, UI, S, E, R>,
    "definition" | "states" | "tokens" | "registry" | "send" | "caller" | "timeout" | "context"
  >
): Applier<Ev, EvI, U, UI, S, E, R> => {
  const events = Schema.toCodecJson(parts.definition.events)
  const updates = Schema.toCodecJson(parts.definition.updates)
  return {
    ...parts,
    encodeEvent: parseSafely(Schema.encodeUnknownResult(events)) as Applier<Ev, EvI, U, UI, S, E, R>["encodeEvent"],
    decodeEvent: parseSafely(Schema.decodeUnknownResult(events)) as Applier<Ev, EvI, U, UI, S, E, R>["decodeEvent"],
    encodeUpdate: parseSafely(Schema.encodeUnknownResult(updates)) as Applier<Ev, EvI, U, UI, S, E, R>["encodeUpdate"],
    decodeUpdate: parseSafely(Schema.decodeUnknownResult(updates)) as Applier<Ev, EvI, U, UI, S, E, R>["decodeUpdate"]
  }
}

const appliers = new WeakMap<Registry, Applier<any, any, any, any, any, any, any>>()

/** Set by `SocketSession.layer`: the applier of the worker whose registry is `registry`. */
export const install = (applier: Applier<any, any, any, any, any, any, any>): void => {
  appliers.set(applier.registry, applier)
}

/** The applier of the worker whose registry is `registry`. */
export const applierOf = (registry: Registry): Applier<any, any, any, any, any, any, any> => {
  const applier = appliers.get(registry)
  if (applier === undefined) throw new Error("a socket session's registry without its layer")
  return applier
}

const refused = (message: string, code: string): Failed => ({
  _tag: "Failed",
  message,
  code,
  refused: true,
  applied: false
})

/** A failed modification as an outcome: whether it may have been written is `appliedAfter`'s. */
const failedWith = (cause: Cause.Cause<unknown>): Failed => {
  const error = Cause.findErrorOption(cause)
  return {
    _tag: "Failed",
    // a defect's own text (a stack) is not told: it is logged where it happened
    message: Option.isSome(error) ? messageOf(error.value) : "the event failed unexpectedly",
    code: Option.isSome(error) ? codeOf(error.value, "Failed") : "Defect",
    refused: false,
    applied: appliedAfter(cause) === false ? false : "unknown"
  }
}

/** What the handler made of the event in its modification. */
type Decided<U> = { readonly _tag: "Applied"; readonly update: U } | Failed

/** The event as a burst of one, without `seq`, on `values`: judged as a socket's events are (`burst.ts`). */
const burstOf = <Ev, U, S extends Slices>(event: Ev, values: StateManager.Values<S>) => ({
  items: [{ parsed: { seq: undefined, event: Result.succeed(event) }, seq: undefined }] as const,
  // no client: the `seq` slice is neither read nor written
  judging: { seq: undefined as never, app: values, outcomes: [] } as Judging<S, U>
})

/** What the burst of one came to: without a client, only applied or refused. */
const decidedOf = <U, S extends Slices>(judging: Judging<S, U>): readonly [Decided<U>, StateManager.Values<S>] => {
  const outcome = judging.outcomes[0]!
  if (outcome._tag === "Applied") return [outcome, judging.app]
  const { message, code } = outcome as Extract<BurstOutcome<U>, { readonly _tag: "Refused" }>
  return [refused(message, code), judging.app]
}

/** The event in one modification of the token: a pure one for a pure handler (one store step). */
const modification = <Ev, EvI, U, UI, S extends Slices, E, R>(
  applier: Applier<Ev, EvI, U, UI, S, E, R>,
  token: string,
  event: Ev
): Effect.Effect<Decided<U>, unknown, R> => {
  const { definition, states } = applier
  const { decide, handle, slices, view } = definition
  if (decide !== undefined) {
    const defects: Array<unknown> = []
    return Effect.clockWith((clock) =>
      states.modifyAllPure(
        token,
        slices,
        (values) => {
          // only the last run counts: on Redis the function may run twice
          defects.length = 0
          const { items, judging } = burstOf<Ev, U, S>(event, values)
          judgePure(judging, items, undefined, { view, decide }, clock.currentTimeMillisUnsafe(), defects)
          return decidedOf(judging)
        },
        { event: "apply" }
      )
    ).pipe(
      Effect.ensuring(
        Effect.suspend(() =>
          Effect.forEach(
            defects,
            (defect) => Effect.logError(`token ${token}: an event's handler died`, Cause.die(defect)),
            {
              discard: true
            }
          )
        )
      )
    )
  }
  return states.modifyAll(
    token,
    slices,
    (values) => {
      const { items, judging } = burstOf<Ev, U, S>(event, values)
      return Effect.map(judgeEffect(judging, items, undefined, { view, handle: handle! }, `token ${token}`), () =>
        decidedOf(judging)
      )
    },
    { event: "apply" }
  )
}

/**
 * The update of an event applied here, to the token's socket, through the mailbox's send:
 * on this worker it is delivered at once, else appended for the worker holding the socket
 * now (a socket that moved, or linked meanwhile). The event is stored: an update the mailbox
 * refuses costs the update, not the event.
 */
const deliver = <Ev, EvI, U, UI, S extends Slices, E, R>(
  applier: Applier<Ev, EvI, U, UI, S, E, R>,
  token: string,
  update: U
): Effect.Effect<Delivery> =>
  Effect.catch(applier.send(token, update), (error) =>
    Effect.as(
      Effect.logWarning(`token ${token}: the update of an applied event not sent: ${error.message}`),
      "dropped" as const
    )
  )

/** The event applied on this worker, its update sent to the token's socket. */
const applyHere = <Ev, EvI, U, UI, S extends Slices, E, R>(
  applier: Applier<Ev, EvI, U, UI, S, E, R>,
  token: string,
  event: Ev
): Effect.Effect<Outcome<U>, never, R> =>
  Effect.flatMap(Effect.exit(modification(applier, token, event)), (exit): Effect.Effect<Outcome<U>> => {
    if (Exit.isFailure(exit)) {
      return Cause.hasInterruptsOnly(exit.cause)
        ? Effect.failCause(exit.cause as Cause.Cause<never>)
        : Effect.succeed(failedWith(exit.cause))
    }
    const decided = exit.value
    if (decided._tag !== "Applied") return Effect.succeed(decided)
    return Effect.map(deliver(applier, token, decided.update), (delivery) => ({ ...decided, delivery }))
  })

/**
 * A call from another worker: its event decoded, applied here, and its update encoded as
 * the reply's value. Runs the handler in the layer's context.
 *
 * @internal
 */
export const serveCall =
  <Ev, EvI, U, UI, S extends Slices, E, R>(applier: Applier<Ev, EvI, U, UI, S, E, R>) =>
  (token: string, request: unknown): Effect.Effect<Answer> => {
    const event = applier.decodeEvent(request)
    if (Result.isFailure(event)) return Effect.succeed(refused(describeParseError(event.failure), "InvalidEvent"))
    return Effect.map(
      Effect.provideContext(
        applyHere(applier, token, event.success).pipe(Effect.annotateLogs({ module: "SocketSession", call: "apply" })),
        applier.context
      ),
      (outcome): Answer => {
        if (outcome._tag !== "Applied") return outcome
        const value = applier.encodeUpdate(outcome.update)
        // applied, and stored: only its answer cannot travel
        return Result.isSuccess(value)
          ? { _tag: "Done", value: value.success, delivery: outcome.delivery }
          : {
              _tag: "Failed",
              message: describeParseError(value.failure),
              code: "InvalidUpdate",
              refused: false,
              applied: "unknown"
            }
      }
    )
  }

/**
 * `SocketSession.apply`: the event applied where the token's socket is, and its update with
 * where it went; a failure as its `Failed` outcome.
 *
 * @internal
 */
export const apply = <Ev, EvI, U, UI, S extends Slices, E, R>(
  applier: Applier<Ev, EvI, U, UI, S, E, R>,
  token: string,
  event: Ev
): Effect.Effect<Result.Result<{ readonly update: U; readonly delivery: Delivery }, Failed>, never, R> =>
  Effect.gen(function* () {
    const here = Effect.map(
      applyHere(applier, token, event),
      (outcome): Result.Result<{ readonly update: U; readonly delivery: Delivery }, Failed> =>
        outcome._tag === "Applied"
          ? Result.succeed({ update: outcome.update, delivery: outcome.delivery })
          : Result.fail(outcome)
    )
    if (Option.isSome(yield* applier.tokens.local(token))) return yield* here
    const request = applier.encodeEvent(event)
    if (Result.isFailure(request)) return Result.fail(refused(describeParseError(request.failure), "InvalidEvent"))
    const { calls, sending } = applier.caller
    const called = yield* Effect.exit(call(calls, sending, token, request.success, applier.timeout))
    if (Exit.isFailure(called)) {
      if (Cause.hasInterruptsOnly(called.cause)) return yield* Effect.failCause(called.cause as Cause.Cause<never>)
      return Result.fail(failedWith(called.cause))
    }
    // no socket anywhere: applied here (its update to a socket linked meanwhile, if any)
    if (Option.isNone(called.value)) return yield* here
    const { answer } = called.value.value
    if (answer._tag === "Failed") return Result.fail(answer)
    const update = applier.decodeUpdate(answer.value)
    if (Result.isFailure(update)) {
      return Result.fail({
        _tag: "Failed",
        message: `applied, but its update does not decode: ${describeParseError(update.failure)}`,
        code: "InvalidUpdate",
        refused: false,
        applied: "unknown"
      })
    }
    // delivered by the worker that applied it: sent, from here
    const delivery = answer.delivery === "delivered" ? "sent" : answer.delivery
    return Result.succeed({ update: update.success, delivery })
  })

/**
 * `SocketSession.apply` on the worker whose applier is `applier`: the token checked, the
 * event applied where its socket is, a failure as its typed error.
 *
 * @internal
 */
export const applyTo = <Ev, EvI, U, UI, S extends Slices, E, R>(
  applier: Applier<any, any, any, any, any, any, any>,
  definition: Options<Ev, EvI, U, UI, S, E, R>,
  token: string,
  event: Ev
): Effect.Effect<{ readonly update: U; readonly delivery: Delivery }, EventRefused | EventFailed | InvalidToken, R> => {
  const problem = tokenProblem(token)
  if (problem !== undefined) return Effect.fail(new InvalidToken({ token, reason: problem }))
  if (applier.definition !== definition) {
    return Effect.die(new Error("SocketSession.apply: the worker's session is another session"))
  }
  return Effect.flatMap(apply(applier as Applier<Ev, EvI, U, UI, S, E, R>, token, event), (result) => {
    if (Result.isSuccess(result)) return Effect.succeed(result.success)
    const { message, code, refused, applied } = result.failure
    return Effect.fail(
      refused
        ? new EventRefused({ token, reason: message, code })
        : new EventFailed({ token, reason: message, code, applied })
    )
  })
}
