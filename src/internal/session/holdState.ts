/**
 * One hold of a grant (`HoldState`), in parts with one owner each: the grant held (fixed
 * once made), the cache and the writes it owes (`cache.ts`), the hold's time (`timing.ts`),
 * its turns (`relay.ts`), contention (`contention.ts`) and its idle wait (`parking.ts`). A
 * part's fields are written by its owner's functions; the other modules read them.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import type { AcknowledgedError, LockLost } from "../../StoreError.js"
import type { OneShot } from "../oneShot.js"
import type { HoldCache } from "./cache.js"
import type { HoldPolicy } from "./policy.js"
import type { Request, Session, SessionEnv } from "./session.js"

/**
 * One hold of a grant: the grant, how it is held, what it read and wrote, and where its
 * serving stands.
 *
 * @internal
 */
export interface HoldState {
  readonly grant: HeldGrant
  /** How the grant is held, chosen when the hold began. */
  readonly policy: HoldPolicy
  readonly cache: HoldCache
  readonly timing: HoldTiming
  readonly turns: Turns
  readonly contention: Contention
  readonly idle: IdleWait
  /**
   * Why the hold can write nothing more: its lock lost (the keep-alive, `timing.ts`) or a
   * group commit failed (`groupCommit.ts`); it serves nothing more, and its end releases.
   */
  failed: LockLost | AcknowledgedError | undefined
}

/**
 * The grant held, fixed for the hold's life (a parked lease keeps its fields, and the hold
 * resumes with them).
 *
 * @internal
 */
export interface HeldGrant {
  readonly env: SessionEnv
  readonly session: Session
  readonly token: string
  readonly lockId: string
  /** The fencing number of the grant held. */
  readonly fence: number
  /** The clock of the fiber that began the hold, read synchronously by the relay and the serving. */
  readonly clock: Clock.Clock
}

/**
 * The hold's time (owned by `timing.ts`): when its serving ends, and how long its lock is
 * known to live.
 *
 * @internal
 */
export interface HoldTiming {
  /** When the serving ends (`preciseMillis`): the policy's, cut by contention, moved by a renewal. */
  deadline: number
  /** Cancels the entry that wakes the serving loop at the deadline (`armTimer`). */
  deadlineTimer: (() => void) | undefined
  /**
   * A lock handed over by a release lives `handoffTimeout` until its first extension: till
   * then its writes and extensions carry the grant's fence as a claim (`Store.HolderOptions`),
   * so that a hold slower than that (a stalled event loop) takes back the lock it was
   * handed if nobody had it since, instead of failing its modifications. `undefined` once
   * extended (by an extension, or a write that carried one), and for any other grant.
   */
  claim: number | undefined
  /**
   * Until when the lock is known to be this hold's (`preciseMillis`): the grant's time plus a
   * lock expiration, then the send time of the last extension the store confirmed (or write
   * that carried one: `confirmedByWrite`) plus a lock expiration. A lease is renewed only
   * within it (`renew`).
   */
  confirmedUntil: number
  /**
   * The send time of the last write whose step saw no other worker queued for the token
   * (`Store.writeIfHolder` counts them); `-Infinity` when none did, or the last saw one: a
   * renewal within half a hold time of it needs no look of its own (`renew`).
   */
  clearSince: number
  /** The keep-alive: a lease's or a batch's for its whole hold, a lock handed over's until the hold ends. */
  keeper: KeepAlive | undefined
}

/**
 * The hold's turns (owned by `relay.ts`): the one in progress, how many were served, and
 * the relay that gives them.
 *
 * @internal
 */
export interface Turns {
  inProgress: Request | undefined
  served: number
  /**
   * When the hold last served a modification (`preciseMillis`): a lease that did in the last
   * half of its hold time, and that nobody contends, is held on at its deadline (`renew`).
   */
  servedAt: number
  /** When the turn in progress was given. */
  turnAt: number
  /** When the serving last waited for the store (or for the event loop). */
  ioAt: number
  /** Completed when the relay of turns ends (`relay`); `undefined` when none runs. */
  relayEnd: OneShot<void> | undefined
  /** Modifications that held the lock too long in the relay, logged by the fiber: with their held time. */
  longHolds: Array<readonly [Request, number]>
}

/**
 * Whether another worker waits for the token (owned by `contention.ts`).
 *
 * @internal
 */
export interface Contention {
  contended: boolean
  /** Whether contention is watched already (`watchContention`). */
  watching: boolean
}

/**
 * A lease's idle wait and its park timer (owned by `parking.ts`).
 *
 * @internal
 */
export interface IdleWait {
  /** When the serving loop's idle wait began (`preciseMillis`); `undefined` while it is not waiting. */
  idleSince: number | undefined
  /** The park timer fired: the serving loop parks at its next idle wait if nothing changed. */
  parkDue: boolean
  /** Cancels the park timer (`armPark`); `undefined` when none is armed. */
  parkTimer: (() => void) | undefined
}

/**
 * A running keep-alive: `stop` ends it (an extension under way may still finish).
 *
 * @internal
 */
export interface KeepAlive {
  readonly stop: () => void
  /**
   * When it extends next (the heap's time; infinite once the store said the lock is no
   * longer ours); `undefined` while an extension is under way.
   */
  readonly next: () => number | undefined
}
