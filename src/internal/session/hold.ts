/**
 * Holding a grant: the hold begun (or resumed from a parked lease), its serving loop, which
 * serves the session's turns (one, a quantum's worth, or a lease's) until the hold ends or
 * parks, and its end: the modification in progress finished, the last write and the release.
 * Contention, the hold's time, the group commit and parking live in their own modules.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { InvalidInput, StoreError } from "../../StoreError.js"
import type { Request } from "../lease.js"
import type { Grant, Previous } from "../lock/service.js"
import { OneShot } from "../oneShot.js"
import { fineMillis } from "../timers.js"
import { commitAndRelease, failAcks, noTurn, warnHeld } from "./commit.js"
import { checkSignals, watchContention } from "./contention.js"
import type { HoldState } from "./holdState.js"
import { type ParkedLease, type Parking, parking, unparkedSlices } from "./parking.js"
import { leaseHold, policyOf } from "./policy.js"
import { nextRequest, relay, unwritten } from "./relay.js"
import type { Session, SessionEnv } from "./session.js"
import { keepAlive, keepAliveOn, withKeepAlive } from "./timing.js"

/**
 * A modification its caller ran under the grant in its own fiber (`Lease.complete`), left
 * to the hold to write with the ones queued behind it: its writes, and its request to
 * acknowledge once they are written.
 *
 * @internal
 */
export interface Carried {
  readonly writes: ReadonlyArray<readonly [name: string, value: string]>
  readonly request: Request
}

/**
 * Hold a grant: serve turns (one, a quantum's worth, or a lease's), then commit and release.
 *
 * @internal
 */
export const hold = (
  env: SessionEnv,
  session: Session,
  grant: Grant,
  carried?: Carried
): Effect.Effect<Previous | Parking> =>
  Effect.gen(function* () {
    const { token, lockId } = grant
    const policy = policyOf(env, grant)
    const cache = new Map(grant.values)
    for (const [name, value] of carried?.writes ?? []) cache.set(name, Option.some(value))
    const state: HoldState = {
      env,
      session,
      fence: grant.fence,
      claim: grant.handedOver === true ? grant.fence : undefined,
      token,
      lockId,
      policy,
      cache,
      dirty: new Map<string, string>(carried?.writes ?? []),
      unacked: carried === undefined ? [] : [carried.request],
      inProgress: undefined,
      served: carried === undefined ? 0 : 1,
      servedAt: Number.NEGATIVE_INFINITY,
      // a lock handed over lives the hand-off timeout from its release, before the grant:
      // nothing is known of it until its first extension (till then `claim` bars a renewal)
      confirmedUntil: grant.handedOver === true ? grant.grantedAt : grant.grantedAt + env.lockMs,
      deadline: policy.deadlineOf(env, grant),
      writeMs: 0,
      contended: policy.contendedAtGrant(grant),
      failed: undefined,
      timer: undefined,
      watching: session.signals !== undefined,
      keeper: undefined,
      clock: yield* Clock.Clock,
      ioAt: grant.grantedAt,
      turnAt: 0,
      relayEnd: undefined,
      longHolds: [],
      parkDue: false,
      parkTimer: undefined,
      idleSince: undefined
    }
    // a lock handed over lives for the hand-off timeout until extended, whatever the hold
    state.keeper =
      policy.keepsAlive || grant.handedOver === true
        ? yield* keepAlive(state, grant.handedOver === true ? env.handoffMs : env.lockMs)
        : undefined

    return yield* serveThenFinish(state, false)
  })
/**
 * Serve, then finish (unless the serving parked). The session's fiber is uninterruptible
 * (see `start`): only the serving is interrupted.
 */
const serveThenFinish = (state: HoldState, resumed: boolean): Effect.Effect<Previous | Parking> =>
  Effect.flatMap(
    Effect.exit(Effect.interruptible(serve(state, resumed))),
    (served): Effect.Effect<Previous | Parking> =>
      Exit.isSuccess(served) && served.value === parking ? Effect.succeed(parking) : finish(state)
  )

/**
 * Go on with a parked hold, in the fiber that resumed it: the hold is built again from what
 * the lease kept (its keep-alive extends when it was to, not a third of the lock
 * expiration from now).
 *
 * @internal
 */
export const resumeHold = (parked: ParkedLease): Effect.Effect<Previous | Parking> =>
  Effect.suspend(() => {
    const { env, session } = parked
    const { cache, dirty } = unparkedSlices(parked)
    const now = fineMillis(parked.clock)
    const state: HoldState = {
      env,
      session,
      fence: parked.fence,
      claim: parked.claim,
      token: session.token,
      lockId: parked.lockId,
      policy: leaseHold,
      cache,
      dirty,
      unacked: [],
      inProgress: undefined,
      served: parked.served,
      servedAt: parked.servedAt,
      confirmedUntil: parked.confirmedUntil,
      deadline: parked.deadline,
      writeMs: parked.writeMs,
      contended: false,
      failed: undefined,
      timer: undefined,
      watching: session.signals !== undefined,
      keeper: undefined,
      clock: parked.clock,
      // parked, the worker's event loop ran freely: what arrived meanwhile has been read
      ioAt: now,
      turnAt: 0,
      relayEnd: undefined,
      longHolds: [],
      parkDue: false,
      parkTimer: undefined,
      idleSince: undefined
    }
    state.keeper = keepAliveOn(state, parked.wheel, parked.extendAt)
    session.lease = state
    return serveThenFinish(state, true)
  })

