/**
 * The typed errors of modifications.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Option from "effect/Option"

/**
 * A modification whose lock was lost before its write: nothing was written.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockExpired extends Data.TaggedError("LockExpired")<{
  readonly token: string
  readonly event: Option.Option<string>
  /** The lock id this modification held. */
  readonly expected: string
  /** The lock id holding the token's lock when the write was refused. */
  readonly current: Option.Option<string>
  readonly lockExpirationMs: number
}> {
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
export class InvalidSliceValue extends Data.TaggedError("InvalidSliceValue")<{
  readonly token: string
  readonly slice: string
  readonly reason: string
}> {
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
export class ValueTooLarge extends Data.TaggedError("ValueTooLarge")<{
  readonly token: string
  readonly slice: string
  readonly bytes: number
  readonly maxBytes: number
}> {
  override get message(): string {
    return `slice ${this.slice} of token ${this.token} is ${this.bytes} bytes encoded, over the maximum of ${this.maxBytes} (maxValueBytes)`
  }
}
