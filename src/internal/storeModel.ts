/**
 * The values the `Store` service takes and gives: the outcomes of its lock, queue and
 * socket steps, signals and notices, socket records and their changes, mailbox entries,
 * connection status, key descriptions and the holder check's options. `Store` re-exports
 * every one of them.
 *
 * @since 0.2.0
 */
import type * as Option from "effect/Option"

/**
 * The outcome of `tryAcquire`.
 *
 * @since 0.1.0
 * @category models
 */
export type AcquireResult =
  | {
      readonly _tag: "Acquired"
      /** The fencing number of this grant: strictly greater than every earlier grant of the token. */
      readonly fence: number
      /** The requested slices, in the order asked, `None` where nothing is stored. */
      readonly values: ReadonlyArray<Option.Option<string>>
    }
  | {
      readonly _tag: "Held"
      /** Milliseconds until the current holder's lock expires (0 when it expires now). */
      readonly remainingMs: number
    }

/**
 * The outcome of `release`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReleaseResult {
  /** `true` when the lock still held the caller's `lockId` and was deleted. */
  readonly released: boolean
}

/**
 * The outcome of `acquireQueued` (docs/protocol.md#the-queue-hand-off): the lock taken (free with
 * nobody queued ahead, or a pending grant claimed), or the caller queued behind it.
 *
 * @since 0.2.0
 * @category models
 */
export type QueuedAcquireResult =
  | {
      readonly _tag: "Acquired"
      readonly fence: number
      readonly values: ReadonlyArray<Option.Option<string>>
      /** Other workers in the queue after the grant (the caller no longer is). */
      readonly queued: number
    }
  | {
      readonly _tag: "Queued"
      /** Milliseconds until the lock (or a grant pending for another worker) expires. */
      readonly remainingMs: number
    }

/**
 * A notice to one worker about one token: the lock was handed to it (`Granted`), or
 * another worker queued behind the lock it holds (`Contended`).
 *
 * A `Granted` notice names its grant by `fence`. Passed back as `acquireQueued`'s `claim`, it
 * lets the store tell a grant that expired unclaimed from one already claimed or replaced
 * since, so a notice that arrives late takes nothing. A notice in the older form, without a
 * number, has no `fence`.
 *
 * With `handedOver`, the grant installed the lock id the worker queued under: the worker
 * holds the lock (for the hand-off timeout, until it extends it) with the fence named, and
 * the notice carries the values of the slices the releasing step had at hand. Without it,
 * the grant is pending: the grantee claims it with an attempt (its fence then moves on).
 *
 * @since 0.2.0
 * @category models
 */
export type Notice =
  | { readonly _tag: "Granted"; readonly fence?: number; readonly handedOver?: HandedOver }
  | { readonly _tag: "Contended" }

/**
 * What a grant that installed the grantee's own lock id tells it (see `Notice`).
 *
 * @since 0.2.0
 * @category models
 */
export interface HandedOver {
  /** The lock id the grant installed: the one the worker queued under. */
  readonly lockId: string
  /** The other workers still queued. */
  readonly queued: number
  /** The slices carried (`None`: nothing stored); a slice not named here was not read. */
  readonly values: ReadonlyMap<string, Option.Option<string>>
}

/**
 * A notice with the token it is about, as a worker's notice channel carries it (one channel
 * may carry the notices of many tokens).
 *
 * @since 0.2.0
 * @category models
 */
export interface TokenNotice {
  readonly token: string
  readonly notice: Notice
}

/**
 * The current holder of a token's lock.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockHolder {
  readonly lockId: string
  readonly fence: number
  readonly remainingMs: number
}

/**
 * A signal published on a token's channel.
 *
 * - `Released`: the lock was released (with the lock id that held it).
 * - `Contended`: an instance contends for the lock (published by a caller: no store step
 *   publishes it; the queue's notices tell a holder of contention).
 *
 * @since 0.1.0
 * @category models
 */
export type Signal =
  | {
      readonly _tag: "Released"
      /** The lock id released, when a release published it (not when published by hand). */
      readonly lockId?: string
    }
  | { readonly _tag: "Contended"; readonly instanceId: string }

/**
 * Which worker holds a client's socket.
 *
 * @since 0.1.0
 * @category models
 */
export interface SocketRecord {
  readonly instanceId: string
  readonly connectionId: string
}

/**
 * The outcome of claiming a socket record: ours now, or someone else's record (which may
 * be another connection of this very instance).
 *
 * @since 0.1.0
 * @category models
 */
export type ClaimResult = { readonly _tag: "Claimed" } | { readonly _tag: "Taken"; readonly record: SocketRecord }

