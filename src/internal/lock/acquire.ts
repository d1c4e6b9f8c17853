/**
 * Taking a token's lock for `Lock` (docs/protocol.md#the-queue-hand-off): the uncontended attempt,
 * which queues the worker in the store when it cannot take the lock; the wait for the lock to be
 * handed to it (a `Granted` notice, a resubscription, the local queue, or a re-check interval); and
 * the attempts between waits, which refresh the worker's place in the queue and claim a grant
 * pending for it. A notice of a grant that installed the lock id of the last attempt, carrying
 * every slice asked for, is the grant itself: no claim follows it. An exit without a grant leaves
 * no lock taken and no queue entry or pending grant behind.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import type { HandedOver, QueuedAcquireResult, Store } from "../../Store.js"
import type { AcknowledgedError, InvalidInput } from "../../StoreError.js"
import { forkInUninterruptible } from "../fork.js"
import type { SignalEvent } from "../signals.js"
import { currentPreciseMillis, preciseMillis, type Timers } from "../timers.js"
import type { Grant, LocalQueue, QueuePlace, Refused } from "./service.js"

/**
 * What a worker's lock works with, built once by `Lock.make`.
 *
 * @internal
 */
export interface LockContext {
  readonly store: Store.Service
  readonly instanceId: string
  /**
   * The longest a waiter waits between attempts (at least 1 ms): a tenth of the lock
   * expiration, and at most half the hand-off timeout, so that a waiter whose `Granted`
   * notice was lost claims its grant before the grant expires.
   */
  readonly recheckMs: number
  /** `handoffTimeout`, in ms. */
  readonly handoffMs: number
  /** A lock id unique to this worker's acquisition. */
  readonly nextLockId: () => string
  /** The worker's timers, for the re-check interval of a wait. */
  readonly timers: Timers
  /** The service's scope: work left to the background (a release after a failed attempt) runs in it. */
  readonly scope: Scope.Scope
  /** `Lock.lockWait`. */
  readonly lockWait: Metric.Histogram<number>
}

const makeGrant = (
  token: string,
  lockId: string,
  slices: ReadonlyArray<string>,
  result: Extract<QueuedAcquireResult, { readonly _tag: "Acquired" }>,
  grantedAt: number
): Grant => ({
  token,
  lockId,
  fence: result.fence,
  values: new Map(slices.map((name, i) => [name, result.values[i] ?? Option.none()])),
  contenders: result.queued,
  grantedAt
})

/**
 * How a wait ended: a `Granted` notice (with its grant's fence, if it named one, and what a
 * grant that installed the worker's lock id carries), a re-check, or the local queue.
 */
type Woken =
  | {
      readonly _tag: "granted"
      readonly fence: number | undefined
      readonly handedOver: HandedOver | undefined
      /** A `Contended` came after the notice. */
      readonly contended: boolean
    }
  | { readonly _tag: "recheck" }
  | { readonly _tag: "local" }

const recheck: Woken = { _tag: "recheck" }
const localChange: Woken = { _tag: "local" }

/**
 * Wait for the lock to be handed over (`"granted"`, with the fence of the newest grant
 * notified), for a resubscription (`"recheck"`: a notice may have been lost), for the local
 * queue to say so (`stop(wanted)`: `"local"`), or for `timeoutMs` (`"recheck"`). Every
 * source completes the one `changed` of the local queue (the timeout by an entry of the
 * worker's timers), so a wait costs an entry in a heap, not a fiber.
 *
 * The re-check is a deadline, not a retry back-off: every wait of every contended
 * modification sets one, from the store's answer (`remainingMs`), on the lock's hot path.
 * A `Schedule` there would add a driver and an effect to step it to each wait, and a
 * sleeping fiber unless its delay were handed back to the timers; it would decide nothing a
 * `min` does not, so the timer stays.
 */
const waitFor = (timers: Timers, local: LocalQueue, timeoutMs: number, stop: (wanted: boolean) => boolean) => {
  let timedOut = false
  return Effect.acquireUseRelease(
    Effect.flatMap(timers.heap, (heap) =>
      Effect.sync(() =>
        heap.after(timeoutMs, () => {
          timedOut = true
          local.wake()
        })
      )
    ),
    () =>
      Effect.gen(function* () {
        const signals = yield* local.signals
        while (true) {
          // Looked at before the checks: a change after them completes it.
          const { changed, wanted } = yield* local.look
          if (stop(wanted)) return localChange
          const events = signals.take()
          // the newest grant: an older one's notice names a fence that has moved on; a
          // worker that queued behind it since told it so (its notice counted those before)
          let grant: Extract<SignalEvent, { readonly _tag: "Granted" }> | undefined
          let contended = false
          for (const event of events) {
            if (event._tag === "Granted") {
              grant = event
              contended = false
            } else if (event._tag === "Contended") contended = true
          }
          if (grant !== undefined) {
            return { _tag: "granted", fence: grant.fence, handedOver: grant.handedOver, contended } satisfies Woken
          }
          if (events.some((event) => event._tag === "Resubscribed")) return recheck
          if (timedOut) return recheck
          yield* changed
        }
      }),
    (cancel) => Effect.sync(cancel)
  )
}

