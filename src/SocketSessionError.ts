/**
 * The typed errors of `SocketSession.apply`: an event refused by the session's handler, or
 * one the store, the lock or the worker holding the token's socket failed. Each is a Schema
 * tagged error, so an app can declare it in an HTTP API or an RPC schema.
 *
 * @since 0.2.0
 */
import * as Schema from "effect/Schema"

/**
 * An event `SocketSession.apply` did not apply: its handler refused it (its failure's message, or a
 * defect's, which is logged where it ran). Nothing of it was written.
 *
 * @since 0.2.0
 * @category errors
 */
export class EventRefused extends Schema.TaggedError<EventRefused>()("EventRefused", {
  token: Schema.String,
  reason: Schema.String,
  /** The tag of the handler's error (`Defect` for a defect, `InvalidEvent` for an event its schema refuses). */
  code: Schema.String
}) {
  override get message(): string {
    return `event for token ${this.token} refused: ${this.reason}`
  }
}

/**
 * An event `SocketSession.apply` could not see through: the store, the lock, or the worker holding the
 * token's socket failed it. `applied: false`: nothing of it was written; `"unknown"`: it may
 * have been, or may still be (a worker that did not answer in time may apply it later, never
 * twice).
 *
 * @since 0.2.0
 * @category errors
 */
export class EventFailed extends Schema.TaggedError<EventFailed>()("EventFailed", {
  token: Schema.String,
  reason: Schema.String,
  /**
   * The tag of the failure: the store's or the lock's error (`StoreUnavailable`,
   * `NotAcknowledged`, `LockExpired`, …), or `Unanswered` (the worker holding the socket did
   * not answer in time).
   */
  code: Schema.String,
  applied: Schema.Union([Schema.Literal(false), Schema.Literal("unknown")])
}) {
  override get message(): string {
    const outcome = this.applied === false ? "not applied" : "outcome unknown"
    return `event for token ${this.token} ${outcome}: ${this.reason}`
  }
}
