/**
 * The user API: typed slices of a token's state, read with `get` and changed with
 * `modify`, under the token's lock (docs/state.md; docs/design.md#the-lock-a-queue-in-the-store,
 * #leases-oplock).
 *
 * ```ts
 * import { Effect, Schema } from "effect"
 * import { StateManager } from "leasehold"
 *
 * const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
 * const bump = (token: string) =>
 *   Effect.flatMap(StateManager.StateManager, (states) =>
 *     states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }]))
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import * as Result from "effect/Result"
import type * as Schema from "effect/Schema"
import * as SliceCodec from "./internal/state/codec.js"
import { jsonCodec } from "./internal/state/json.js"
import { currentFence } from "./internal/state/modify.js"
import { tokenProblem } from "./internal/validate.js"
import type { InvalidSliceValue, LockExpired, ValueTooLarge } from "./StateError.js"
import type { AcknowledgedError, InvalidInput, InvalidSliceName, InvalidToken, StoreError } from "./StoreError.js"

/**
 * One named, Schema-typed part of a token's state, with the value a token starts with.
 *
 * @since 0.1.0
 * @category models
 */
export interface Slice<A, I = unknown> {
  readonly name: string
  readonly schema: Schema.Codec<A, I>
  readonly initial: A
}

/**
 * Define a slice. Its name becomes part of a key: 1–128 characters of `[A-Za-z0-9_.:-]`
 * (anything else throws, as a definition error).
 *
 * @since 0.1.0
 * @category constructors
 */
export const slice = <A, I>(name: string, schema: Schema.Codec<A, I>, initial: A): Slice<A, I> => {
  const problem = tokenProblem(name)
  if (problem !== undefined) throw new TypeError(`invalid slice name ${JSON.stringify(name)}: ${problem}`)
  // JSON of the schema's canonical JSON codec: a declared type (`Schema.Date`, `Schema.Option`,
  // a `Class`) is stored as JSON, the very text the Effect 3 build stored for it.
  const { decode, encode } = jsonCodec(schema)
  // the codec beside the slice, found by it (`codecOf`): the public `Slice` shows none of it
  return SliceCodec.register(
    { name, schema, initial },
    { decode, encode, initialEncoded: Result.getSuccess(encode(initial)) }
  )
}

/**
 * What a modification can fail with, besides the errors of its own function. Of the
 * invalid inputs, only an `InvalidToken` (the token) and an `InvalidSliceName` (a slice
 * given by name) come from the caller; the others name the worker's own ids.
 *
 * @since 0.1.0
 * @category errors
 */
export type ModifyError = InvalidInput | AcknowledgedError | LockExpired | InvalidSliceValue | ValueTooLarge

/**
 * @since 0.1.0
 * @category models
 */
export interface ModifyOptions {
  /** The event this modification handles: named in lock ids' diagnostics, warnings and `LockExpired`. */
  readonly event?: string
}

/**
 * The values of a record of slices.
 *
 * @since 0.1.0
 * @category models
 */
export type Values<S extends Record<string, Slice<any, any>>> = { readonly [K in keyof S]: S[K]["initial"] }

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace StateManager {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * Read a slice, without taking the lock. Under this worker's lease it comes from the
     * lease's memory; otherwise from the store.
     */
    readonly get: <A, I>(
      token: string,
      slice: Slice<A, I>
    ) => Effect.Effect<A, InvalidToken | InvalidSliceName | StoreError>
    /**
     * Change a slice under the token's lock with a pure function returning
     * `[result, next]`. The result is returned once `next` is stored (or, under a
     * `memory`-durability lease, applied). On Redis the function may run more than once:
     * first on the values this worker's last grant of the token left, then, when the store
     * finds they moved on, again on the values read under the lock (only the last run's
     * result counts). Keep it pure; effects belong in `modifyEffect`.
     */
    readonly modify: <A, I, B>(
      token: string,
      slice: Slice<A, I>,
      f: (value: A) => readonly [B, A],
      options?: ModifyOptions
    ) => Effect.Effect<B, ModifyError>
    /** `modify` with an effectful function. If it fails or is interrupted, nothing changes. */
    readonly modifyEffect: <A, I, B, E, R>(
      token: string,
      slice: Slice<A, I>,
      f: (value: A) => Effect.Effect<readonly [B, A], E, R>,
      options?: ModifyOptions
    ) => Effect.Effect<B, E | ModifyError, R>
    /** Read and write several slices of one token under one lock. Only changed slices are written. */
    readonly modifyAll: <S extends Record<string, Slice<any, any>>, B, E, R>(
      token: string,
      slices: S,
      f: (values: Values<S>) => Effect.Effect<readonly [B, Values<S>], E, R>,
      options?: ModifyOptions
    ) => Effect.Effect<B, E | ModifyError, R>
    /**
     * `modifyAll` with a pure function, decided as `modify`'s is: in one step of the store
     * when nothing stands in its way, and on Redis possibly run more than once (only the last
     * run's result counts). A function that throws fails the modification with that defect,
     * and nothing is written.
     */
    readonly modifyAllPure: <S extends Record<string, Slice<any, any>>, B>(
      token: string,
      slices: S,
      f: (values: Values<S>) => readonly [B, Values<S>],
      options?: ModifyOptions
    ) => Effect.Effect<B, ModifyError>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class StateManager extends Context.Service<StateManager, StateManager.Service>()("leasehold/StateManager") {}

/**
 * Inside a modification's function: the fencing number of the lock grant it runs under
 * (modifications served by one lease share their grant's number); outside one: `None`.
 * Numbers only grow from grant to grant of a token, so a history of writes that records
 * them shows that no two holders ever interleaved.
 *
 * @since 0.1.0
 * @category accessors
 */
export const fence: Effect.Effect<Option.Option<number>> = currentFence
