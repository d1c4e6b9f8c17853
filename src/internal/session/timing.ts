/**
 * The hold's time: the deadline that wakes its serving loop, the keep-alive that extends
 * its lock (and the lock's confirmed life, within which alone a lease is renewed), and the
 * renewal of a busy lease at its deadline.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import { LockLost } from "../../StoreError.js"
import * as Retry from "../retry.js"
import { preciseMillis, type TimerHeap } from "../timers.js"
import type { HoldState, KeepAlive } from "./holdState.js"
import { notify, type SessionEnv } from "./session.js"

/**
 * Wakes the serving loop once the clock reads the deadline (an entry of the worker's
 * timers, which run nothing before the clock reads their time); armed again when the
 * deadline moves earlier.
 *
 * @internal
 */
export const armTimer = (state: HoldState) =>
  Effect.flatMap(state.grant.env.timers.heap, (heap) =>
    Effect.sync(() => {
      const { grant, timing } = state
      timing.deadlineTimer?.()
      // Gone once it ran: a wake-up that finds the deadline not yet reached arms it again.
      timing.deadlineTimer = heap.after(Math.max(0, timing.deadline - preciseMillis(grant.clock)), () => {
        timing.deadlineTimer = undefined
        notify(grant.session)
      })
    })
  )

/**
 * Move the deadline to `at` unless it comes sooner (another worker waits: the hold has a
 * quantum left), at once; the effect arms its wake-up again.
 *
 * @internal
 */
export const cutDeadline = (state: HoldState, at: number): Effect.Effect<void> => {
  state.timing.deadline = Math.min(state.timing.deadline, at)
  return armTimer(state)
}

/**
 * The serving loop is no longer woken at the deadline (the hold parks, or ends).
 *
 * @internal
 */
export const disarmDeadline = (state: HoldState) => {
  state.timing.deadlineTimer?.()
  state.timing.deadlineTimer = undefined
}

/**
 * Start the hold's keep-alive, its first extension a third of `ttlMs` from now at the latest.
 *
 * @internal
 */
export const startKeepAlive = (state: HoldState, ttlMs: number): Effect.Effect<void> =>
  Effect.map(keepAlive(state, ttlMs), (keeper) => {
    state.timing.keeper = keeper
  })

/**
 * The keep-alive of a resumed hold, its next extension when the parked lease had it.
 *
 * @internal
 */
export const resumeKeepAlive = (state: HoldState, timers: TimerHeap, firstAt: number) => {
  state.timing.keeper = keepAliveOn(state, timers, firstAt)
}

/**
 * Stop the hold's keep-alive (an extension under way may still finish).
 *
 * @internal
 */
export const stopKeepAlive = (state: HoldState) => {
  state.timing.keeper?.stop()
  state.timing.keeper = undefined
}

/**
 * When a keep-alive extends next, given the outcome of an extension: `every` after one that
 * succeeded, `again` (sooner) after one that failed (the store away for a moment), and
 * never after the store said the lock is no longer ours: the schedule is done.
 */
const cadence = (every: number, again: number): Schedule.Schedule<undefined, Result.Result<boolean, unknown>> =>
  Schedule.fromStep(
    Effect.succeed((_now: number, extended: Result.Result<boolean, unknown>) =>
      Result.isSuccess(extended) && !extended.success
        ? Cause.done()
        : Effect.succeed<[undefined, Duration.Duration]>([
            undefined,
            Duration.millis(Result.isSuccess(extended) ? every : again)
          ])
    )
  )

/**
 * Keeps the lock from expiring under a slow modification: an extension every third of
 * the lock expiration, from the worker's timers, on the grid of `onGrid`. A lease's hold
 * time is shorter than the lock expiration, so an idle lease extends at most twice; one
 * renewed (`renew`) goes on, and every extension the store confirms moves the hold's
 * `confirmedUntil` (the extension's send time plus a lock expiration; a parked lease's
 * writes may carry its extensions instead: `ParkedLease.carried`), within which alone a
 * lease is renewed. An extension that fails (the store away for a moment) is tried again
 * sooner, until one succeeds; the store saying the lock is no longer ours (it expired, or
 * another worker took it after a failover lost it) ends the keep-alive and fails the hold
 * (`failed`): it serves nothing more, and writes nothing. An extension still under way
 * when it stops is harmless: it extends only a lock this grant holds, and lock ids are
 * unique.
 *
 * The delays are `cadence`'s, a `Schedule`; its waits are entries of the worker's timers,
 * not a fiber sleeping beside every held lease, and its driver is made at the first
 * extension, so a hold shorter than a third of the lock expiration costs none.
 *
 */
const keepAlive = (state: HoldState, ttlMs: number): Effect.Effect<KeepAlive> =>
  Effect.map(state.grant.env.timers.heap, (timers) =>
    keepAliveOn(state, timers, timers.now() + Math.max(1, Math.min(everyOf(state.grant.env), Math.floor(ttlMs / 3))))
  )

/**
 * How often a held lock is extended: a third of the lock expiration.
 *
 * @internal
 */