/**
 * The grant a `Granted` notice hands over, when it installed the lock id the worker is queued
 * under (`queuedAs`) and carries every slice asked for; otherwise the notice is claimed.
 */
const handedGrant = (
  token: string,
  slices: ReadonlyArray<string>,
  queuedAs: string | undefined,
  woken: Extract<Woken, { readonly _tag: "granted" }>,
  now: number
): Grant | undefined => {
  const over = woken.handedOver
  if (over === undefined || woken.fence === undefined || queuedAs === undefined || over.lockId !== queuedAs) return
  const values = new Map<string, Option.Option<string>>()
  for (const name of slices) {
    const value = over.values.get(name)
    if (value === undefined) return
    values.set(name, value)
  }
  return {
    token,
    lockId: over.lockId,
    fence: woken.fence,
    values,
    contenders: woken.contended ? Math.max(1, over.queued) : over.queued,
    grantedAt: now,
    handedOver: true
  }
}

/**
 * One acquisition under way: what it asks for, and where the worker stands in the store.
 * `attempting`: the lock id of the last attempt, until it is known refused. An exit other
 * than success with it set (an interruption between the grant and the return, or an
 * attempt whose reply was lost) releases it: lock ids are unique, so releasing one this
 * worker was not granted deletes nothing. `queuedAs`: the lock id the worker is queued
 * under (the last attempt's): a grant installs it, and leaving names it, so that a leave
 * never takes a newer attempt's place or grant.
 */
interface Acquisition {
  readonly env: LockContext
  readonly token: string
  readonly slices: ReadonlyArray<string>
  readonly local: LocalQueue
  queued: boolean
  granted: boolean
  attempting: string | undefined
  queuedAs: string | undefined
}

/**
 * One attempt under a new lock id: the grant, or the time left to the lock (the worker
 * queued). `claim`: the fence a `Granted` notice named. The store honours it only while no
 * claim came since that grant: a notice that arrives late (its grant claimed by a re-check,
 * or used and released) makes an ordinary attempt, never one ahead of the queue's head.
 */
const attemptOnce = (a: Acquisition, claim: number | undefined) =>
  Effect.gen(function* () {
    const { instanceId, nextLockId, store } = a.env
    const lockId = nextLockId()
    a.attempting = lockId
    // a failed attempt may have queued the worker all the same: it leaves on exit
    a.queued = true
    a.queuedAs = lockId
    const result = yield* store.acquireQueued(
      a.token,
      lockId,
      a.slices,
      claim === undefined ? { instanceId } : { instanceId, claim }
    )
    if (result._tag === "Queued") {
      a.attempting = undefined
      return Result.fail(result.remainingMs)
    }
    a.queued = false
    a.granted = true
    return Result.succeed(makeGrant(a.token, lockId, a.slices, result, yield* currentPreciseMillis))
  })

/**
 * How a wait between attempts ended: the grant a notice handed over, the next attempt (with
 * the fence it claims, if any), or the local queue (look again whether anyone still wants it).
 */
type Waited =
  | { readonly _tag: "handed"; readonly grant: Grant }
  | { readonly _tag: "attempt"; readonly claim: number | undefined }
  | { readonly _tag: "local" }

/** Wait for a hand-over, at most until the lock's time left (and a little) or the re-check interval. */
const awaitHandOver = (a: Acquisition, remainingMs: number) =>
  Effect.gen(function* () {
    const woken = yield* waitFor(
      a.env.timers,
      a.local,
      Math.max(1, Math.min(remainingMs + 5, a.env.recheckMs)),
      (wanted) => !wanted
    )
    if (woken._tag === "local") return { _tag: "local" } satisfies Waited
    if (woken._tag === "granted") {
      const handed = handedGrant(a.token, a.slices, a.queuedAs, woken, yield* currentPreciseMillis)
      if (handed !== undefined) {
        a.queued = false
        a.granted = true
        return { _tag: "handed", grant: handed } satisfies Waited
      }
    }
    // a grant handed to another of this worker's entries (an earlier wait's) is not this one's to claim
    const claim =
      woken._tag === "granted" && (woken.handedOver === undefined || woken.handedOver.lockId === a.queuedAs)
        ? woken.fence
        : undefined
    return { _tag: "attempt", claim } satisfies Waited
  })

/**
 * Leaving without a grant handed out (every waiter gone, interrupted, or a store error): no
 * lock of this attempt stays taken, and the worker leaves the queue (a grant pending for it
 * passes on). The lock's TTL and the entry's deadline cover a store that is away.
 */