/** Serve `request` and, through the relay, the requests queued behind it that memory can serve. */
const serveFrom = (state: HoldState, request: Request): Effect.Effect<void, InvalidInput | StoreError> =>
  // Steps chained by hand, not `Effect.gen`: every leased modification makes one.
  Effect.suspend(() => {
    const { env, token, cache } = state
    const missing = request.slices.filter((name) => !cache.has(name))
    const served = Effect.suspend(() => {
      const end = new OneShot<void>()
      state.relayEnd = end
      const relayed = relay(state, request, fineMillis(state.clock))
      return relayed
        ? Effect.andThen(
            end.await,
            Effect.suspend(() => afterRelay(state))
          )
        : afterRelay(state)
    })
    if (missing.length === 0) return served
    // Fetched under the lock this worker holds: as current as the grant's reads.
    return Effect.andThen(
      Effect.map(env.store.readSlices(token, missing), (values) => {
        for (const [i, name] of missing.entries()) cache.set(name, values[i] ?? Option.none())
      }),
      served
    )
  })

/** The relay has ended: the warnings of the modifications that held the lock too long in it. */
const afterRelay = (state: HoldState): Effect.Effect<void> => {
  state.relayEnd = undefined
  const longHolds = state.longHolds
  if (longHolds.length === 0) return Effect.void
  state.longHolds = []
  return Effect.forEach(longHolds, ([held, heldMs]) => warnHeld(state.env, state.token, held.event, heldMs), {
    discard: true
  })
}

/**
 * The serving loop: the hold's turns, until its deadline (or its one turn), its lock lost,
 * or nothing left to serve; `parking` when an idle lease parked. Its policy says what a
 * busy loop does, whether the hold goes on at its deadline, and what it does once idle.
 */
const serve = (state: HoldState, resumed: boolean) =>
  Effect.gen(function* () {
    const { env, session, policy } = state
    const lookForContenders = checkSignals(state)
    yield* policy.begins(state, resumed)
    // parked, the worker's event loop ran freely: what arrived meanwhile has been read
    if (resumed) state.ioAt = fineMillis(state.clock)
    // whether the queue was found empty and one turn of the event loop given for callers to queue again
    let lingered = false
    while (state.failed === undefined) {
      if (policy.servesOneTurn && state.served > 0) return
      // Looked for before every modification: a busy local queue never waits for a signal.
      if (policy.watchesNotices) yield* lookForContenders
      // Taken before the queue is read: an arrival after the read completes it.
      const changed = session.changed
      const now = fineMillis(state.clock)
      // Served from memory alone, a busy local loop runs on microtasks and the event
      // loop never turns: the socket that brings a contender's signal is not read, and
      // timers do not fire. A turn of the event loop at least every quantum bounds that.
      if (!policy.servesOneTurn && now - state.ioAt >= env.yieldMs) {
        yield* policy.whenBusy(state)
        state.ioAt = fineMillis(state.clock)
        continue
      }
      // Past the deadline nothing more is served, however full the queue: a busy
      // local loop must not keep a remote waiter out. `finish` writes in one step.
      if (state.served > 0 && now >= state.deadline && !(yield* policy.atDeadline(state, now))) return
      const request = nextRequest(state)
      if (request !== undefined && policy.watchesNotices && !state.watching && state.served > 0) {
        yield* watchContention(state)
        continue
      }
      if (request !== undefined) {
        lingered = false
        yield* serveFrom(state, request)
        continue
      }
      if (now >= state.deadline && !(yield* policy.atDeadline(state, now))) return
      const idle = yield* policy.whenIdle(state, now, changed, lingered)
      if (idle === "ended") return
      if (idle === "parked") return parking
      if (idle === "lingered") lingered = true
    }
  })

/** Whatever ended the hold: finish the modification in progress, write, release. */
export const finish = (state: HoldState) =>
  Effect.gen(function* () {
    const { env, session, token, lockId, dirty } = state
    session.lease = undefined
    state.policy.ends(state)
    // the relay ends here: the turn in progress, if any, is taken over below
    state.relayEnd = undefined
    state.timer?.()
    state.timer = undefined
    // an interrupted wait did not cancel it (the serving loop does after a wait it finishes)
    state.parkTimer?.()
    state.parkTimer = undefined
    if (state.inProgress !== undefined) {
      const inProgress = state.inProgress
      const outcome = yield* state.keeper === undefined
        ? withKeepAlive(state, env.lockMs, inProgress.done.await)
        : inProgress.done.await
      if (outcome._tag === "Commit") {
        for (const [name, value] of outcome.writes) dirty.set(name, value)
        state.unacked.push(inProgress)
      } else unwritten(state, inProgress)
      state.inProgress = undefined
    }
    state.keeper?.stop()
    if (state.failed !== undefined) {
      // The lock is lost or the store is away: nothing more is written; release what may remain.
      failAcks(env, state.unacked, lockId, state.failed)
      yield* Effect.ignore(env.store.releaseQueued(token, lockId, { instanceId: env.instanceId }))
      return noTurn
    }
    return yield* commitAndRelease(
      env,
      session,
      lockId,
      [...dirty.entries()],
      state.unacked,
      [...state.cache.keys()],
      state.claim
    )
  })
