/**
 * The narrow interface a backend implements: one atomic step per operation, on inputs the
 * front (`front.ts`) has already validated and encoded. The atomic operations are described
 * once (`internal/operations/`) and run by `call`: the Redis driver builds the script's call
 * from the description and reads its decoded reply, the memory driver runs its `memory` on
 * an in-process key space. The rest (plain commands, subscriptions, scans, blocking reads)
 * are operations of their own here. A driver never sees a `Signal`, and never decides what a
 * corrupt record or a lost lock means to a caller; the socket records it gets are encoded
 * by the descriptions (or come as wire strings).
 *
 * Numbers reach a driver normalized: a read's count is whole and at least 1, durations
 * are whole milliseconds and at least 1; a mailbox's `maxLen` is passed as given (the
 * store trims to it as Redis' XTRIM does).
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type {
  ConnectionStatus,
  KeyInfo,
  MailboxEntry,
  SliceEntry,
  SocketEventsSetting,
  SocketRecord
} from "../../Store.js"
import type { AcknowledgedError, StoreError, StoreRefused, StoreUnavailable } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import type { Operation } from "../operations/operation.js"

/**
 * The wire forms of a token's notices (`granted:<token>`, `contended:<token>`), published by
 * the queue steps on the channel of the worker they concern.
 */
export interface NoticeMessages {
  /** A grant's notice without its fence: the step that grants appends ` <fence>`. */
  readonly granted: string
  readonly contended: string
}

/** A step that runs only while the caller holds the lock: done, or the holder found instead. */
export type Guarded<A> =
  | { readonly _tag: "Done"; readonly value: A }
  | { readonly _tag: "Lost"; readonly holder: Option.Option<string> }

/** A socket claim as stored: ours now, or the raw record there (which may not decode). */
export type RawClaim = { readonly _tag: "Claimed" } | { readonly _tag: "Taken"; readonly raw: string }

/** A take-over as stored: ours now, or the raw record there instead (`undefined`: none). */
export type RawTakeOver =
  | { readonly _tag: "TakenOver" }
  | { readonly _tag: "Changed"; readonly raw: string | undefined }

/** A socket key found by a scan, with its raw value; the token may not be a valid one. */
export interface ScannedRecord {
  readonly key: string
  readonly token: string
  readonly raw: string
}

/** A change the store reported for a key that looks like a socket key; `event` is the store's name for it. */
export interface RawSocketEvent {
  readonly key: string
  readonly event: string
}

/**
 * What a release passes on with the lock (docs/design.md#hand-off-in-the-release-step): whether the
 * worker queues again (under the lock id `queueAs`, `""` for none), and the slices whose values the
 * grant's notice carries to the next holder (which then needs no claim to read them).
 *
 * @internal
 */
export interface Handoff {
  readonly requeue: boolean
  readonly queueAs: string
  readonly carry: ReadonlyArray<string>
}

/** @internal */
export interface Driver {
  readonly kind: "memory" | "redis"
  /** The backend's module name, which starts its log lines (`RedisStore`, `MemoryStore`). */
  readonly name: string
  readonly keys: Keys

  /**
   * Run a described operation (`internal/operations/`), its arguments checked by the front:
   * on Redis its script, on the embedded store its `memory` in one step; the reply read by
   * its `read`.
   */
  readonly call: <Args, Out, E extends AcknowledgedError>(
    operation: Operation<Args, any, Out, E, any, any, any>,
    args: Args
  ) => Effect.Effect<Out, E>

  // --- queue (docs/protocol.md#the-queue-hand-off) ---------------------------------------
  /** The name of the worker's notice channel that carries the token's notices. */
  readonly noticeChannel: (token: string, instanceId: string) => string
  /** Raw messages of the worker's notice channel that carries the token's notices, from the confirmed subscription on. */
  readonly notices: (
    token: string,
    instanceId: string
  ) => Effect.Effect<Stream.Stream<string, StoreUnavailable>, StoreError, Scope.Scope>

