/**
 * A token's lock, as the local head of a worker takes it (DESIGN §4).
 *
 * Within a worker, the modifications of one token queue locally and only the head of that
 * queue deals with the store, so this module sees one caller per token at a time. It
 * adds what the store's single steps cannot: the wait for a release (no lost wake-up),
 * registration as a contender while waiting, and the turn a worker gives up after
 * releasing a lock that others wait for (no barging).
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as Option from "effect/Option"
import type * as Queue from "effect/Queue"
import { InstanceId } from "./InstanceId.js"
import { acquire, attemptWith, type Env, waitFor } from "./internal/lock/acquire.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import type { SignalEvent } from "./Signals.js"
import { Store } from "./Store.js"
import type { InvalidToken, StoreError } from "./StoreError.js"

/**
 * A granted lock.
 *
 * @since 0.1.0
 * @category models
 */
export interface Grant {
  readonly token: string
  /** Unique to this acquisition. */
  readonly lockId: string
  /** Strictly greater than the fence of every earlier grant of the token. */
  readonly fence: number
  /** The slices read with the grant. */
  readonly values: ReadonlyMap<string, Option.Option<string>>
  /** Other instances registered as waiters at the grant. */
  readonly contenders: number
  /** Clock time of the grant (ms). */
  readonly grantedAt: number
}

/**
 * What the local head tells `acquire` about the fibers queued behind it.
 *
 * @since 0.1.0
 * @category models
 */
export interface LocalQueue {
  /**
   * Whether any local waiter is left (`false`: the wait ends without a grant), with an
   * effect that completes at the next change after this look: of the local queue, a signal
   * received, or `poke`.
   */
  readonly look: Effect.Effect<{ readonly wanted: boolean; readonly changed: Effect.Effect<void> }>
  /** The token's signals, opened once by the caller and kept while it lives. */
  readonly signals: Effect.Effect<Queue.Dequeue<SignalEvent>, InvalidToken | StoreError>
  /** Drop the signals received so far, without subscribing when the caller has not yet. */
  readonly drain: Effect.Effect<void>
  /** Complete the current `changed` (a timer's way to end a wait). */
  readonly poke: Effect.Effect<void>
}

/**
 * What this worker's previous release left behind: whether it registered the worker as a
 * waiter (local waiters were queued), and whether it owes the other waiters a turn (they
 * were registered when it released).
 *
 * @since 0.1.0
 * @category models
 */
export interface Previous {
  readonly registered: boolean
  readonly yieldFirst: boolean
  /** The caller has just made the uncontended attempt (`attempt`) and found the lock held. */
  readonly attempted?: boolean
}

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Lock {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    readonly instanceId: string
    /**
     * After a release that others waited for, with no local waiter left: wait until another
     * holder released the lock (or a re-check interval passed, or `None` once the lock is
     * seen free), so that a modification arriving meanwhile does not take the lock back first.
     * Returns `true` when a local waiter arrived meanwhile (it must still yield).
     */
    readonly linger: (token: string, local: LocalQueue) => Effect.Effect<boolean, InvalidToken | StoreError>
    /**
     * One attempt to take the token's lock, reading `slices` with the grant: the first step
     * of `acquire` on its own, for a caller with no local waiter before it. `None` when the
     * lock is held; the instance is then registered as a waiter in the same step, so the
     * holder hears of it while the caller subscribes (pass `registered: true` to `acquire`,
     * which deregisters it if it leaves without a grant).
     */
    readonly attempt: (
      token: string,
      slices: ReadonlyArray<string>
    ) => Effect.Effect<Option.Option<Grant>, InvalidToken | StoreError>
    /**
     * Take the token's lock, reading `slices` with the grant. Without contention this is
     * one store round trip and no subscription. When the lock is held, the instance
     * registers as a waiter, subscribes first and then tries again, and waits for a
     * release, a resubscription, or `min(remaining + 5 ms, lockExpiration / 10)`.
     * With `previous.yieldFirst` (this worker just released a lock that others waited
     * for) it registers and waits for the next release, or a re-check interval, before
     * its first attempt: a busy worker does not take the lock back before a remote waiter
     * had its chance.
     * `None` when every local waiter left meanwhile (the instance is deregistered).
     */
    readonly acquire: (
      token: string,
      slices: ReadonlyArray<string>,
      local: LocalQueue,
      previous: Previous
    ) => Effect.Effect<Option.Option<Grant>, InvalidToken | StoreError>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Lock extends Context.Tag("leasehold/Lock")<Lock, Lock.Service>() {}

/**
 * Time from the first attempt to the grant, for grants that had to wait.
 *
 * @since 0.1.0
 * @category metrics
 */
export const lockWait = Metric.histogram(
  "leasehold_lock_wait_ms",
  MetricBoundaries.exponential({ start: 1, factor: 2, count: 16 }),
  "time waited for a token's lock, in ms"
)

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const store = yield* Store
  const instanceId = yield* InstanceId
  const config = yield* LeaseholdConfig
  const recheckMs = Math.max(1, Math.floor(Duration.toMillis(config.lockExpiration) / 10))
  let counter = 0
  const nextLockId = () => `${instanceId}:${(++counter).toString(36)}`
  const env: Env = { store, instanceId, recheckMs, nextLockId, lockWait }

  const attempt = (token: string, slices: ReadonlyArray<string>) => attemptWith(env, token, nextLockId(), slices)

  const linger = (token: string, local: LocalQueue) =>
    Effect.gen(function* () {
      yield* local.signals
      if (Option.isNone(yield* store.holder(token))) return false
      return (yield* waitFor(env, local, recheckMs, (wanted) => wanted)) === "local"
    })

  return Lock.of({
    instanceId,
    acquire: (token, slices, local, previous) => acquire(env, token, slices, local, previous),
    attempt,
    linger
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Lock, never, Store | InstanceId | LeaseholdConfig> = Layer.effect(Lock, make)
