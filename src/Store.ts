/**
 * The narrow set of atomic operations the leasehold protocol needs from its store.
 *
 * `Store` holds no protocol logic: each operation is one atomic step (one Lua script or
 * one transaction on Redis, one synchronous block on the embedded store). Two
 * implementations exist: `MemoryStore` (embedded, time on Effect's `Clock`) and
 * `RedisStore` (ioredis). The service is grouped by concern (`Store.Locking`,
 * `Store.Queueing`, `Store.Slices`, `Store.Signaling`, `Store.Sockets`, `Store.Presence`,
 * `Store.Mailboxes`, `Store.Inspection`).
 *
 * Both backends share one checked front (`internal/store/front.ts`) over a narrow driver
 * of their own: every operation that takes a token, a slice name or an instance id (also
 * inside a socket record or a `Contended` signal) is validated there before any I/O, so
 * user input never becomes part of a key or a Redis pattern; signals and socket records
 * are encoded and decoded there too, once for both backends.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type {
  AcquireResult,
  ClaimResult,
  ConnectionStatus,
  HolderOptions,
  KeyInfo,
  LockHolder,
  MailboxEntry,
  PresenceMessage,
  ReleaseResult,
  Signal,
  SliceEntry,
  SocketEvent,
  SocketEventsSetting,
  SocketRecord,
  TakeOverResult,
  WriteOptions
} from "./internal/storeModel.js"
import type { Queueing as QueueSteps } from "./internal/storeQueueing.js"
import type { Stepping as OneStep } from "./internal/storeStepping.js"
import type {
  AcknowledgedError,
  CorruptValue,
  InvalidClaim,
  InvalidInstanceId,
  InvalidSliceName,
  InvalidToken,
  LockLost,
  StoreError,
  StoreRefused,
  StoreUnavailable
} from "./StoreError.js"

/**
 * The values the service takes and gives.
 *
 * @since 0.1.0
 */
export type * from "./internal/storeModel.js"

export {
  /**
   * The id that denotes "before every entry" of a mailbox.
   *
   * @since 0.1.0
   * @category constants
   */
  MailboxStart
} from "./internal/storeModel.js"

