/**
 * Decoding stored text that anyone with access to the store may have written, and
 * encoding values an app built from what its clients sent: a valid but deeply nested
 * value (`[[[[…]]]]`, 100k levels) makes Schema's recursive parsers and error formatters
 * overflow the stack. Thrown, that would escape as a defect and stop the loop or request
 * that met it, or leave a modification's lock held. Here it is a parse failure like any
 * other.
 *
 * @internal
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"

const tooDeep = (cause: unknown): string =>
  cause instanceof RangeError ? "nested too deeply to parse" : `cannot be parsed (${String(cause)})`

/**
 * `parse` (a Schema decoder or encoder), with a thrown exception (a stack overflow)
 * turned into a `SchemaError`.
 *
 * @internal
 */
export const parseSafely =
  <In, A>(
    parse: (input: In) => Result.Result<A, Schema.SchemaError>
  ): ((input: In) => Result.Result<A, Schema.SchemaError>) =>
  (input) => {
    try {
      return parse(input)
    } catch (cause) {
      const size = typeof input === "string" ? ` (${input.length} characters)` : ""
      // `actual` is left out: describing it is what may overflow the stack again.
      return Result.fail(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message: `${tooDeep(cause)}${size}` })))
    }
  }

const describe = (error: Schema.SchemaError, lines: (text: string) => string): string => {
  try {
    return lines(error.message)
  } catch (cause) {
    return `invalid, and ${cause instanceof RangeError ? "nested too deeply to describe" : "cannot be described"}`
  }
}

/**
 * The first line of a parse error, for a log line or an error's reason. Formatting
 * describes the offending value, which may itself be too deep to describe.
 *
 * @internal
 */
export const describeParseError = (error: Schema.SchemaError): string =>
  describe(error, (text) => text.split("\n")[0] ?? "invalid")

/**
 * The whole tree of a parse error, as Schema's default formatter writes it, or a short reason when
 * the value is too deep to describe.
 *
 * @internal
 */
export const formatParseError = (error: Schema.SchemaError): string => describe(error, (text) => text)
