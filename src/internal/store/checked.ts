/**
 * How every part of the checked front runs a step: the input validated before any I/O
 * (`checked` for the driver's own operations, `stepOf` for a described operation and its
 * `check`), and the whole milliseconds the backends take (`wholeMs`).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { AcknowledgedError, InvalidInput } from "../../StoreError.js"
import type { Operation } from "../operations/operation.js"
import type { Driver } from "./driver.js"

/**
 * The step `run` builds, or the input's error when it has one: validation before any I/O,
 * and no effect built for a step that is refused.
 *
 * @internal
 */
export const checked = <A, E, R, V extends InvalidInput = never>(
  error: V | undefined,
  run: () => Effect.Effect<A, E, R>
): Effect.Effect<A, E | V, R> => (error === undefined ? run() : Effect.fail(error))

/**
 * A described operation as the front runs it: its arguments checked by its `check` before
 * any I/O, then the driver's `call`.
 *
 * @internal
 */
export const stepOf =
  (driver: Driver) =>
  <Args, Out, E extends AcknowledgedError, I extends InvalidInput>(
    operation: Operation<Args, any, Out, E, I, any, any>,
    args: Args
  ): Effect.Effect<Out, E | I> => {
    const error = operation.check(args)
    return error === undefined ? driver.call(operation, args) : Effect.fail(error)
  }

/** Whole milliseconds, at least one (as PX and PEXPIRE take them). @internal */
export const wholeMs = (ms: number): number => Math.max(1, Math.ceil(ms))