export const extensionPeriod = (env: SessionEnv) => Math.max(1, Math.floor(env.lockMs / 3))

const everyOf = extensionPeriod

/**
 * When an extension due at `due` is made: at the grid line of a tenth of the extension
 * period at or before it, if that is still to come. The extensions of the many leases a worker
 * holds then come due in the same turn of its timers and leave back to back, instead of
 * one round trip each at scattered times; made earlier, never later, than due.
 *
 * @internal
 */
export const onGrid = (every: number, now: number, due: number): number => {
  if (due === Number.POSITIVE_INFINITY) return due
  const grid = Math.max(1, Math.floor(every / 10))
  const aligned = Math.floor(due / grid) * grid
  // due sooner than the grid allows (a lock handed over extends within a third of the
  // hand-off timeout): when due
  return aligned <= now ? due : aligned
}

/** `firstAt`: when the first extension comes (the heap's time; never when infinite). */
const keepAliveOn = (state: HoldState, timers: TimerHeap, firstAt: number): KeepAlive => {
  const { grant, timing } = state
  const { env } = grant
  const every = everyOf(env)
  const again = Math.max(1, Math.floor(every / 4))
  let stopped = false
  let cancel: () => void = () => undefined
  // when the next extension comes; `undefined` while one is under way
  let nextAt: number | undefined = Number.POSITIVE_INFINITY
  let retry: Retry.Retry<Result.Result<boolean, unknown>, never> | undefined
  const extendOnce = Effect.gen(function* () {
    const sentAt = preciseMillis(grant.clock)
    // the slices read under this lock, and the fence, live as long as it is held
    const extended = yield* Effect.result(
      env.store.extend(grant.token, grant.lockId, state.cache.names(), { claim: timing.claim })
    )
    if (Result.isSuccess(extended)) {
      if (extended.success) {
        // extended: the lock lives a full lock expiration from the send, no longer the hand-off's
        timing.claim = undefined
        timing.confirmedUntil = Math.max(timing.confirmedUntil, sentAt + env.lockMs)
      } else if (!stopped && state.failed === undefined) lost(state)
    }
    retry ??= yield* Retry.driver(cadence(every, again))
    const delay = yield* retry.next(extended)
    nextAt = Number.POSITIVE_INFINITY
    if (!stopped && Option.isSome(delay)) schedule(timers.now() + Duration.toMillis(delay.value))
  }).pipe(
    Effect.onExit(() =>
      Effect.sync(() => {
        nextAt ??= Number.POSITIVE_INFINITY
      })
    )
  )
  const schedule = (due: number) => {
    const at = onGrid(every, timers.now(), due)
    nextAt = at
    cancel = timers.at(at, () => {
      if (stopped) return undefined
      nextAt = undefined
      return extendOnce
    })
  }
  if (firstAt !== Number.POSITIVE_INFINITY) schedule(firstAt)
  return {
    stop: () => {
      stopped = true
      cancel()
    },
    next: () => nextAt
  }
}

/** The store said the lock is no longer ours: the hold fails, and its serving loop is woken to end. */
const lost = (state: HoldState) => {
  state.failed = new LockLost({ token: state.grant.token, lockId: state.grant.lockId, holder: Option.none() })
  notify(state.grant.session)
}

/**
 * `effect` with a keep-alive for as long as it runs.
 *
 * @internal
 */
export const withKeepAlive = <A>(state: HoldState, ttlMs: number, effect: Effect.Effect<A>) =>
  Effect.acquireUseRelease(
    keepAlive(state, ttlMs),
    () => effect,
    (keeper) => Effect.sync(keeper.stop)
  )

/**
 * At its deadline, a lease that nobody contends and that served a modification in the last
 * half of its hold time is held for another `leaseHoldTime` instead of released: its
 * keep-alive goes on extending the lock. A release there would cost the token a write and a
 * hand-off, and its next modification a grant and a look for contenders, for nothing. A
 * lease that served nothing lately ends at its deadline as before: the worker keeps the
 * tokens in use, not every token it once served.
 *
 * The invariant of a lease: it serves only before its deadline, and its deadline is within
 * its lock's life. The first is the grant's plus `leaseHoldTime`, less than
 * `lockExpiration` (a lock handed over that lapsed before its first extension is taken back
 * by its claim, or its writes fail). A renewed one is never past the lock's confirmed life
 * less a margin (`confirmedUntil - marginOf`): a renewal is made only while the lock is
 * known to be ours (no claim of a lock handed over pending, the grant or an extension the
 * store confirmed recent enough), and its new deadline is cut at that bound, or it is not
 * made. A lock lost without a notice (a failover that dropped it, a stall past its
 * expiration) or extensions that fail (the store away) end a lease by then; the keep-alive's
 * next extension, answered "not ours", ends it sooner.
 *
 * And only when no other worker is queued for the token, as the store says (one look per
 * hold time of a busy lease: carried by its first write in the last half of its hold time,
 * `lookDue` and `seenClear`, or else a request of its own): contention is told by notices,
 * and a holder whose subscription is broken unseen would otherwise keep the lock for ever
 * from a waiter whose every attempt it misses.
 *
 * @internal
 */
