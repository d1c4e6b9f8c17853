/**
 * Decoding stored text that anyone with access to the store may have written: a valid
 * but deeply nested JSON value (`[[[[…]]]]`, 100k levels) makes Schema's recursive
 * decoders and error formatters overflow the stack, which would escape as a defect and
 * stop the loop or request that read it. Here it is a decode failure like any other.
 *
 * @internal
 */
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import type * as Schema from "effect/Schema"

const tooDeep = (cause: unknown): string =>
  cause instanceof RangeError ? "nested too deeply to decode" : `cannot be decoded (${String(cause)})`

/**
 * `decode`, with a thrown exception (a stack overflow) turned into a `ParseError`.
 *
 * @internal
 */
export const decodeSafely =
  <A, I, R>(schema: Schema.Schema<A, I, R>, decode: (raw: string) => Either.Either<A, ParseResult.ParseError>) =>
  (raw: string): Either.Either<A, ParseResult.ParseError> => {
    try {
      return decode(raw)
    } catch (cause) {
      // `actual` is left out: describing it is what may overflow the stack again.
      return Either.left(
        new ParseResult.ParseError({
          issue: new ParseResult.Type(schema.ast, undefined, `${tooDeep(cause)} (${raw.length} characters)`)
        })
      )
    }
  }

/**
 * The first line of a parse error, for a log line or an error's reason. Formatting
 * describes the offending value, which may itself be too deep to describe.
 *
 * @internal
 */
export const describeParseError = (error: ParseResult.ParseError): string => {
  try {
    return ParseResult.TreeFormatter.formatErrorSync(error).split("\n")[0] ?? "invalid"
  } catch (cause) {
    return `invalid, and ${cause instanceof RangeError ? "nested too deeply to describe" : "cannot be described"}`
  }
}
