/**
 * The messages of `/ws`, as JSON text frames.
 *
 * Server to client:
 * - `{"type":"new_token","token":T}`: first, when the socket came without a usable token
 *   (missing, malformed, or already linked by another tab); the client uses T from now on.
 * - `{"type":"hello","token":T,"instanceId":I}`: the token in use and the worker serving it.
 * - `{"type":"state","n":N,"v":V}`: the counter when the socket was linked.
 * - `{"type":"update","n":N,"v":V}`: a change of the counter (`v` is its version).
 * - `{"type":"error","message":M}`: a message that could not be handled; the socket stays open.
 *
 * Client to server: `{"type":"bump","by":K}` (K an integer, |K| ≤ 1,000,000).
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import { maxStep } from "./Counter.js"

/** A step of a bump: an integer within ±`maxStep`. */
export const Step = Schema.Int.check(
  Schema.isBetween(
    { minimum: -maxStep, maximum: maxStep },
    { message: `must be an integer between -${maxStep} and ${maxStep}` }
  )
)

/** The one event a client sends. */
export const Bump = Schema.Struct({ type: Schema.Literal("bump"), by: Step })
export type Bump = typeof Bump.Type

// A value nested too deeply (`[[[[…]]]]`) makes Schema's recursive decoder and formatters
// overflow the stack: below, that is a reason like any other, not a thrown RangeError that
// would end the socket's frame handler.
const decodeBump = Schema.decodeUnknownResult(Schema.fromJsonString(Bump), { onExcessProperty: "ignore" })

/** The innermost reason of a parse error, on one line (a value too deep to describe, in short). */
const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

export const problem = (error: Schema.SchemaError): string => {
  try {
    return formatIssues(error.issue)
      .issues.map((issue) =>
        issue.path === undefined || issue.path.length === 0
          ? issue.message
          : `${issue.path.map(String).join(".")}: ${issue.message}`
      )
      .join("; ")
  } catch (cause) {
    return cause instanceof RangeError ? "invalid, and nested too deeply to describe" : "invalid"
  }
}

/**
 * The common case without Schema's machinery: a well-formed bump. Anything else (not
 * JSON, nested too deeply, another shape) is left to the decoder, for its reason.
 */
const plainBump = (text: string): Bump | undefined => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  if (typeof value !== "object" || value === null) return undefined
  const { type, by } = value as { readonly type?: unknown; readonly by?: unknown }
  return type === "bump" && Number.isSafeInteger(by) && Math.abs(by as number) <= maxStep
    ? { type, by: by as number }
    : undefined
}

/** A client frame as a bump, or the reason it is not one. */
export const parseClientMessage = (text: string): Result.Result<Bump, string> => {
  const plain = plainBump(text)
  if (plain !== undefined) return Result.succeed(plain)
  try {
    return Result.mapError(decodeBump(text), (error) => `malformed message: ${problem(error)}`)
  } catch (cause) {
    const reason = cause instanceof RangeError ? "nested too deeply to parse" : String(cause)
    return Result.fail(`malformed message: ${reason} (${text.length} characters)`)
  }
}

/** A frame the server sends. */
export type ServerMessage =
  | { readonly type: "new_token"; readonly token: string }
  | { readonly type: "hello"; readonly token: string; readonly instanceId: string }
  | { readonly type: "state" | "update"; readonly n: number; readonly v: number }
  | { readonly type: "error"; readonly message: string }

/** A frame as its JSON text. */
export const encode = (message: ServerMessage): string => JSON.stringify(message)
