/**
 * One modification of a token's slices under its lock: the request it queues on the
 * worker's lease, the turn it waits for (handed back unused when the caller leaves), the
 * caller's function run on the turn's values under the grant's fence, and the writes it
 * hands back (only the slices whose encoding changed), awaited once decided.
 *
 * @internal
 */

import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { InvalidSliceValue, type LockExpired, ValueTooLarge } from "../../StateError.js"
import type { ModifyError, ModifyOptions, Slice } from "../../StateManager.js"
import type { SliceEntry } from "../../Store.js"
import type { AcknowledgedError, InvalidInput } from "../../StoreError.js"
import type * as Lease from "../lease.js"
import { OneShot } from "../oneShot.js"
import { formatParseError } from "../parse.js"
import { withSpan } from "../tracing.js"
import { tokenError, validateToken } from "../validate.js"
import { codecOf } from "./codec.js"
import { decodeAll, decodeNow } from "./decode.js"

/**
 * What a state manager's modifications work with, built once by the state manager (`internal/state/manager.ts`).
 *
 * @internal
 */
/** A modification's request for its session: its slices, its event, and the signals of its turn. */
const newRequest = (
  slices: ReadonlyArray<Slice<any, any>>,
  options: ModifyOptions | undefined,
  decideOnTurn?: Lease.Request["decideOnTurn"]
): Lease.Request => ({
  slices: slices.map((s) => s.name),
  event: Option.fromNullishOr(options?.event),
  turn: new OneShot<Lease.Turn, InvalidInput | AcknowledgedError>(),
  done: new OneShot<Lease.Outcome>(),
  ack: new OneShot<void, LockExpired | AcknowledgedError>(),
  cancelled: false,
  // always present, so that every request has one shape
  decideOnTurn
})

export interface ModifyContext {
  readonly lease: Lease.Lease.Service
  readonly maxValueBytes: number
}

/**
 * The fencing number of the grant a modification's function runs under (`StateManager.fence`).
 *
 * @internal
 */
export const currentFence = Context.Reference<Option.Option<number>>("leasehold/StateManager/currentFence", {
  defaultValue: Option.none
})

const abortOutcome: Lease.Outcome = { _tag: "Abort" }
const abortExit: Exit.Exit<Lease.Outcome> = Exit.succeed(abortOutcome)

/** The slices whose encoding changed (only those are written), or why a value cannot be written. */
const encodeWrites = (
  env: ModifyContext,
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  current: ReadonlyArray<Option.Option<string>>,
  next: ReadonlyArray<unknown>
): Result.Result<ReadonlyArray<SliceEntry>, InvalidSliceValue | ValueTooLarge> => {
  const { maxValueBytes } = env
  const writes: Array<SliceEntry> = []
  for (const [i, s] of slices.entries()) {
    const codec = codecOf(s)
    const encoded = codec.encode(next[i])
    if (Result.isFailure(encoded)) {
      return Result.fail(new InvalidSliceValue({ token, slice: s.name, reason: formatParseError(encoded.failure) }))
    }
    const bytes = Buffer.byteLength(encoded.success, "utf8")
    if (bytes > maxValueBytes) {
      return Result.fail(new ValueTooLarge({ token, slice: s.name, bytes, maxBytes: maxValueBytes }))
    }
    // Nothing stored means the initial value: writing it would change nothing.
    const baseline = Option.orElse(current[i]!, () => codec.initialEncoded)
    if (!Option.contains(baseline, encoded.success)) writes.push([s.name, encoded.success])
  }
  return Result.succeed(writes)
}

const currentOf = (slices: ReadonlyArray<Slice<any, any>>, turn: Lease.Turn) =>
  slices.map((s) => turn.values.get(s.name) ?? Option.none<string>())

/** Run the caller's function on its turn's values: its result and the slices whose encoding changed. */
const decide = <B, E, R>(
  env: ModifyContext,
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  turn: Lease.Turn,
  f: (values: ReadonlyArray<unknown>) => Effect.Effect<readonly [B, ReadonlyArray<unknown>], E, R>
): Effect.Effect<
  { readonly value: B; readonly writes: ReadonlyArray<SliceEntry> },
  E | InvalidSliceValue | ValueTooLarge,
  R
> =>
  Effect.gen(function* () {
    const current = currentOf(slices, turn)
    const decoded = yield* decodeAll(token, slices, current)
    const [value, next] = yield* Effect.provideService(f(decoded), currentFence, Option.some(turn.fence))
    const writes = encodeWrites(env, token, slices, current, next)
    if (Result.isFailure(writes)) return yield* Effect.fail(writes.failure)
    return { value, writes: writes.success }
  })

