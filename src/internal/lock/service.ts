/**
 * The worker's side of a token's lock, as the sessions use it (`internal/lease.ts`): one
 * attempt, the wait as the local head of the token's queue, and the types they exchange.
 * `Lock.make` builds it with the public `Lock`, over the same state, and the leases find it
 * by that `Lock` (`engineOf`): the public service shows none of it.
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Result from "effect/Result"
import type { Lock } from "../../Lock.js"
import type { AcknowledgedError, InvalidInput, StoreError } from "../../StoreError.js"
import type { Mark, SignalEvent } from "../signals.js"

/** What `Lock.withLock` runs through: a turn of the token's local queue, under its lock. */
export type WithLock = Lock.Service["withLock"]

/**
 * A granted lock.
 */
export interface Grant {
  readonly token: string
  /** Unique to this acquisition. */
  readonly lockId: string
  /** Strictly greater than the fence of every earlier grant of the token. */
  readonly fence: number
  /** The slices read with the grant. */
  readonly values: ReadonlyMap<string, Option.Option<string>>
  /** Other workers queued for the lock at the grant. */
  readonly contenders: number
  /**
   * Clock time of the grant (ms, with the fraction of a millisecond the clock's nanoseconds
   * give: a quantum of 2 ms is timed from it).
   */
  readonly grantedAt: number
  /**
   * The lock was handed over by the store (a release installed this worker's lock id): it
   * lives for the hand-off timeout from the grant, not a lock expiration, until extended.
   */
  readonly handedOver?: boolean
}

/**
 * An attempt that did not take the lock: how long the lock has left, and the lock id the
 * worker is now queued under.
 */
export interface Refused {
  readonly remainingMs: number
  readonly lockId: string
}

/**
 * What the local head tells `acquire` about the fibers queued behind it.
 */
export interface LocalQueue {
  /**
   * Whether any local waiter is left (`false`: the wait ends without a grant), with an
   * effect that completes at the next change after this look: of the local queue, a signal
   * received, or `wake`.
   */
  readonly look: Effect.Effect<{ readonly wanted: boolean; readonly changed: Effect.Effect<void> }>
  /** The token's signals, opened once by the caller and kept while it lives. */
  readonly signals: Effect.Effect<SignalInbox, InvalidInput | StoreError>
  /** Drop the signals received so far, without subscribing when the caller has not yet. */
  readonly drain: Effect.Effect<void>
  /** Whether the token's signals are subscribed already (`signals` was opened). */
  readonly listening: Effect.Effect<boolean>
  /** Complete the current `changed` (a timer's way to end a wait), at once. */
  readonly wake: () => void
  /** `Signals.missedSince` for the token. */
  readonly missedSince: (mark: Mark) => boolean
}

/**
 * The signals a session received and nobody has taken yet.
 */
export interface SignalInbox {
  /** The signals received since the last `take`, oldest first. */
  readonly take: () => ReadonlyArray<SignalEvent>
}

/**
 * What this worker's previous step left behind: whether it is in the token's store queue
 * (its last release put it back at the tail because local waiters remained, or an attempt
 * queued it).
 */
export interface QueuePlace {
  readonly queued: boolean
  /**
   * No attempt is needed before the first wait: the caller has just made the uncontended
   * attempt (`attempt`) and was queued, or its release handed the lock to another worker
   * and put this one back at the tail.
   */
  readonly attempted?: boolean
  /** With `attempted`: how long the lock was left to be held, the first wait's bound. */
  readonly remainingMs?: number
  /**
   * With `attempted`: the token's notice channel just before that attempt was sent
   * (`Signals.mark`). A caller that listens only after its attempt re-checks the store
   * once, unless this says that no notice about the token can have been missed.
   */
  readonly mark?: Mark
  /**
   * With `attempted`: the lock id the worker was queued under by that step. A grant that
   * installs it comes with its notice, and is held from there without a claim.
   */
  readonly lockId?: string
}

/** What the sessions take a token's lock with. */
export interface Engine {
  readonly instanceId: string
  /** A lock id unique to this worker (for a release that queues the worker again: `QueuePlace.lockId`). */
  readonly nextLockId: () => string
  /**
   * One attempt to take the token's lock, reading `slices` with the grant: the first step
   * of `acquire` on its own, for a caller with no local waiter before it. `Left` with the
   * time the lock has left when it is held or other workers are queued: the worker is then
   * queued in the same step under the attempt's lock id, and the holder told (pass
   * `queued: true, attempted: true`, that time and that lock id to `acquire`, which leaves
   * the queue if it ends without a grant).
   */
  readonly attempt: (
    token: string,
    slices: ReadonlyArray<string>
  ) => Effect.Effect<Result.Result<Grant, Refused>, InvalidInput | AcknowledgedError>
  /**
   * `attempt` for a caller that already runs it uninterruptibly (`session/caller.ts`'s `begin`
   * does): the same step without an uninterruptible region of its own. Run interruptibly,
   * an interruption during the store's step would skip the release of a lock taken by a
   * lost reply.
   */
  readonly attemptMasked: (
    token: string,
    slices: ReadonlyArray<string>
  ) => Effect.Effect<Result.Result<Grant, Refused>, InvalidInput | AcknowledgedError>
  /**
   * Take the token's lock, reading `slices` with the grant (docs/protocol.md#the-queue-hand-off).
   * Without contention this is one store round trip and no subscription. Otherwise the worker is
   * queued in the store and waits for the lock to be handed to it (a `Granted` notice that hands
   * it over, or one it claims), for a resubscription, or for `min(remaining + 5 ms,
   * lockExpiration / 10, handoffTimeout / 2)`, after which it checks again (and claims a grant
   * whose notice was lost before the grant expires).
   * `None` when every local waiter left meanwhile (the worker leaves the queue, and a
   * grant pending for it passes to the next worker).
   */
  readonly acquire: (
    token: string,
    slices: ReadonlyArray<string>,
    local: LocalQueue,
    previous: QueuePlace
  ) => Effect.Effect<Option.Option<Grant>, InvalidInput | AcknowledgedError>
  /**
   * Serve `Lock.withLock` with `run`: the worker's leases do, once built over this lock, so
   * that a turn under the lock queues with the token's modifications on this worker.
   */
  readonly serve: (run: WithLock) => void
}

const engines = new WeakMap<Lock.Service, Engine>()

/** Made by `Lock.make` with the lock it serves: the engine of a lock is found by the lock. */
export const register = (lock: Lock.Service, engine: Engine): Lock.Service => {
  engines.set(lock, engine)
  return lock
}

/** The engine `Lock.make` built with `lock`. */
export const engineOf = (lock: Lock.Service): Engine => {
  const engine = engines.get(lock)
  if (engine === undefined) throw new Error("a Lock service not made by Lock.make")
  return engine
}