const leaveOnExit = (a: Acquisition, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> =>
  Effect.suspend(() => {
    const { instanceId, store } = a.env
    const lockId = a.attempting
    const release =
      Exit.isFailure(exit) && lockId !== undefined
        ? Effect.ignore(store.releaseQueued(a.token, lockId, { instanceId }))
        : Effect.void
    const leave =
      a.queued && !a.granted ? Effect.ignore(store.leaveQueue(a.token, instanceId, a.queuedAs)) : Effect.void
    return Effect.andThen(release, leave)
  })

/**
 * The attempts and the waits between them, until a grant or until no waiter wants the lock.
 * `remainingMs`: the lock's time left, as the last attempt saw it. `listening`: whether
 * the worker listened to the token's signals before that attempt.
 */
const attemptAndWait = (
  a: Acquisition,
  previous: QueuePlace,
  started: number,
  listening: boolean,
  remainingMs: number
) =>
  Effect.gen(function* () {
    const { local } = a
    // Listening before it waits: a subscription made after the attempt that queued the
    // worker may have missed the notice of a grant, so a first re-check follows it.
    let checkFirst = !listening
    while (true) {
      // A waiter leaving during the attempt ends the wait that follows at once.
      const { wanted } = yield* local.look
      if (!wanted) return Option.none<Grant>()
      yield* local.signals
      // Listening only now, after the attempt that queued the worker: a notice of a grant
      // sent before may have been missed, unless the channel says none was.
      if (checkFirst && previous.attempted === true && !local.missedSince(previous.mark)) checkFirst = false
      let claim: number | undefined
      if (!checkFirst) {
        const waited = yield* awaitHandOver(a, remainingMs)
        if (waited._tag === "local") continue
        if (waited._tag === "handed") {
          yield* Metric.update(a.env.lockWait, waited.grant.grantedAt - started)
          return Option.some(waited.grant)
        }
        claim = waited.claim
      }
      checkFirst = false
      const next = yield* attemptOnce(a, claim)
      if (Result.isSuccess(next)) {
        yield* Metric.update(a.env.lockWait, next.success.grantedAt - started)
        return Option.some(next.success)
      }
      remainingMs = next.failure
    }
  })

/**
 * `Lock.acquire`.
 *
 * @internal
 */
export const acquire = (
  env: LockContext,
  token: string,
  slices: ReadonlyArray<string>,
  local: LocalQueue,
  previous: QueuePlace
) => {
  const a: Acquisition = {
    env,
    token,
    slices,
    local,
    queued: previous.queued,
    granted: false,
    attempting: undefined,
    queuedAs: previous.attempted === true ? previous.lockId : undefined
  }
  return Effect.gen(function* () {
    const started = yield* currentPreciseMillis
    const listening = yield* local.listening
    if (previous.attempted === true) {
      return yield* attemptAndWait(a, previous, started, listening, previous.remainingMs ?? 0)
    }
    // What was signalled before the attempt is answered by it.
    yield* local.drain
    const first = yield* attemptOnce(a, undefined)
    if (Result.isSuccess(first)) return Option.some(first.success)
    return yield* attemptAndWait(a, previous, started, listening, first.failure)
  }).pipe(Effect.onExit((exit) => leaveOnExit(a, exit)))
}

/**
 * One attempt with `lockId`: `Lock.attempt`. On the path of every uncontended
 * modification: as few steps as the grant needs. Refused, it has queued the worker.
 *
 * @internal
 */
export const attemptWith = (
  env: LockContext,
  token: string,
  lockId: string,
  slices: ReadonlyArray<string>
): Effect.Effect<Result.Result<Grant, Refused>, InvalidInput | AcknowledgedError> =>
  Effect.clockWith((clock) =>
    Effect.matchCauseEffect(env.store.acquireQueued(token, lockId, slices, { instanceId: env.instanceId }), {
      onSuccess: (result) =>
        Effect.succeed(
          result._tag === "Acquired"
            ? Result.succeed(makeGrant(token, lockId, slices, result, preciseMillis(clock)))
            : Result.fail({ remainingMs: result.remainingMs, lockId })
        ),
      // A failed attempt may have taken the lock all the same (its reply lost), or queued
      // the worker under its lock id: nobody has that id, so it is released (a release of a
      // lock id not held deletes nothing) and its entry leaves (only an entry queued under
      // it), in the background: the caller's failure does not wait another command timeout
      // for it. (The attempt runs uninterruptibly: `Lock.attempt` makes it so, and
      // `attemptMasked`'s caller, the session's `begin`, runs so; an interruption could skip a
      // handler of an interruptible step.)
      onFailure: (cause) =>
        Effect.andThen(
          forkInUninterruptible(
            Effect.andThen(
              Effect.ignore(env.store.releaseQueued(token, lockId, { instanceId: env.instanceId })),
              Effect.ignore(env.store.leaveQueue(token, env.instanceId, lockId))
            ),
            env.scope
          ),
          Effect.failCause(cause)
        )
    })
  )