  // --- signals ------------------------------------------------------------------------
  readonly publish: (token: string, message: string) => Effect.Effect<void, StoreError>
  /** Raw messages of the token's channel, from the confirmed subscription on. */
  readonly subscribe: (token: string) => Effect.Effect<Stream.Stream<string, StoreUnavailable>, StoreError, Scope.Scope>
  readonly status: Effect.Effect<ConnectionStatus>
  readonly statusChanges: Stream.Stream<ConnectionStatus>

  // --- socket records -----------------------------------------------------------------
  readonly readSocket: (token: string) => Effect.Effect<Option.Option<string>, StoreError>
  readonly scanSockets: Stream.Stream<ScannedRecord, StoreError>
  /** One result per claim, in order; a claim the store refused is that claim's own failure. */
  readonly claimSockets: (
    claims: ReadonlyArray<readonly [token: string, record: SocketRecord]>
  ) => Effect.Effect<ReadonlyArray<Result.Result<RawClaim, StoreRefused>>, StoreError>
  readonly enableSocketEvents: Effect.Effect<SocketEventsSetting, StoreUnavailable>
  readonly socketEvents: Effect.Effect<Stream.Stream<RawSocketEvent, StoreUnavailable>, StoreError, Scope.Scope>

  // --- presence -----------------------------------------------------------------------
  readonly isPresent: (instanceId: string) => Effect.Effect<boolean, StoreError>
  readonly removePresence: (instanceId: string) => Effect.Effect<void, StoreError>
  /** Publish on the worker's presence channel. */
  readonly presencePublish: (instanceId: string, message: string) => Effect.Effect<void, StoreError>
  /** Raw messages of the worker's presence channel, from the confirmed subscription on. */
  readonly presenceMessages: (
    instanceId: string
  ) => Effect.Effect<Stream.Stream<string, StoreUnavailable>, StoreError, Scope.Scope>

  // --- mailboxes ----------------------------------------------------------------------
  /**
   * `readSocket`, then `mailboxAppend` to the instance the record names, in one step; the
   * raw record (`undefined`: none) and the entry's id (`undefined`: nothing appended, the
   * record naming no valid instance). Absent where the store cannot make it one step: the
   * front then makes the two.
   */
  readonly mailboxAppendToOwner?: (
    token: string,
    payload: string,
    maxLen: number,
    ttlMs: number
  ) => Effect.Effect<{ readonly record: string | undefined; readonly id: string | undefined }, AcknowledgedError>
  /** `blockMs` 0: do not wait. */
  readonly mailboxRead: (
    instanceId: string,
    afterId: string,
    count: number,
    blockMs: number
  ) => Effect.Effect<ReadonlyArray<MailboxEntry>, StoreError>
  readonly mailboxTrim: (instanceId: string, maxLen: number) => Effect.Effect<void, StoreError>
  readonly mailboxExpire: (instanceId: string, ttlMs: number) => Effect.Effect<void, StoreError>
  readonly mailboxLength: (instanceId: string) => Effect.Effect<number, StoreError>
  readonly mailboxSetCursor: (instanceId: string, id: string, ttlMs: number) => Effect.Effect<void, StoreError>
  readonly mailboxCursor: (instanceId: string) => Effect.Effect<Option.Option<string>, StoreError>

  // --- inspection ---------------------------------------------------------------------
  readonly tokenKeys: (token: string) => Effect.Effect<ReadonlyArray<KeyInfo>, StoreError>

  // --- a whole modification in one step ----------------------------------------------
  /** `Store.Stepping.modifyInStep`, its inputs checked: in the embedded store's one block, or Redis's one script on the values of the last grant. */
  readonly modifyInStep?: (
    token: string,
    slices: ReadonlyArray<string>,
    decide: (values: ReadonlyArray<Option.Option<string>>, fence: number) => ReadonlyArray<SliceEntry>,
    options: {
      readonly when:
        | (() => { readonly holder?: { readonly lockId: string; readonly claim?: number | undefined } } | undefined)
        | undefined
      readonly written:
        | ((values: ReadonlyArray<Option.Option<string>>, entries: ReadonlyArray<SliceEntry>) => void)
        | undefined
      readonly notices: NoticeMessages
    }
  ) => Effect.Effect<boolean, AcknowledgedError>
}
