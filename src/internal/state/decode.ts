/**
 * A token's stored slices as values: nothing stored stands for the slice's initial value,
 * and so does a stored value that no longer decodes, with one warning for it.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type * as Schema from "effect/Schema"
import type { Slice } from "../../StateManager.js"
import { describeParseError } from "../parse.js"
import { codecOf } from "./codec.js"

const undecodable = <A, I>(token: string, s: Slice<A, I>, error: Schema.SchemaError) =>
  Effect.logWarning(
    `slice ${s.name} of token ${token} does not decode; using its initial value: ${describeParseError(error)}`
  )

/** A slice's stored value decoded: the initial value when nothing is stored or it does not decode (`onError`). */
const decodeStored = <A, I>(
  s: Slice<A, I>,
  raw: Option.Option<string>,
  onError: (error: Schema.SchemaError) => void
): A => {
  if (Option.isNone(raw)) return s.initial
  const decoded = codecOf(s).decode(raw.value)
  if (Result.isSuccess(decoded)) return decoded.success
  onError(decoded.failure)
  return s.initial
}

/**
 * A stored value that does not decode gives the initial value, with one warning.
 *
 * @internal
 */
export const decodeOr = <A, I>(token: string, s: Slice<A, I>, raw: Option.Option<string>) => {
  let warning: Effect.Effect<void> | undefined
  const value = decodeStored(s, raw, (error) => {
    warning = undecodable(token, s, error)
  })
  return warning === undefined ? Effect.succeed(value) : Effect.as(warning, value)
}

/**
 * The decoded values of a turn, with the warnings to log (`undefined`: every value decoded).
 *
 * @internal
 */
export const decodeNow = (
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  current: ReadonlyArray<Option.Option<string>>
): { readonly values: Array<unknown>; readonly warnings: Effect.Effect<void> | undefined } => {
  let warnings: Array<Effect.Effect<void>> | undefined
  const values = slices.map((s, i) =>
    decodeStored(s, current[i]!, (error) => {
      warnings ??= []
      warnings.push(undecodable(token, s, error))
    })
  )
  return { values, warnings: warnings === undefined ? undefined : Effect.all(warnings, { discard: true }) }
}

/**
 * The decoded values of a turn; the warnings are logged only when a value did not decode.
 *
 * @internal
 */
export const decodeAll = (
  token: string,
  slices: ReadonlyArray<Slice<any, any>>,
  current: ReadonlyArray<Option.Option<string>>
) => {
  let warnings: Array<Effect.Effect<void>> | undefined
  const values = slices.map((s, i) =>
    decodeStored(s, current[i]!, (error) => {
      warnings ??= []
      warnings.push(undecodable(token, s, error))
    })
  )
  return warnings === undefined ? Effect.succeed(values) : Effect.as(Effect.all(warnings, { discard: true }), values)
}