export type {
  /**
   * How a release of the queue protocol hands the lock on (`releaseQueued`,
   * `commitAndReleaseQueued`).
   *
   * @since 0.1.0
   * @category models
   */
  ReleaseOptions
} from "./internal/storeQueueing.js"

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Store {
  /**
   * The lock of a token: take, release, commit, extend, inspect. `tryAcquire`, `release` and
   * `commitAndRelease` neither read nor change the token's queue: a lock shared with workers
   * that queue for it is taken and released with the steps of `Store.Queueing`.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Locking {
    /**
     * Take the lock with `lockId` (unique per acquisition) if it is free. When granted,
     * the fence is incremented and the named slices are read in the same step.
     */
    readonly tryAcquire: (
      token: string,
      lockId: string,
      slices: ReadonlyArray<string>
    ) => Effect.Effect<AcquireResult, InvalidToken | InvalidSliceName | AcknowledgedError>
    /** Compare-and-delete; publishes `Released` when it deleted (`released: false` when not the holder). */
    readonly release: (token: string, lockId: string) => Effect.Effect<ReleaseResult, InvalidToken | StoreError>
    /**
     * Write every entry and release, in one step, only while `lockId` holds the lock (else
     * `LockLost`, and nothing is written or published).
     */
    readonly commitAndRelease: (
      token: string,
      lockId: string,
      entries: ReadonlyArray<SliceEntry>
    ) => Effect.Effect<void, InvalidToken | InvalidSliceName | LockLost | AcknowledgedError>
    /**
     * Compare-and-extend to a full lock expiration, with the fence and the named slices to a
     * full token expiration (a lock held past the token expiration of its grant's reads keeps
     * what it read, and the fence that protects it); `false` when no longer the holder.
     */
    readonly extend: (
      token: string,
      lockId: string,
      slices?: ReadonlyArray<string>,
      options?: HolderOptions
    ) => Effect.Effect<boolean, InvalidToken | InvalidSliceName | InvalidClaim | StoreError>
    /** The current holder, if any. */
    readonly holder: (token: string) => Effect.Effect<Option.Option<LockHolder>, InvalidToken | StoreError>
  }

  /**
   * The slices of a token, read and written under its lock.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Slices {
    /** Read slices (refreshing their TTL), in the order asked. */
    readonly readSlices: (
      token: string,
      names: ReadonlyArray<string>
    ) => Effect.Effect<ReadonlyArray<Option.Option<string>>, InvalidToken | InvalidSliceName | StoreError>
    /**
     * Write every entry (each and the fence to a full token expiration), or none when
     * `lockId` no longer holds the lock (`LockLost`). With `options.extend` it extends the
     * lock to a full lock expiration too, as `extend` does; with `options.instanceId` it
     * answers how many workers other than that one are queued for the token, as
     * `queueLength` counts them, read in the same step (`undefined` without).
     */
    readonly writeIfHolder: (
      token: string,
      lockId: string,
      entries: ReadonlyArray<SliceEntry>,
      options?: WriteOptions
    ) => Effect.Effect<
      number | undefined,
      InvalidToken | InvalidSliceName | InvalidClaim | InvalidInstanceId | LockLost | AcknowledgedError
    >
  }

  /**
   * Signals on a token's channel, and the health of the connections that carry them.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Signaling {
    /** Publish a signal on the token's channel. */
    readonly publish: (
      token: string,
      signal: Signal
    ) => Effect.Effect<void, InvalidToken | InvalidInstanceId | StoreError>
    /**
     * Subscribe to the token's channel. The returned effect completes once the
     * subscription is confirmed: every signal published after that is delivered while
     * the connection lasts. The stream fails with `StoreUnavailable` when the subscriber
     * connection is lost; the subscription ends with the scope.
     */
    readonly subscribe: (
      token: string
    ) => Effect.Effect<Stream.Stream<Signal, StoreUnavailable>, InvalidToken | StoreError, Scope.Scope>
    /** The current connection status. */
    readonly status: Effect.Effect<ConnectionStatus>
    /** The connection status, now and at every change. */
    readonly statusChanges: Stream.Stream<ConnectionStatus>
  }

  /**
   * Socket records: which worker holds a client's socket.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Sockets {
    /** Claim the token's socket record if none exists; otherwise return the record there. */
    readonly claimSocket: (
      token: string,
      record: SocketRecord
    ) => Effect.Effect<ClaimResult, InvalidToken | InvalidInstanceId | CorruptValue | StoreError>
    /** Read the token's socket record. */
    readonly readSocket: (
      token: string
    ) => Effect.Effect<Option.Option<SocketRecord>, InvalidToken | CorruptValue | StoreError>
    /** Delete the record only if it is exactly `record`; `true` when deleted. */
    readonly deleteSocketIfOwner: (
      token: string,
      record: SocketRecord
    ) => Effect.Effect<boolean, InvalidToken | InvalidInstanceId | StoreError>
    /** Reset the record's TTL only if it is exactly `record`; `true` when refreshed. */
    readonly refreshSocket: (
      token: string,
      record: SocketRecord
    ) => Effect.Effect<boolean, InvalidToken | InvalidInstanceId | StoreError>
    /**
     * Every socket record of every instance, by a scan whose pattern the store builds
     * itself. A record that does not decode is skipped with a warning.
     */
    readonly scanSockets: Stream.Stream<readonly [token: string, record: SocketRecord], StoreError>
    /**
     * `claimSocket` for many records in one round trip (each claim is its own atomic step,
     * so tokens may live on different Cluster slots). Results come in the order asked; a
     * record there that does not decode is a `CorruptValue` in its place, a claim the
     * store refused (a key of another type, no memory left) a `StoreRefused`. A lost
     * connection fails the whole batch with `StoreUnavailable`.
     */
    readonly claimSockets: (
      claims: ReadonlyArray<readonly [token: string, record: SocketRecord]>
    ) => Effect.Effect<
      ReadonlyArray<Result.Result<ClaimResult, CorruptValue | StoreRefused>>,
      InvalidToken | InvalidInstanceId | StoreError
    >
    /**
     * Compare-and-set on the record alone: write `record` in place of `expected` only while
     * the stored record is exactly `expected` (instance and connection), with a fresh TTL;
     * otherwise nothing is written and the record there is returned (`Changed`). A record
     * there that does not decode is `CorruptValue`.
     */
    readonly takeOverSocket: (
      token: string,
      expected: SocketRecord,
      record: SocketRecord
    ) => Effect.Effect<TakeOverResult, InvalidToken | InvalidInstanceId | CorruptValue | StoreError>
    /**
     * Ask the store to report socket-record changes. Redis: `CONFIG SET
     * notify-keyspace-events` with the flags already set plus `K`, `g`, `$`, `x`, `e`
     * (nothing is sent when they are all there). A refused `CONFIG` is `Refused`, not an
     * error. A restarted server forgets the setting: call it again after a reconnection.
     */
    readonly enableSocketEvents: Effect.Effect<SocketEventsSetting, StoreUnavailable>
    /**
     * Subscribe to changes of every socket record (Redis: a pattern subscription to the
     * keyspace channels of socket keys, built by the store). The returned effect completes
     * once the subscription is confirmed. The stream fails with `StoreUnavailable` when
     * the subscriber connection is lost; events meanwhile are lost, so a caller re-checks
     * after subscribing again. Events of keys that are not valid tokens are dropped.
     */
    readonly socketEvents: Effect.Effect<Stream.Stream<SocketEvent, StoreUnavailable>, StoreError, Scope.Scope>
  }

  /**
   * Presence: each worker's entry, refreshed while it lives, and its channel, on which
   * other workers ask it whether a connection named by a record is still linked there.
   * The entry lives in a Cluster slot of its own (the worker's id is its hash tag), never
   * in a socket record's: no step reads both.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Presence {
    /** Set the worker's presence entry to expire `ttlMs` from now; `true` when it was still there. */
    readonly refreshPresence: (
      instanceId: string,
      ttlMs: number
    ) => Effect.Effect<boolean, InvalidInstanceId | StoreError>
    /** Whether the worker's presence entry is there. */
    readonly isPresent: (instanceId: string) => Effect.Effect<boolean, InvalidInstanceId | StoreError>
    /** Delete the worker's presence entry (a graceful close). */
    readonly removePresence: (instanceId: string) => Effect.Effect<void, InvalidInstanceId | StoreError>
    /** Publish a message on the worker's presence channel (delivered only to a subscriber of it). */
    readonly sendPresence: (
      instanceId: string,
      message: PresenceMessage
    ) => Effect.Effect<void, InvalidInstanceId | InvalidToken | StoreError>
    /**
     * The messages of the worker's presence channel, from the confirmed subscription on;
     * anything else published there is ignored. The stream fails with `StoreUnavailable`
     * when the subscription is lost.
     */
    readonly presenceMessages: (
      instanceId: string
    ) => Effect.Effect<Stream.Stream<PresenceMessage, StoreUnavailable>, InvalidInstanceId | StoreError, Scope.Scope>
  }

  /**
   * Mailboxes: each instance's stream of deliveries.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Mailboxes {
    /**
     * Append to an instance's mailbox (trimmed to about `maxLen` entries); returns the entry
     * id. A mailbox without an expiry gets `ttlMs`, so one whose instance is gone does not
     * stay forever; an expiry set by its reader is kept. With `minReplicasAck`, done once
     * that many replicas have it (an update acknowledged by a primary that a failover then
     * loses would never arrive); `NotAcknowledged` otherwise, the entry perhaps appended:
     * the sender appends it again, and the reader drops the copy.
     */
    readonly mailboxAppend: (
      instanceId: string,
      payload: string,
      options: { readonly maxLen: number; readonly ttlMs: number }
    ) => Effect.Effect<string, InvalidInstanceId | AcknowledgedError>
    /**
     * Append to the mailbox of the worker whose socket holds `token`, as `readSocket` then
     * `mailboxAppend` to the instance its record names: the record it appended for, or
     * `None` when the token has no record (nothing appended). The record is read when the
     * entry is appended, in one step where the store can make one (a single Redis server:
     * one script, one round trip; a Cluster, whose mailbox lives in another slot: the two
     * steps). A record that does not decode is a `CorruptValue`, one naming an invalid
     * instance an `InvalidInstanceId`; nothing is appended for either. Acknowledged as
     * `mailboxAppend` is.
     */
    readonly mailboxAppendToOwner: (
      token: string,
      payload: string,
      options: { readonly maxLen: number; readonly ttlMs: number }
    ) => Effect.Effect<Option.Option<SocketRecord>, InvalidToken | InvalidInstanceId | CorruptValue | AcknowledgedError>
    /**
     * Read up to `count` entries after `afterId`, in order. With `blockMs` ≥ 1, wait up to
     * that long for the first entry when there is none yet; 0 or absent: do not wait.
     */
    readonly mailboxRead: (
      instanceId: string,
      afterId: string,
      options: { readonly count: number; readonly blockMs?: number }
    ) => Effect.Effect<ReadonlyArray<MailboxEntry>, InvalidInstanceId | StoreError>
    /** Trim the mailbox to at most `maxLen` entries (the newest kept). */
    readonly mailboxTrim: (instanceId: string, maxLen: number) => Effect.Effect<void, InvalidInstanceId | StoreError>
    /** Make the mailbox expire `ttlMs` from now unless refreshed again. */
    readonly mailboxExpire: (instanceId: string, ttlMs: number) => Effect.Effect<void, InvalidInstanceId | StoreError>
    /** The number of entries in the mailbox. */
    readonly mailboxLength: (instanceId: string) => Effect.Effect<number, InvalidInstanceId | StoreError>
    /** Record the id of the last entry the instance delivered (for inspection), expiring after `ttlMs`. */
    readonly mailboxSetCursor: (
      instanceId: string,
      id: string,
      ttlMs: number
    ) => Effect.Effect<void, InvalidInstanceId | StoreError>
    /** The id of the last entry the instance delivered, as last recorded. */
    readonly mailboxCursor: (instanceId: string) => Effect.Effect<Option.Option<string>, InvalidInstanceId | StoreError>
  }

  /**
   * The token's queue of waiting workers and the hand-off of its lock
   * (docs/protocol.md#the-queue-hand-off): a release grants the lock to the queue's head in
   * the same step and notifies that worker alone.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Queueing extends QueueSteps {}

  /**
   * Inspection of a token's keys.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Inspection {
    /** Every key of the token, with its kind, size and expiry; reads only (no TTL is refreshed). */
    readonly tokenKeys: (token: string) => Effect.Effect<ReadonlyArray<KeyInfo>, InvalidToken | StoreError>
  }

  /**
   * A whole modification in one step of the store (`modifyInStep`): the embedded store runs
   * the caller's function inside its step, Redis on what its last grant of the token knew
   * (see docs/state.md).
   *
   * @since 0.1.0
   * @category models
   */
  export interface Stepping extends OneStep {}

  /**
   * The whole service, grouped by concern.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Service
    extends Locking,
      Queueing,
      Slices,
      Signaling,
      Sockets,
      Presence,
      Mailboxes,
      Inspection,
      Stepping {
    /** Which backend this is. */
    readonly kind: "memory" | "redis"
  }
}

/**
 * The store service.
 *
 * @since 0.1.0
 * @category tags
 */
export class Store extends Context.Service<Store, Store.Service>()("leasehold/Store") {}
