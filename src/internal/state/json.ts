/**
 * A slice's stored text: the JSON of its schema's canonical JSON codec, what
 * `Schema.fromJsonString(Schema.toCodecJson(schema))` reads and writes, read and written
 * in two steps, `JSON.parse` and the codec (`JSON.stringify` after it to write). The
 * composed schema's transformation is not eager: each call of it runs a fiber of its own,
 * which cost more than the rest of a decoding (three times a plain one), on every
 * modification. The codec alone succeeds without a fiber where the schema is synchronous.
 *
 * Only what succeeds is taken from the two steps: whatever fails (text that is not JSON,
 * a value the codec refuses, one `JSON.stringify` cannot write) goes again through the
 * composed schema, whose error is the one returned, exactly as before.
 *
 * @internal
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { parseSafely } from "../parse.js"

/**
 * Stored text and values of a slice's schema.
 *
 * @internal
 */
export interface JsonCodec<A> {
  readonly decode: (raw: string) => Result.Result<A, Schema.SchemaError>
  readonly encode: (value: A) => Result.Result<string, Schema.SchemaError>
}

/**
 * The JSON codec of `schema`, each direction safe from a stack overflow (`parseSafely`).
 *
 * @internal
 */
export const jsonCodec = <A, I>(schema: Schema.Codec<A, I>): JsonCodec<A> => {
  const codec = Schema.toCodecJson(schema)
  const composed = Schema.fromJsonString(codec)
  const decodeComposed = Schema.decodeUnknownResult(composed)
  const encodeComposed = Schema.encodeResult(composed)
  const decodeParsed = Schema.decodeUnknownResult(codec)
  const encodeJson = Schema.encodeResult(codec)
  const decode = (raw: string): Result.Result<A, Schema.SchemaError> => {
    let parsed: unknown
    try {
      parsed = JSON.parse(raw)
    } catch {
      return decodeComposed(raw)
    }
    const decoded = decodeParsed(parsed)
    return Result.isSuccess(decoded) ? decoded : decodeComposed(raw)
  }
  const encode = (value: A): Result.Result<string, Schema.SchemaError> => {
    const json = encodeJson(value)
    if (Result.isFailure(json)) return encodeComposed(value)
    let text: string | undefined
    try {
      text = JSON.stringify(json.success)
    } catch {
      return encodeComposed(value)
    }
    return typeof text === "string" ? Result.succeed(text) : encodeComposed(value)
  }
  return { decode: parseSafely(decode), encode: parseSafely(encode) }
}