/**
 * Whether a modification that writes nothing, given its turn by a session, was acknowledged
 * at once: one that may have read writes of the session not yet acknowledged is acknowledged
 * with them (`Request.ack`), and waits for them.
 */
const ackedNow = (request: Lease.Request) => {
  const acked = request.ack.poll()
  return acked !== undefined && Exit.isSuccess(acked)
}

/**
 * Whether a modification that writes nothing must wait for writes it may have read: decided
 * on a turn a session gave it (a grant of its own read what is stored), not acknowledged yet.
 */
const owesAck = (own: Option.Option<Lease.Turn>, request: Lease.Request) => Option.isNone(own) && !ackedNow(request)

/**
 * Modify `slices` of `token` with `f`: what `modify`, `modifyEffect` and `modifyAll` run.
 *
 * @internal
 */
export const run = <B, E, R>(
  env: ModifyContext,
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  f: (values: ReadonlyArray<unknown>) => Effect.Effect<readonly [B, ReadonlyArray<unknown>], E, R>,
  options: ModifyOptions | undefined
): Effect.Effect<B, E | ModifyError, R> =>
  Effect.gen(function* () {
    const { lease } = env
    yield* validateToken(token)
    const request = newRequest(slices, options)
    return yield* Effect.uninterruptibleMask((restore) =>
      Effect.gen(function* () {
        const own = yield* lease.begin(token, request)
        let turn: Lease.Turn
        if (Option.isSome(own)) {
          turn = own.value
        } else {
          const turnExit = yield* Effect.exit(restore(request.turn.await))
          if (Exit.isFailure(turnExit)) {
            yield* lease.cancel(token, request)
            // The turn may have come at the moment the caller left: hand it back unused.
            const given = request.turn.poll()
            if (given !== undefined && Exit.isSuccess(given)) request.done.done(abortExit)
            return yield* Effect.failCause(turnExit.cause)
          }
          turn = turnExit.value
        }
        const decided = yield* Effect.exit(decide(env, token, slices, turn, (values) => restore(f(values))))
        request.done.done(
          Exit.isSuccess(decided) && decided.value.writes.length > 0
            ? Exit.succeed({ _tag: "Commit", writes: decided.value.writes })
            : abortExit
        )
        if (Option.isSome(own)) yield* lease.complete(token, request)
        if (Exit.isFailure(decided)) {
          // refused after reading writes of the session not yet acknowledged: its outcome
          // rests on them, so it is reported with them, and fails as they do if they are lost
          if (!Cause.hasInterruptsOnly(decided.cause) && owesAck(own, request)) {
            const acked = yield* Effect.exit(request.ack.await)
            if (Exit.isFailure(acked)) return yield* Effect.failCause(acked.cause)
          }
          return yield* Effect.failCause(decided.cause)
        }
        // Decided: the outcome is awaited even if the caller is interrupted meanwhile.
        if (decided.value.writes.length > 0) yield* request.ack.await
        else if (owesAck(own, request)) yield* request.ack.await
        return decided.value.value
      })
    )
  }).pipe(
    // no stack capture: it costs more than the rest of an uncontended modification
    withSpan("StateManager.modify", { attributes: { token }, captureStackTrace: false })
  )

/** What a decision that writes nothing hands back. */
const noWrites: ReadonlyArray<SliceEntry> = []

/**
 * A plain function's decision, made once, wherever its values come from (a step of the
 * store or a session's turn): `on` runs the function on the encoded values and returns the
 * writes; `exit` is then its result, and `warnings` those for values that did not decode.
 */
class PureDecision<B> {
  exit: Exit.Exit<B, ModifyError> | undefined = undefined
  warnings: Effect.Effect<void> | undefined = undefined
  constructor(
    readonly env: ModifyContext,
    readonly token: string,
    readonly slices: ReadonlyArray<Slice<any, any>>,
    readonly f: (values: ReadonlyArray<unknown>) => readonly [B, ReadonlyArray<unknown>]
  ) {}

  readonly on = (current: ReadonlyArray<Option.Option<string>>): ReadonlyArray<SliceEntry> => {
    const { env, token, slices } = this
    const decoded = decodeNow(token, slices, current)
    this.warnings = decoded.warnings
    let value: B
    let next: ReadonlyArray<unknown>
    try {
      ;[value, next] = this.f(decoded.values)
    } catch (defect) {
      this.exit = Exit.die(defect)
      return noWrites
    }
    const writes = encodeWrites(env, token, slices, current, next)
    if (Result.isFailure(writes)) {
      this.exit = Exit.fail(writes.failure)
      return noWrites
    }
    this.exit = Exit.succeed(value)
    return writes.success
  }

  /** `then` after the warnings, if any. */
  afterWarnings<A, E>(then: Effect.Effect<A, E>): Effect.Effect<A, E> {
    return this.warnings === undefined ? then : Effect.andThen(this.warnings, then)
  }
}

