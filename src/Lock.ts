/**
 * A token's lock, as the local head of a worker takes it
 * (docs/design.md#the-lock-a-queue-in-the-store).
 *
 * Within a worker, the modifications of one token queue locally and only the head of that
 * queue deals with the store, so this module sees one caller per token at a time. The
 * store keeps the workers' queue and hands the lock to its head in the releasing step
 * (no barging, one wake-up per hand-off); this module adds the wait for that hand-off
 * (no lost wake-up: a notice, or a re-check that claims a grant whose notice was lost)
 * and leaving the queue, with nothing left behind, however the wait ends.
 *
 * `withLock` runs an effect under a token's lock, as a turn of the token's local queue (beside
 * the token's modifications, in order), with the grant's fencing number:
 *
 * ```ts
 * import { Effect } from "effect"
 * import { Lock } from "leasehold"
 *
 * declare const charge: (invoice: string, fence: number) => Effect.Effect<void>
 *
 * const once = (invoice: string) =>
 *   Effect.flatMap(Lock.Lock, (lock) => lock.withLock(`invoice-${invoice}`, (grant) => charge(invoice, grant.fence)))
 * ```
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import type * as Scope from "effect/Scope"
import { InstanceId } from "./InstanceId.js"
import { acquire, attemptWith, type LockContext } from "./internal/lock/acquire.js"
import { type Engine, register, type WithLock } from "./internal/lock/service.js"
import * as Timers from "./internal/timers.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import type { LockExpired } from "./StateError.js"
import { Store } from "./Store.js"
import type { AcknowledgedError, InvalidInput } from "./StoreError.js"

/**
 * The lock a `withLock` turn runs under.
 *
 * @since 0.1.0
 * @category models
 */
export interface Grant {
  readonly token: string
  /**
   * Strictly greater than the fence of every earlier grant of the token: a write that
   * carries it can be refused by a store that has seen a greater one. Turns served by one
   * lease of this worker share their grant's number.
   */
  readonly fence: number
}

/**
 * What `withLock` can fail with, besides the errors of its own effect: an invalid token,
 * a store that did not answer or acknowledge, or a lock that expired before the turn
 * ended.
 *
 * @since 0.2.0
 * @category errors
 */
export type LockError = InvalidInput | AcknowledgedError | LockExpired

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
    /** This worker's instance id, which its lock ids start with. */
    readonly instanceId: string
    /**
     * Run `use` under the token's lock, and release it (or keep it under this worker's
     * lease) when `use` ends. Workers take a token's lock in the order they asked for it, and
     * within a worker `withLock` queues with the token's modifications. The lock lives for
     * `lockExpiration` and is extended while `use` runs; an expired lock fails the turn with
     * `LockExpired`. Interrupting the caller leaves the queue, or ends `use`.
     */
    readonly withLock: <A, E, R>(
      token: string,
      use: (grant: Grant) => Effect.Effect<A, E, R>,
      options?: { readonly event?: string }
    ) => Effect.Effect<A, E | LockError, R>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Lock extends Context.Service<Lock, Lock.Service>()("leasehold/Lock") {}

/**
 * Time from the first attempt to the grant, for grants that had to wait.
 *
 * @since 0.1.0
 * @category metrics
 */
export const lockWait = Metric.histogram("leasehold_lock_wait_ms", {
  description: "time waited for a token's lock, in ms",
  boundaries: Metric.exponentialBoundaries({ start: 1, factor: 2, count: 16 })
})

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Lock.Service, never, Store | InstanceId | LeaseholdConfig | Scope.Scope> = Effect.gen(
  function* () {
    const store = yield* Store
    const instanceId = yield* InstanceId
    const config = yield* LeaseholdConfig
    const recheckMs = Math.max(
      1,
      Math.floor(Math.min(Duration.toMillis(config.lockExpiration) / 10, Duration.toMillis(config.handoffTimeout) / 2))
    )
    let counter = 0
    const nextLockId = () => `${instanceId}:${(++counter).toString(36)}`
    const timers = yield* Timers.make
    const scope = yield* Effect.scope
    const env: LockContext = {
      store,
      instanceId,
      recheckMs,
      handoffMs: Duration.toMillis(config.handoffTimeout),
      nextLockId,
      timers,
      scope,
      lockWait
    }
    let served: WithLock | undefined

    const attemptMasked = (token: string, slices: ReadonlyArray<string>) =>
      attemptWith(env, token, nextLockId(), slices)

    const engine: Engine = {
      instanceId,
      nextLockId,
      acquire: (token, slices, local, previous) => acquire(env, token, slices, local, previous),
      // uninterruptible: its clean-up after a failure is a handler of its store step
      attempt: (token, slices) => Effect.uninterruptible(attemptMasked(token, slices)),
      attemptMasked,
      serve: (run) => {
        served = run
      }
    }
    const lock = Lock.of({
      instanceId,
      withLock: (token, use, options) =>
        Effect.suspend(() =>
          served === undefined
            ? Effect.die(new Error("Lock.withLock: no leases serve this lock (build it in a Worker layer)"))
            : served(token, use, options)
        )
    })
    // the engine the worker's leases take locks with, found by this service (`engineOf`)
    return register(lock, engine)
  }
)

/**
 * A worker's lock, with the engine its leases take locks with: `withLock` is served once
 * the worker's leases are built over it, as `Worker`'s layers do.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Lock, never, Store | InstanceId | LeaseholdConfig> = Layer.effect(Lock, make)
