/**
 * Taking a token's lock for `Lock`: the uncontended attempt, the waits for a chance (a
 * release by another holder, a resubscription, the local queue, or a re-check interval),
 * and the attempts between them, leaving no lock taken and no registration behind on an
 * exit without a grant.
 *
 * @internal
 */
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import type { Grant, LocalQueue, Previous } from "../../Lock.js"
import type { SignalEvent } from "../../Signals.js"
import type { AcquireResult, Store } from "../../Store.js"

/**
 * What a worker's lock works with, built once by `Lock.make`.
 *
 * @internal
 */
export interface Env {
  readonly store: Store.Service
  readonly instanceId: string
  /** A tenth of the lock expiration (at least 1 ms): the longest a waiter waits between attempts. */
  readonly recheckMs: number
  /** A lock id unique to this worker's acquisition. */
  readonly nextLockId: () => string
  /** `Lock.lockWait`. */
  readonly lockWait: Metric.Metric.Histogram<number>
}

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
const isOwn = (env: Env, event: SignalEvent) =>
  event._tag === "Released" && event.lockId !== undefined && event.lockId.startsWith(`${env.instanceId}:`)

/** A release by another holder, or a resubscription (one may have been missed). */
const isChance = (env: Env, event: SignalEvent) =>
  (event._tag === "Released" && !isOwn(env, event)) || event._tag === "Resubscribed"

/**
 * Wait for a chance (`"released"`), for the local queue to say so (`stop(wanted)`:
 * `"local"`), or for `timeoutMs` (`"timeout"`). Waiters wait often and signals are many:
 * every source completes the one `changed` of the local queue (a timer fiber by `poke`),
 * so a wait costs one fiber, not a race of several for each signal.
 *
 * @internal
 */
export const waitFor = (env: Env, local: LocalQueue, timeoutMs: number, stop: (wanted: boolean) => boolean) => {
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
          if (Chunk.some(yield* Queue.takeAll(signals), (event) => isChance(env, event))) return "released" as const
          if (timedOut) return "timeout" as const
          yield* changed
        }
      }),
    (timer) => Fiber.interruptFork(timer)
  )
}

/**
 * `Lock.acquire`.
 *
 * @internal
 */
export const acquire = (
  env: Env,
  token: string,
  slices: ReadonlyArray<string>,
  local: LocalQueue,
  previous: Previous
) => {
  const { store, instanceId, recheckMs, nextLockId, lockWait } = env
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
      const first = yield* Effect.tapError(attemptWith(env, token, firstId, slices), () =>
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
      if (Option.isSome(yield* store.holder(token))) yield* waitFor(env, local, recheckMs, (wanted) => !wanted)
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
      yield* waitFor(env, local, Math.max(1, Math.min(result.remainingMs + 5, recheckMs)), (wanted) => !wanted)
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

/**
 * One attempt with `lockId`: `Lock.attempt`, and the first step of `acquire`.
 * On the path of every uncontended modification: as few steps as the grant needs.
 *
 * @internal
 */
export const attemptWith = (env: Env, token: string, lockId: string, slices: ReadonlyArray<string>) =>
  Effect.clockWith((clock) =>
    Effect.map(env.store.tryAcquire(token, lockId, slices, { instanceId: env.instanceId, register: true }), (result) =>
      result._tag === "Acquired"
        ? Option.some(makeGrant(token, lockId, slices, result, clock.unsafeCurrentTimeMillis()))
        : Option.none()
    )
  )
