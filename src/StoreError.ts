/**
 * The typed errors of the store layer.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Option from "effect/Option"

/**
 * A token outside the allowed charset or length. Raised before any I/O.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidToken extends Data.TaggedError("InvalidToken")<{
  readonly token: string
  readonly reason: string
}> {
  override get message(): string {
    return `invalid token ${JSON.stringify(this.token.length > 64 ? `${this.token.slice(0, 64)}…` : this.token)}: ${this.reason}`
  }
}

/**
 * The store could not be reached: a lost connection, a timeout, or a server that is down.
 *
 * @since 0.1.0
 * @category errors
 */
export class StoreUnavailable extends Data.TaggedError("StoreUnavailable")<{
  readonly operation: string
  readonly reason: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `store unavailable during ${this.operation}: ${this.reason}`
  }
}

/**
 * The store answered with an error reply (out of memory, a refused or renamed command,
 * wrong type under a key). Nothing was written by the refused operation.
 *
 * @since 0.1.0
 * @category errors
 */
export class StoreRefused extends Data.TaggedError("StoreRefused")<{
  readonly operation: string
  readonly reply: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `store refused ${this.operation}: ${this.reply}`
  }
}

/**
 * A step whose loss would break a promise (a grant and its fence, a group commit, a commit
 * with its release) was made on the primary, but fewer than `required` replicas reported
 * having it within `timeoutMs` (`minReplicasAck`, `replicaAckTimeout`). Its outcome is
 * unknown, not acknowledged: the change may stay (the replicas catch up) or be lost (a
 * failover promotes a replica that never had it), and others may already see it.
 *
 * @since 0.1.0
 * @category errors
 */
export class NotAcknowledged extends Data.TaggedError("NotAcknowledged")<{
  readonly operation: string
  /** The replicas that reported having the step (and every write before it) by the timeout. */
  readonly acknowledged: number
  readonly required: number
  readonly timeoutMs: number
}> {
  override get message(): string {
    return (
      `${this.operation} not acknowledged: ${this.acknowledged} of the ${this.required} replicas required had it ` +
      `within ${this.timeoutMs}ms; it was made on the primary and a failover may lose it: its outcome is unknown`
    )
  }
}

/**
 * A value stored under a key could not be decoded (not JSON, or the wrong shape).
 *
 * @since 0.1.0
 * @category errors
 */
export class CorruptValue extends Data.TaggedError("CorruptValue")<{
  readonly key: string
  readonly raw: string
  readonly reason: string
}> {
  override get message(): string {
    const raw = this.raw.length > 80 ? `${this.raw.slice(0, 80)}…` : this.raw
    return `corrupt value under ${this.key} (${this.reason}): ${JSON.stringify(raw)}`
  }
}

/**
 * A write or commit was refused because the caller no longer holds the token's lock.
 * Nothing was written.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockLost extends Data.TaggedError("LockLost")<{
  readonly token: string
  readonly lockId: string
  readonly holder: Option.Option<string>
}> {
  override get message(): string {
    return `lock of token ${this.token} lost: expected holder ${this.lockId}, current holder ${Option.getOrElse(this.holder, () => "none")}`
  }
}

/**
 * The embedded store's data directory (`dataDir`) could not be created, locked, listed or
 * written when the store was built. The build fails rather than run without the
 * persistence the configuration asked for.
 *
 * @since 0.1.0
 * @category errors
 */
export class DataDirError extends Data.TaggedError("DataDirError")<{
  readonly path: string
  /** `lock`: another store, in this process or another, has the directory open. */
  readonly operation: "create" | "lock" | "list" | "write"
  readonly reason: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `data directory ${this.path} cannot be used: could not ${this.operation} it: ${this.reason}`
  }
}

/**
 * Any failure of a store operation that talks to the store.
 *
 * @since 0.1.0
 * @category errors
 */
export type StoreError = StoreUnavailable | StoreRefused

/**
 * The failure of a step that a store configured with `minReplicasAck` acknowledges only
 * once replicas have it: a grant, a commit.
 *
 * @since 0.1.0
 * @category errors
 */
export type AcknowledgedError = StoreError | NotAcknowledged