/**
 * `run` for a plain function (`StateManager.modify`). Where the store runs a whole
 * modification in one step (`Lease.Service.inStep`) and the lock is free with nobody
 * waiting (the oplock off) or, on the embedded store, held by this worker's idle lease, the
 * function runs inside that step (on Redis on the values of this worker's last grant, and
 * again below if the store refuses the step: `decision.on` runs once per attempt). Otherwise the
 * session decides it when its turn comes (`Request.decideOnTurn`), with no step of the caller's
 * fiber in between, and the caller waits once, for its result (its value once the writes
 * are acknowledged, or the error). Interrupted before its turn, it leaves; decided, its
 * outcome is awaited all the same, as `run` does.
 *
 * @internal
 */
export const runPure = <B>(
  env: ModifyContext,
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  f: (values: ReadonlyArray<unknown>) => readonly [B, ReadonlyArray<unknown>],
  options: ModifyOptions | undefined
): Effect.Effect<B, ModifyError> =>
  // Steps chained by hand, not `Effect.gen`: on the embedded store a generator's steps are
  // a measured share of an uncontended modification.
  Effect.suspend((): Effect.Effect<B, ModifyError> => {
    const invalid = tokenError(token)
    if (invalid !== undefined) return Effect.fail(invalid)
    const decision = new PureDecision(env, token, slices, f)
    const { inStep } = env.lease
    if (inStep === undefined) return viaSession(env, token, slices, options, decision)
    const names = slices.map((s) => s.name)
    const onDiscard = (options as PureOptions | undefined)?.onDiscard
    let stepEnded = false
    const stepped = inStep(token, names, Option.fromNullishOr(options?.event), decision.on, (done) => {
      stepEnded = true
      // done: the function ran (its result is set) and its writes are made
      if (done) return decision.afterWarnings(decision.exit!)
      onDiscard?.()
      return viaSession(env, token, slices, options, decision)
    })
    if (onDiscard === undefined) return stepped
    // a step that failed may have run the function on values that had moved on
    return Effect.onError(stepped, () => (stepEnded ? Effect.void : Effect.sync(onDiscard)))
  }).pipe(withSpan("StateManager.modify", { attributes: { token }, captureStackTrace: false }))

/**
 * `runPure`'s options as the socket session passes them (a `ModifyOptions` to the public
 * API): `onDiscard` is called when a run of the function in a step of the store counts for
 * nothing (the store refused the step, or the step failed), before the function may run
 * again. What the caller kept of that run (its outcomes, its defects) is then to be dropped.
 *
 * @internal
 */
export interface PureOptions extends ModifyOptions {
  readonly onDiscard?: () => void
}

/** `runPure`'s way through the token's session: the decision is made when the turn comes. */
const viaSession = <B>(
  env: ModifyContext,
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  options: ModifyOptions | undefined,
  decision: PureDecision<B>
): Effect.Effect<B, ModifyError> => {
  const { lease } = env
  const result = new OneShot<B, ModifyError>()
  const decideOnTurn = (turn: Lease.Turn): Lease.Outcome => {
    const writes = decision.on(currentOf(slices, turn))
    const decided = decision.exit!
    // one that writes nothing, refused or not, is acknowledged too: with the writes it read,
    // if not yet acknowledged, and fails as they do if they are lost
    request.ack.listen((acked) => result.done(Exit.isSuccess(acked) ? decided : Exit.failCause(acked.cause)))
    return writes.length === 0 ? abortOutcome : { _tag: "Commit", writes }
  }
  const request = newRequest(slices, options, decideOnTurn)
  // a turn that cannot come (the session failed or closed) ends the wait with its error
  request.turn.listen((turn) => {
    if (Exit.isFailure(turn)) result.done(Exit.failCause(turn.cause))
  })
  // Decided: the outcome is awaited even if the caller is interrupted meanwhile.
  const outcome = Effect.suspend(() => decision.afterWarnings(result.await))
  return Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(lease.begin(token, request), (own) => {
      if (Option.isSome(own)) {
        const decided = decideOnTurn(own.value)
        // a grant of its own read what is stored: nothing written, nothing to wait for
        if (decided._tag === "Abort") request.ack.done(Exit.void)
        request.done.done(Exit.succeed(decided))
        return Effect.andThen(lease.complete(token, request), outcome)
      }
      return Effect.flatMap(Effect.exit(restore(result.await)), (waited) => {
        if (Exit.isSuccess(waited) || result.poll() !== undefined) return outcome
        return Effect.andThen(
          lease.cancel(token, request),
          // not decided yet: it never will be
          Effect.suspend(() => (request.done.poll() === undefined ? Effect.failCause(waited.cause) : outcome))
        )
      })
    })
  )
}