/**
 * The outcome of taking a socket record over: ours now, or the record found instead of the
 * one expected (`None`: there is none any more). Nothing is written unless the record was
 * exactly the one expected.
 *
 * @since 0.2.0
 * @category models
 */
export type TakeOverResult =
  | { readonly _tag: "TakenOver" }
  | { readonly _tag: "Changed"; readonly record: Option.Option<SocketRecord> }

/**
 * A message on a worker's presence channel: a question from another worker about one of
 * the records naming this one (is the connection still linked here?), or the answer to a
 * question this worker asked. `askId` pairs them; `from` is the worker to answer.
 *
 * @since 0.2.0
 * @category models
 */
export type PresenceMessage =
  | {
      readonly _tag: "Ask"
      readonly askId: string
      readonly from: string
      readonly token: string
      readonly connectionId: string
    }
  | { readonly _tag: "Answer"; readonly askId: string; readonly linked: boolean }

/**
 * A change to a socket record, as the store reports it: `set` (written), `del` (deleted),
 * `expired` (its TTL ran out), `evicted` (dropped under memory pressure).
 *
 * @since 0.1.0
 * @category models
 */
export interface SocketEvent {
  readonly token: string
  readonly event: "set" | "del" | "expired" | "evicted"
}

/**
 * Whether the store agreed to report socket-record changes. `Refused`: the server does not
 * let us turn its notifications on (a managed Redis that disables `CONFIG`); a
 * subscription still works but may stay silent unless an operator enabled the events.
 *
 * @since 0.1.0
 * @category models
 */
export type SocketEventsSetting =
  | {
      readonly _tag: "Enabled"
      /** The server's notification flags now in force (Redis `notify-keyspace-events`). */
      readonly flags: string
    }
  | { readonly _tag: "Refused"; readonly reply: string }

/**
 * One entry of an instance's mailbox stream.
 *
 * @since 0.1.0
 * @category models
 */
export interface MailboxEntry {
  /** Stream id (`<ms>-<seq>`), strictly increasing within one mailbox. */
  readonly id: string
  readonly payload: string
}

/**
 * The health of the store's connections. `epoch` increases every time a connection
 * becomes ready, so a caller that remembers an epoch can wait for the next recovery
 * without missing one that happened meanwhile.
 *
 * @since 0.1.0
 * @category models
 */
export interface ConnectionStatus {
  readonly ready: boolean
  readonly epoch: number
}

/**
 * One key of a token, as `tokenKeys` describes it (for inspection).
 *
 * @since 0.1.0
 * @category models
 */
export interface KeyInfo {
  /** The part of the key after the token's `{<token>}:`: `lock`, `fence`, `queue`, `queue:d`, `s:<slice>`, `socket`. */
  readonly name: string
  readonly kind: "string" | "set" | "other"
  /** Bytes of a string, members of a set (the queue and its deadlines: sorted sets on Redis), 0 otherwise. */
  readonly size: number
  /** Milliseconds until it expires; `None` for a key without expiry. */
  readonly ttlMs: Option.Option<number>
}

/**
 * A slice write: the slice name and its encoded value.
 *
 * @since 0.1.0
 * @category models
 */
export type SliceEntry = readonly [name: string, value: string]

/**
 * How a step that writes or extends under a lock checks its holder (`writeIfHolder`,
 * `extend`).
 *
 * @since 0.1.0
 * @category models
 */
export interface HolderOptions {
  /**
   * The fence of the grant that handed `lockId` over (a lock installed by a release, which
   * lives `handoffTimeout` until its holder extends it). Found free, with the fence still at
   * this value and the worker of `lockId` (before its last `:`) recorded in the queue under
   * it and not queued again, the lock was granted to nobody since that grant expired and
   * nobody has written under it: the step takes it back for `lockId` (a full lock
   * expiration) and goes on. A whole number, at least 0; `undefined` for none.
   */
  readonly claim?: number | undefined
}

/**
 * How a write under a lock is made (`Store.writeIfHolder`): its holder check, and what it
 * does beside writing, in the same step.
 *
 * @since 0.1.0
 * @category models
 */
export interface WriteOptions extends HolderOptions {
  /**
   * Count the workers queued for the token other than this one (as `queueLength` does), read
   * before anything is written; `undefined`: no count.
   */
  readonly instanceId?: string | undefined
  /** Extend the lock to a full lock expiration, as `extend` does. */
  readonly extend?: boolean | undefined
}

/**
 * The id that denotes "before every entry" of a mailbox.
 *
 * @since 0.1.0
 * @category constants
 */
export const MailboxStart = "0-0"
