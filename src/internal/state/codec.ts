/**
 * How a slice's values are stored: the codec `StateManager.slice` builds with the slice, kept
 * beside it rather than on it, so that the public `Slice` shows its name, schema and initial
 * value alone.
 *
 * @internal
 */
import type * as Option from "effect/Option"
import type * as Result from "effect/Result"
import type * as Schema from "effect/Schema"
import type { Slice } from "../../StateManager.js"

/** A slice's stored form: the JSON of its schema's canonical JSON codec. */
export interface Codec<A> {
  readonly decode: (raw: string) => Result.Result<A, Schema.SchemaError>
  readonly encode: (value: A) => Result.Result<string, Schema.SchemaError>
  /** The initial value's encoding: what an absent key stands for. */
  readonly initialEncoded: Option.Option<string>
}

const codecs = new WeakMap<Slice<any, any>, Codec<any>>()

/** Made by `StateManager.slice` with the slice it stores. */
export const register = <A, I>(slice: Slice<A, I>, codec: Codec<A>): Slice<A, I> => {
  codecs.set(slice, codec)
  return slice
}

/** The codec `StateManager.slice` built with `slice`. */
export const codecOf = <A, I>(slice: Slice<A, I>): Codec<A> => {
  const codec = codecs.get(slice)
  if (codec === undefined) throw new TypeError(`slice ${slice.name} was not made by StateManager.slice`)
  return codec
}
