/**
 * The typed errors of the stores, which every operation that reads or writes them can
 * fail with. Each is a Schema tagged error: an app can declare it in an HTTP API or an
 * RPC schema and send it to a client. A `cause` (what a library failed with underneath)
 * travels as `Schema.Defect`: an `Error` is encoded as its name and message.
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

/** What a library failed with underneath: any value, encoded to JSON as a defect is. */
const Cause = Schema.optional(Schema.Defect())

const shown = (value: string): string => JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value)

/**
 * A token outside the allowed charset or length. Raised before any I/O.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidToken extends Schema.TaggedError<InvalidToken>()("InvalidToken", {
  token: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid token ${shown(this.token)}: ${this.reason}`
  }
}

/**
 * An instance id outside the token charset or length (an instance id becomes part of
 * keys, as a token does). Raised before any I/O.
 *
 * @since 0.2.0
 * @category errors
 */
export class InvalidInstanceId extends Schema.TaggedError<InvalidInstanceId>()("InvalidInstanceId", {
  instanceId: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid instance id ${shown(this.instanceId)}: ${this.reason}`
  }
}

/**
 * A slice name outside the token charset or length (a slice name becomes part of keys).
 * Raised before any I/O.
 *
 * @since 0.2.0
 * @category errors
 */
export class InvalidSliceName extends Schema.TaggedError<InvalidSliceName>()("InvalidSliceName", {
  slice: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid slice name ${shown(this.slice)}: ${this.reason}`
  }
}

/**
 * A lock id that a queue step cannot take: one that starts with `?`, which marks a grant
 * pending for a worker. Raised before any I/O.
 *
 * @since 0.2.0
 * @category errors
 */
export class InvalidLockId extends Schema.TaggedError<InvalidLockId>()("InvalidLockId", {
  lockId: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid lock id ${shown(this.lockId)}: ${this.reason}`
  }
}

/**
 * A fence (`claim`) that is not a whole number of at least 0. Raised before any I/O.
 *
 * @since 0.2.0
 * @category errors
 */
export class InvalidClaim extends Schema.TaggedError<InvalidClaim>()("InvalidClaim", {
  /** The claim as given, as text (it may be no number at all). */
  claim: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid claim ${shown(this.claim)}: ${this.reason}`
  }
}

/**
 * The store could not be reached: a lost connection, a timeout, or a server that is down.
 *
 * @since 0.1.0
 * @category errors
 */
export class StoreUnavailable extends Schema.TaggedError<StoreUnavailable>()("StoreUnavailable", {
  operation: Schema.String,
  reason: Schema.String,
  cause: Cause
}) {
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
export class StoreRefused extends Schema.TaggedError<StoreRefused>()("StoreRefused", {
  operation: Schema.String,
  reply: Schema.String,
  cause: Cause
}) {
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
export class NotAcknowledged extends Schema.TaggedError<NotAcknowledged>()("NotAcknowledged", {
  operation: Schema.String,
  /** The replicas that reported having the step (and every write before it) by the timeout. */
  acknowledged: Schema.Number,
  required: Schema.Number,
  timeoutMs: Schema.Number
}) {
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
export class CorruptValue extends Schema.TaggedError<CorruptValue>()("CorruptValue", {
  key: Schema.String,
  raw: Schema.String,
  reason: Schema.String
}) {
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
export class LockLost extends Schema.TaggedError<LockLost>()("LockLost", {
  token: Schema.String,
  lockId: Schema.String,
  holder: Schema.Option(Schema.String)
}) {
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
export class DataDirError extends Schema.TaggedError<DataDirError>()("DataDirError", {
  path: Schema.String,
  /** `lock`: another store, in this process or another, has the directory open. */
  operation: Schema.Literals(["create", "lock", "list", "write"]),
  reason: Schema.String,
  cause: Cause
}) {
  override get message(): string {
    return `data directory ${this.path} cannot be used: could not ${this.operation} it: ${this.reason}`
  }
}

/**
 * `TokenManager.link` made the local link but could not write the socket record: the
 * store failed. The record is written when the store returns (by the restore after
 * resubscription or the periodic refresh), so the socket is reachable again without
 * another `link`.
 *
 * @since 0.1.0
 * @category errors
 */
export class RecordNotStored extends Schema.TaggedError<RecordNotStored>()("RecordNotStored", {
  /**
   * The token linked locally: the one asked for, or (with `fresh`) the token minted for a
   * duplicate tab, whose claim is the one that failed.
   */
  token: Schema.String,
  connectionId: Schema.String,
  cause: Schema.Union([StoreUnavailable, StoreRefused]),
  /** Present when `token` is a fresh token: the one asked for was linked elsewhere. */
  fresh: Schema.optionalKey(Schema.Literal(true))
}) {
  override get message(): string {
    return `socket record of ${this.fresh === true ? "fresh token" : "token"} ${this.token} not stored (linked locally): ${this.cause.message}`
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

/**
 * A token, instance id, slice name, lock id or claim refused before any I/O.
 *
 * @since 0.2.0
 * @category errors
 */
export type InvalidInput = InvalidToken | InvalidInstanceId | InvalidSliceName | InvalidLockId | InvalidClaim

/**
 * Whether `error` is one of {@link InvalidInput}.
 *
 * @since 0.2.0
 * @category guards
 */
export const isInvalidInput = (error: { readonly _tag: string }): error is InvalidInput =>
  error._tag === "InvalidToken" ||
  error._tag === "InvalidInstanceId" ||
  error._tag === "InvalidSliceName" ||
  error._tag === "InvalidLockId" ||
  error._tag === "InvalidClaim"
