/**
 * One modification of a token's slices, as the state manager makes it: the token
 * validated, the modification described for the worker's lease (`Lease.Modification`: its
 * slice names, its event, and its decision), the lease's answer mapped back. The decision
 * decodes the encoded values it is given, runs the caller's function (under the grant's
 * fence, `currentFence`) and encodes what it returns: only the slices whose encoding
 * changed are written. Where and when it is decided is the lease's choice.
 *
 * @internal
 */

import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { InvalidSliceValue, ValueTooLarge } from "../../StateError.js"
import type { ModifyError, ModifyOptions, Slice } from "../../StateManager.js"
import type { SliceEntry } from "../../Store.js"
import type * as Lease from "../lease.js"
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
): Effect.Effect<Lease.Decided<B>, E | InvalidSliceValue | ValueTooLarge, R> =>
  Effect.gen(function* () {
    const current = currentOf(slices, turn)
    const decoded = yield* decodeAll(token, slices, current)
    const [value, next] = yield* Effect.provideService(f(decoded), currentFence, Option.some(turn.fence))
    const writes = encodeWrites(env, token, slices, current, next)
    if (Result.isFailure(writes)) return yield* Effect.fail(writes.failure)
    return { value, writes: writes.success }
  })

/**
 * Modify `slices` of `token` with `f`: what `modifyEffect`, `modifyAll` and `Lock.withLock`
 * run. The caller's function alone is interruptible (as is the wait for the turn, the
 * lease's).
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
    yield* validateToken(token)
    return yield* env.lease.modify(token, {
      _tag: "Effectful",
      slices: slices.map((s) => s.name),
      event: Option.fromNullishOr(options?.event),
      decide: (turn, interruptible) => decide(env, token, slices, turn, (values) => interruptible(f(values)))
    })
  }).pipe(
    // no stack capture: it costs more than the rest of an uncontended modification
    withSpan("StateManager.modify", { attributes: { token }, captureStackTrace: false })
  )

/** What a decision that writes nothing hands back. */
const noWrites: ReadonlyArray<SliceEntry> = []

/**
 * A plain function's modification (`Lease.Pure`): `decide` runs the function on the
 * encoded values and returns the writes, and records its result (`exit`) and the warnings
 * for values that did not decode. It may run more than once (on Redis, when the store
 * refuses the step it ran in); the last run counts.
 */
class PureDecision<B> implements Lease.Pure<B, InvalidSliceValue | ValueTooLarge> {
  readonly _tag = "Pure"
  exit: Exit.Exit<B, InvalidSliceValue | ValueTooLarge> | undefined = undefined
  warnings: Effect.Effect<void> | undefined = undefined
  constructor(
    readonly env: ModifyContext,
    readonly token: string,
    readonly sliceSchemas: ReadonlyArray<Slice<any, any>>,
    readonly slices: ReadonlyArray<string>,
    readonly event: Option.Option<string>,
    readonly f: (values: ReadonlyArray<unknown>) => readonly [B, ReadonlyArray<unknown>],
    readonly discarded: (() => void) | undefined
  ) {}

  readonly decide = (current: ReadonlyArray<Option.Option<string>>): ReadonlyArray<SliceEntry> => {
    const { env, token, sliceSchemas } = this
    const decoded = decodeNow(token, sliceSchemas, current)
    this.warnings = decoded.warnings
    let value: B
    let next: ReadonlyArray<unknown>
    try {
      ;[value, next] = this.f(decoded.values)
    } catch (defect) {
      this.exit = Exit.die(defect)
      return noWrites
    }
    const writes = encodeWrites(env, token, sliceSchemas, current, next)
    if (Result.isFailure(writes)) {
      this.exit = Exit.fail(writes.failure)
      return noWrites
    }
    this.exit = Exit.succeed(value)
    return writes.success
  }
}

/**
 * `run` for a plain function (`StateManager.modify`, `modifyAllPure`): the function may run
 * inside a step of the store, where the lease makes the modification in one (see
 * `Lease.Pure`).
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
    const names = slices.map((s) => s.name)
    const event = Option.fromNullishOr(options?.event)
    const onDiscard = (options as PureOptions | undefined)?.onDiscard
    return env.lease.modify(token, new PureDecision(env, token, slices, names, event, f, onDiscard))
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