export const renew = (state: HoldState, now: number): Effect.Effect<boolean> => {
  const { grant, timing } = state
  const { env } = grant
  if (state.contention.contended || state.failed !== undefined) return Effect.succeed(false)
  if (!mayRenew(env, timing.claim, state.turns.servedAt, timing.confirmedUntil, now)) return Effect.succeed(false)
  if (seenClear(env, timing.clearSince, timing.deadline, now)) {
    const until = renewedUntil(env, timing.confirmedUntil, now)
    if (until !== undefined) timing.deadline = until
    return Effect.succeed(until !== undefined)
  }
  return Effect.map(queuedElsewhere(env, grant.token), (queued) => {
    const until = renewedUntil(env, timing.confirmedUntil, preciseMillis(grant.clock))
    if (queued || state.failed !== undefined || until === undefined) return false
    timing.deadline = until
    return true
  })
}

/**
 * Whether a lease uncontended here may be renewed at `now` (`renew`; a parked lease's record
 * asks the same): no claim of a lock handed over pending, a modification served in the last
 * half of its hold time, and its lock's confirmed life not within the margin.
 *
 * @internal
 */
export const mayRenew = (
  env: SessionEnv,
  claim: number | undefined,
  servedAt: number,
  confirmedUntil: number,
  now: number
): boolean => claim === undefined && now - servedAt <= env.holdMs / 2 && confirmedUntil - marginOf(env) > now

/**
 * What a lease knows of its lock: a claim of a lock handed over pending, until when the lock
 * is known to be its own, and when its queue was last seen clear (`HoldTiming`; a parked
 * lease's record keeps the same).
 *
 * @internal
 */
export interface LockKnowledge {
  claim: number | undefined
  confirmedUntil: number
  clearSince: number
}

/**
 * A write under the lock, sent at `sentAt`, that the store confirmed (`Store.writeIfHolder`):
 * one that `extended` the lock leaves it a full lock expiration from the send (and a claim
 * no longer pending); one that counted the workers queued (`queued`, `undefined` when it
 * did not) looked at the queue as a renewal would.
 *
 * @internal
 */
export const confirmedByWrite = (
  env: SessionEnv,
  known: LockKnowledge,
  sentAt: number,
  extended: boolean,
  queued: number | undefined
): void => {
  if (extended) {
    known.claim = undefined
    known.confirmedUntil = Math.max(known.confirmedUntil, sentAt + env.lockMs)
  }
  if (queued !== undefined) {
    known.clearSince = queued > 0 ? Number.NEGATIVE_INFINITY : Math.max(known.clearSince, sentAt)
  }
}

/**
 * Whether a write at `now` should count the workers queued for the renewal at `deadline`
 * (`seenClear`): the first write in the last half hold time before it. One look per hold
 * time of a lease in use, carried by a write instead of a request of its own.
 *
 * @internal
 */
export const lookDue = (env: SessionEnv, deadline: number, clearSince: number, now: number): boolean =>
  now >= deadline - env.holdMs / 2 && clearSince < deadline - env.holdMs / 2

/**
 * Whether the renewal of the lease at `deadline`, made at `now`, may rely on the last
 * write's look at the queue (`clearSince`) instead of a look of its own: it saw nobody queued
 * in the last half hold time before the deadline (the window of `lookDue`, in which the lease
 * must have served to be renewed at all), and no more than a hold time ago (a renewal made
 * late, after a stall, asks). A worker that queued since, unseen for a broken subscription,
 * is seen by the next window's look: the lease ends within two hold times of its queueing.
 *
 * @internal
 */
export const seenClear = (env: SessionEnv, clearSince: number, deadline: number, now: number): boolean =>
  clearSince >= deadline - env.holdMs / 2 && now - clearSince <= env.holdMs

/**
 * Whether another worker is queued for the token, as the store says (a failed look counts
 * as queued: the lease is not renewed on it).
 *
 * @internal
 */
export const queuedElsewhere = (env: SessionEnv, token: string): Effect.Effect<boolean> =>
  Effect.map(
    Effect.orElseSucceed(env.store.queueLength(token, env.instanceId), () => 1),
    (queued) => queued > 0
  )

/**
 * The deadline of a lease renewed at `at`: a hold time on, cut at its lock's confirmed life
 * less the margin; `undefined` when nothing is left of it.
 *
 * @internal
 */
export const renewedUntil = (env: SessionEnv, confirmedUntil: number, at: number): number | undefined => {
  const until = Math.min(at + env.holdMs, confirmedUntil - marginOf(env))
  return until <= at ? undefined : until
}

/**
 * What a renewed lease keeps clear of its lock's confirmed life: the round trip of the
 * reply that confirmed it (the grant's is counted from its reply), a modification under way
 * at the deadline, the final write and release, and the clocks' drift.
 */
const marginOf = (env: SessionEnv) => Math.max(1, Math.floor(env.lockMs / 10))
