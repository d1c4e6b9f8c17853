/**
 * The client's frames read, and the server's written: an event with its optional `seq`,
 * and the update frames built from the app's updates.
 *
 * @internal
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"

/** A client frame: its `seq` (when it carries a valid one) and its event, or why it is not one. */
export interface Parsed<Ev> {
  readonly seq: number | undefined
  readonly event: Result.Result<Ev, string>
}

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

const problem = (error: Schema.SchemaError): string => {
  try {
    return formatIssues(error.issue)
      .issues.map((issue) =>
        issue.path === undefined || issue.path.length === 0
          ? issue.message
          : `${issue.path.map(String).join(".")}: ${issue.message}`
      )
      .join("; ")
  } catch (cause) {
    // Schema's formatter recurses: a value nested deeply enough overflows its stack.
    return cause instanceof RangeError ? "invalid, and nested too deeply to describe" : "invalid"
  }
}

/** Whether `seq` is a `seq` a client may send: a positive integer. */
export const isSeq = (seq: unknown): seq is number => typeof seq === "number" && Number.isSafeInteger(seq) && seq > 0

/** The parser of a socket's frames into events of `events`. */
export const parser = <Ev, EvI>(events: Schema.Codec<Ev, EvI>) => {
  const decode = Schema.decodeUnknownResult(Schema.toCodecJson(events), { onExcessProperty: "ignore" })
  return (text: string): Parsed<Ev> => {
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch (cause) {
      const reason = cause instanceof RangeError ? "nested too deeply to parse" : "not JSON"
      return { seq: undefined, event: Result.fail(`malformed message: ${reason} (${text.length} characters)`) }
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      return { seq: undefined, event: Result.fail("malformed message: not a JSON object") }
    }
    const { seq, ...rest } = value as { readonly seq?: unknown }
    if (seq !== undefined && !isSeq(seq)) {
      return { seq: undefined, event: Result.fail("malformed message: seq must be a positive integer") }
    }
    try {
      return { seq, event: Result.mapError(decode(rest), (error) => `malformed message: ${problem(error)}`) }
    } catch (cause) {
      // A value nested too deeply overflows the decoder's stack: a reason like any other.
      const reason = cause instanceof RangeError ? "nested too deeply to parse" : String(cause)
      return { seq, event: Result.fail(`malformed message: ${reason}`) }
    }
  }
}

/** The `seq` of a frame, read without decoding its event (for a frame refused before its turn). */
export const seqOf = (text: string): number | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    const seq = typeof value === "object" && value !== null ? (value as { readonly seq?: unknown }).seq : undefined
    return isSeq(seq) ? seq : undefined
  } catch {
    return undefined
  }
}

/**
 * What an error frame says of its event: not applied, of unknown outcome, or applied with
 * an answer that could not be written.
 */
export type Applied = boolean | "unknown"

/** A frame the session sends besides updates. */
export type Control =
  | { readonly type: "new_token"; readonly token: string }
  | { readonly type: "hello"; readonly token: string; readonly instanceId: string; readonly maxFrameBytes: number }
  | { readonly type: "error"; readonly message: string; readonly seq?: number; readonly applied?: Applied }
  | { readonly type: "resend"; readonly from: number; readonly seq: number }
  | { readonly type: "forgotten"; readonly seq: number }

/** What an update frame carries besides the update's fields. */
export interface UpdateMarks {
  readonly seq?: number | undefined
  readonly duplicate?: boolean | undefined
  readonly overtaken?: boolean | undefined
}

/** The encoder of updates of `updates` into frames: its fields, then the frame's type and marks. */
export const updateEncoder = <U, UI>(updates: Schema.Codec<U, UI>) => {
  const encode = Schema.encodeSync(Schema.toCodecJson(updates))
  return (type: "state" | "update", update: U, marks: UpdateMarks): string => {
    const fields = encode(update) as object
    const frame: Record<string, unknown> = { ...fields, type }
    if (marks.seq !== undefined) frame.seq = marks.seq
    if (marks.duplicate === true) frame.duplicate = true
    if (marks.overtaken === true) frame.overtaken = true
    return JSON.stringify(frame)
  }
}
