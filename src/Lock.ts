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
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import { InstanceId } from "./InstanceId.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import type { SignalEvent } from "./Signals.js"
import { type AcquireResult, Store } from "./Store.js"
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

  const makeGrant = (
    token: string,
    lockId: string,
    slices: ReadonlyArray<string>,
    result: Extract<AcquireResult, { readonly _tag: "Acquired" }>,
    grantedAt: number
  ): Grant => ({
    token,
    lockId,
    fence: result.fence,
    values: new Map(slices.map((name, i) => [name, result.values[i] ?? Option.none()])),
    contenders: result.contenders,
    grantedAt
  })

  /** A release of this worker's own lock: it says nothing about another holder. */
  const isOwn = (event: SignalEvent) =>
    event._tag === "Released" && event.lockId !== undefined && event.lockId.startsWith(`${instanceId}:`)

  /** A release by another holder, or a resubscription (one may have been missed). */
  const isChance = (event: SignalEvent) => (event._tag === "Released" && !isOwn(event)) || event._tag === "Resubscribed"

  /**
   * Wait for a chance (`"released"`), for the local queue to say so (`stop(wanted)`:
   * `"local"`), or for `timeoutMs` (`"timeout"`). Waiters wait often and signals are many:
   * every source completes the one `changed` of the local queue (a timer fiber by `poke`),
   * so a wait costs one fiber, not a race of several for each signal.
   */
  const waitFor = (local: LocalQueue, timeoutMs: number, stop: (wanted: boolean) => boolean) => {
    let timedOut = false
    return Effect.acquireUseRelease(
      Effect.fork(
        Effect.interruptible(
          Effect.zipRight(
            Effect.sleep(timeoutMs),
            Effect.suspend(() => {
              timedOut = true
              return local.poke
            })
          )
        )
      ),
      () =>
        Effect.gen(function* () {
          const signals = yield* local.signals
          while (true) {
            // Looked at before the checks: a change after them completes it.
            const { wanted, changed } = yield* local.look
            if (stop(wanted)) return "local" as const
            if (Chunk.some(yield* Queue.takeAll(signals), isChance)) return "released" as const
            if (timedOut) return "timeout" as const
            yield* changed
          }
        }),
      (timer) => Fiber.interruptFork(timer)
    )
  }

  const acquire = (token: string, slices: ReadonlyArray<string>, local: LocalQueue, previous: Previous) => {
    const yieldFirst = previous.yieldFirst
    // `attempting`: the lock id of the last attempt, until it is known refused. An exit
    // other than success with it set (an interruption between the grant and the return,
    // or an attempt whose reply was lost) releases it: lock ids are unique, so releasing
    // one this worker was not granted deletes nothing.
    const state = { registered: previous.registered, granted: false, attempting: undefined as string | undefined }
    return Effect.gen(function* () {
      if (!yieldFirst && previous.attempted !== true) {
        // What was signalled before the attempt is answered by it (a grant counts the
        // contenders): left queued, an old `contended` would end the lease it grants.
        yield* local.drain
        const firstId = nextLockId()
        state.attempting = firstId
        // a failed attempt may have registered the worker all the same: deregister on leaving
        const first = yield* Effect.tapError(attemptWith(token, firstId, slices), () =>
          Effect.sync(() => {
            state.registered = true
          })
        )
        if (Option.isSome(first)) {
          // the grant removed the instance from the waiter set, had it been there
          state.registered = false
          state.granted = true
          return first
        }
        state.attempting = undefined
        state.registered = true
      }
      const lockId = nextLockId()
      const started = yield* Clock.currentTimeMillis
      // Subscribed (and confirmed) before the attempt that precedes each wait: a release
      // published after the attempt cannot be missed.
      const signals = yield* local.signals
      if (yieldFirst) {
        // Registered, the next holder sees this worker waiting and keeps its hold short.
        if (!state.registered) {
          yield* store.registerWaiter(token, instanceId)
          state.registered = true
        }
        // Free now: the others had their chance (or none is coming), so nothing to wait for.
        if (Option.isSome(yield* store.holder(token))) yield* waitFor(local, recheckMs, (wanted) => !wanted)
      }
      while (true) {
        // A waiter leaving during the attempt ends the wait that follows at once.
        const { wanted } = yield* local.look
        if (!wanted) return Option.none<Grant>()
        // Signals from before the attempt are answered by it.
        yield* Queue.takeAll(signals)
        // Each attempt re-registers: it refreshes this worker's deadline in the waiter set and tells a lease
        // that started since the last attempt that this instance waits.
        state.attempting = lockId
        const result = yield* store.tryAcquire(token, lockId, slices, { instanceId, register: true })
        if (result._tag === "Acquired") {
          // the grant removed the instance from the waiter set
          state.registered = false
          state.granted = true
          const grantedAt = yield* Clock.currentTimeMillis
          yield* Metric.update(lockWait, grantedAt - started)
          return Option.some(makeGrant(token, lockId, slices, result, grantedAt))
        }
        state.attempting = undefined
        state.registered = true
        yield* waitFor(local, Math.max(1, Math.min(result.remainingMs + 5, recheckMs)), (wanted) => !wanted)
      }
    }).pipe(
      // Leaving without a grant handed out (every waiter gone, interrupted, or a store
      // error): no lock of this attempt stays taken and the instance does not stay
      // registered. The lock's TTL and the registration's deadline cover a store that is away.
      Effect.onExit((exit) =>
        Effect.suspend(() => {
          const lockId = state.attempting
          const release =
            Exit.isFailure(exit) && lockId !== undefined ? Effect.ignore(store.release(token, lockId)) : Effect.void
          const deregister =
            state.registered && !state.granted ? Effect.ignore(store.deregisterWaiter(token, instanceId)) : Effect.void
          return Effect.zipRight(release, deregister)
        })
      )
    )
  }

  // on the path of every uncontended modification: as few steps as the grant needs
  const attemptWith = (token: string, lockId: string, slices: ReadonlyArray<string>) =>
    Effect.clockWith((clock) =>
      Effect.map(store.tryAcquire(token, lockId, slices, { instanceId, register: true }), (result) =>
        result._tag === "Acquired"
          ? Option.some(makeGrant(token, lockId, slices, result, clock.unsafeCurrentTimeMillis()))
          : Option.none()
      )
    )
  const attempt = (token: string, slices: ReadonlyArray<string>) => attemptWith(token, nextLockId(), slices)

  const linger = (token: string, local: LocalQueue) =>
    Effect.gen(function* () {
      yield* local.signals
      if (Option.isNone(yield* store.holder(token))) return false
      return (yield* waitFor(local, recheckMs, (wanted) => wanted)) === "local"
    })

  return Lock.of({ instanceId, acquire, attempt, linger })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Lock, never, Store | InstanceId | LeaseholdConfig> = Layer.effect(Lock, make)
