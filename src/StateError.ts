/**
 * The typed errors of modifications: what `StateManager.modify` and a lock's held run fail
 * with when nothing was written. Each is a Schema tagged error, so an app can declare it
 * in an HTTP API or an RPC schema and send it to a client.
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

/**
 * A modification whose lock was lost before its write: nothing was written.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockExpired extends Schema.TaggedError<LockExpired>()("LockExpired", {
  token: Schema.String,
  event: Schema.Option(Schema.String),
  /** The lock id this modification held. */
  expected: Schema.String,
  /** The lock id holding the token's lock when the write was refused. */
  current: Schema.Option(Schema.String),
  lockExpirationMs: Schema.Number
}) {
  override get message(): string {
    const event = Option.match(this.event, { onNone: () => "", onSome: (e) => ` Happened in event: ${e}.` })
    return (
      `lock of token ${this.token} expired before the modification was written: expected holder ${this.expected}, ` +
      `current holder ${Option.getOrElse(this.current, () => "none")}. Nothing was written. The lock expiration is ` +
      `${this.lockExpirationMs} ms: raise it, or move long work out of the modification.${event}`
    )
  }
}

/**
 * A value that its slice's schema cannot encode: nothing was written.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidSliceValue extends Schema.TaggedError<InvalidSliceValue>()("InvalidSliceValue", {
  token: Schema.String,
  slice: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `slice ${this.slice} of token ${this.token} cannot be encoded: ${this.reason}`
  }
}

/**
 * A modification produced a slice value larger than `maxValueBytes` once encoded. It was
 * refused before any I/O: nothing was written.
 *
 * @since 0.1.0
 * @category errors
 */
export class ValueTooLarge extends Schema.TaggedError<ValueTooLarge>()("ValueTooLarge", {
  token: Schema.String,
  slice: Schema.String,
  bytes: Schema.Number,
  maxBytes: Schema.Number
}) {
  override get message(): string {
    return `slice ${this.slice} of token ${this.token} is ${this.bytes} bytes encoded, over the maximum of ${this.maxBytes} (maxValueBytes)`
  }
}
