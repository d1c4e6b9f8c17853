/**
 * The token's queue of waiting workers and the hand-off of its lock, as the store's steps
 * (`Store.Queueing`, docs/protocol.md#the-queue-hand-off), and how a release hands the lock on
 * (`ReleaseOptions`); `Store` re-exports both.
 *
 * A release grants the lock to the queue's head in the same step and notifies that worker
 * alone. A worker queues under a lock id of its own (the attempt's); the grant installs it
 * (for the hand-off timeout, which the grantee extends as it holds the lock) and its notice
 * carries the values of the slices the releasing step had at hand, so the grantee holds the
 * lock from the notice on, without a claim. A grantee that needs other slices, or whose
 * notice was lost, claims the grant with an attempt. Every step drops the entries whose
 * deadline (a lock expiration after their last refresh) has passed, and one that finds the
 * lock free with a non-empty queue grants it to the head.
 *
 * @since 0.2.0
 */
import type * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type {
  AcknowledgedError,
  InvalidClaim,
  InvalidInstanceId,
  InvalidLockId,
  InvalidSliceName,
  InvalidToken,
  LockLost,
  StoreError,
  StoreUnavailable
} from "../StoreError.js"
import type { Notice, QueuedAcquireResult, SliceEntry, TokenNotice } from "./storeModel.js"

/**
 * How a release of the queue protocol hands the lock on (`releaseQueued`,
 * `commitAndReleaseQueued`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReleaseOptions {
  readonly instanceId: string
  /** Queue the worker again at the tail (it has more to do). */
  readonly requeue?: boolean
  /** With `requeue`: the lock id it queues under (a grant to it installs that id). */
  readonly queueAs?: string
  /** Slices (names) whose values the grant's notice carries to the next holder. */
  readonly carry?: ReadonlyArray<string>
  /** `commitAndReleaseQueued` only: as `HolderOptions.claim`. */
  readonly claim?: number
}

/**
 * The steps of the queue hand-off; `Store.Queueing`.
 *
 * @since 0.2.0
 * @category models
 */
export interface Queueing {
  /**
   * Take the lock with `lockId` when it is free and no other worker is queued ahead, or
   * when it is a grant pending for this worker. Otherwise queue the worker under `lockId`
   * (once; a later call refreshes its deadline and its lock id, and tells the holder again)
   * and answer `Queued`. Taking increments the fence and reads `slices`.
   *
   * `claim` is the `fence` of the `Granted` notice the worker claims for. While the
   * token's fence still equals it, nobody has claimed since that grant was made: the grant
   * expired unclaimed, and the claim takes a free lock even with others queued ahead, or
   * puts the worker back at the head of the queue. Once the fence has moved on (the grant
   * was claimed, or another claim came since) the attempt is an ordinary one: a late
   * notice never lets a worker past the queue's head. A whole number, at least 0.
   */
  readonly acquireQueued: (
    token: string,
    lockId: string,
    slices: ReadonlyArray<string>,
    options: { readonly instanceId: string; readonly claim?: number }
  ) => Effect.Effect<
    QueuedAcquireResult,
    InvalidToken | InvalidInstanceId | InvalidLockId | InvalidSliceName | InvalidClaim | AcknowledgedError
  >
  /**
   * Compare-and-delete, then (with `requeue`) queue the worker at the tail, then grant the
   * lock to the head. `queued`: the other workers queued, counted before the grant.
   */
  readonly releaseQueued: (
    token: string,
    lockId: string,
    options: ReleaseOptions
  ) => Effect.Effect<
    { readonly released: boolean; readonly queued: number },
    InvalidToken | InvalidInstanceId | InvalidLockId | InvalidSliceName | StoreError
  >
  /**
   * `writeIfHolder` and `releaseQueued` in one step; `LockLost` (nothing done) when not the
   * holder. The grant's notice carries the written slices and those of `carry`.
   */
  readonly commitAndReleaseQueued: (
    token: string,
    lockId: string,
    entries: ReadonlyArray<SliceEntry>,
    options: ReleaseOptions
  ) => Effect.Effect<
    number,
    InvalidToken | InvalidInstanceId | InvalidLockId | InvalidSliceName | InvalidClaim | LockLost | AcknowledgedError
  >
  /**
   * Leave the queue; a grant pending for the worker passes to the next head. With `lockId`
   * (the last lock id the worker queued under) only that entry leaves and only a grant made
   * under it passes: a newer attempt of the same worker keeps its place and its grant.
   */
  readonly leaveQueue: (
    token: string,
    instanceId: string,
    lockId?: string
  ) => Effect.Effect<void, InvalidToken | InvalidInstanceId | InvalidLockId | StoreError>
  /** The workers queued other than `instanceId`, in one step. */
  readonly queueLength: (
    token: string,
    instanceId: string
  ) => Effect.Effect<number, InvalidToken | InvalidInstanceId | StoreError>
  /** The workers queued, head first (for inspection and tests). */
  readonly queue: (token: string) => Effect.Effect<ReadonlyArray<string>, InvalidToken | StoreError>
  /**
   * The token's notices to `instanceId`, from the confirmed subscription on; the stream
   * fails with `StoreUnavailable` when the subscription is lost.
   */
  readonly notices: (
    token: string,
    instanceId: string
  ) => Effect.Effect<
    Stream.Stream<Notice, StoreUnavailable>,
    InvalidToken | InvalidInstanceId | StoreError,
    Scope.Scope
  >
  /**
   * The channel that carries the token's notices to `instanceId`: one per worker on a
   * single server and on the embedded store (every token's), one per token on a Redis
   * Cluster. Tokens with the same channel share one `channelNotices` subscription.
   */
  readonly noticeChannel: (token: string, instanceId: string) => string
  /**
   * Every notice on `noticeChannel(token, instanceId)`, whatever token it is about, from
   * the confirmed subscription on; the stream fails with `StoreUnavailable` when the
   * subscription is lost. One subscription can serve all the tokens of a channel.
   */
  readonly channelNotices: (
    token: string,
    instanceId: string
  ) => Effect.Effect<
    Stream.Stream<TokenNotice, StoreUnavailable>,
    InvalidToken | InvalidInstanceId | StoreError,
    Scope.Scope
  >
}
