/**
 * The state of one hold of a grant (`HoldState`), which the hold's modules share, and the
 * handle of its keep-alive.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import type * as Option from "effect/Option"
import type { AcknowledgedError, LockLost } from "../../StoreError.js"
import type { Request } from "../lease.js"
import type { OneShot } from "../oneShot.js"
import type { HoldPolicy } from "./policy.js"
import type { Session, SessionEnv } from "./session.js"

/**
 * One hold of a grant: what it read and wrote, and where its serving stands.
 *
 * @internal
 */
export interface HoldState {
  readonly env: SessionEnv
  readonly session: Session
  /** The fencing number of the grant held. */
  readonly fence: number
  /**
   * A lock handed over by a release lives `handoffTimeout` until its first extension: till
   * then its writes and extensions carry the grant's fence as a claim (`Store.HolderOptions`),
   * so that a hold slower than that (a stalled event loop) takes back the lock it was
   * handed if nobody had it since, instead of failing its modifications. `undefined` once
   * extended, and for any other grant.
   */
  claim: number | undefined
  readonly token: string
  readonly lockId: string
  /** How the grant is held, chosen when the hold began. */
  readonly policy: HoldPolicy
  readonly cache: Map<string, Option.Option<string>>
  readonly dirty: Map<string, string>
  unacked: Array<Request>
  inProgress: Request | undefined
  served: number
  deadline: number
  /**
   * When the hold last served a modification (`fineMillis`): a lease that did in the last
   * half of its hold time, and that nobody contends, is held on at its deadline (`renew` in
   * `hold.ts`).
   */
  servedAt: number
  /**
   * Until when the lock is known to be this hold's (`fineMillis`): the grant's time plus a
   * lock expiration, then the send time of the last extension the store confirmed plus a lock
   * expiration. A lease is renewed only within it (`renew` in `hold.ts`).
   */
  confirmedUntil: number
  /** How long the last group commit took (ms): what a write now would add to the hold. */
  writeMs: number
  contended: boolean
  failed: LockLost | AcknowledgedError | undefined
  /** Cancels the entry that wakes the serving loop at the deadline (`armTimer`). */
  timer: (() => void) | undefined
  /** Whether contention is watched already (`watchContention`). */
  watching: boolean
  /** A lease's or a batch's `keepAlive`, for its whole hold. */
  keeper: KeepAlive | undefined
  /** The clock of the fiber that began the hold, read synchronously by the relay and the serving. */
  readonly clock: Clock.Clock
  /** When the serving last waited for the store (or for the event loop). */
  ioAt: number
  /** When the turn in progress was given. */
  turnAt: number
  /** Completed when the relay of turns ends (`relay`); `undefined` when none runs. */
  relayEnd: OneShot<void> | undefined
  /** Modifications that held the lock too long in the relay, logged by the fiber: with their held time. */
  longHolds: Array<readonly [Request, number]>
  /** The park timer fired: the serving loop parks at its next idle wait if nothing changed. */
  parkDue: boolean
  /** Cancels the park timer (`armPark`); `undefined` when none is armed. */
  parkTimer: (() => void) | undefined
  /** When the serving loop's idle wait began (`fineMillis`); `undefined` while it is not waiting. */
  idleSince: number | undefined
}

/**
 * A running keep-alive: `stop` ends it (an extension under way may still finish).
 *
 * @internal
 */
export interface KeepAlive {
  readonly stop: () => void
  /**
   * When it extends next (the wheel's time; infinite once the store said the lock is no
   * longer ours); `undefined` while an extension is under way.
   */
  readonly next: () => number | undefined
}
