/**
 * Holding a grant: the hold begun (or resumed from a parked lease), its serving loop, which
 * serves the session's turns (one, a quantum's worth, or a lease's) until the hold ends or
 * parks, and its end: the modification in progress finished, the last write and the release.
 * What differs between the ways a grant is held is asked of the hold's policy (`policy.ts`);
 * contention, the hold's time, the relay, the group commit, the idle step and parking live
 * in their own modules.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { InvalidInput, StoreError } from "../../StoreError.js"
import type { Grant, QueuePlace } from "../lock/service.js"
import { preciseMillis } from "../timers.js"
import { HoldCache } from "./cache.js"
import { commitAndRelease, failAcks, noTurn } from "./commit.js"
import { checkSignals, watchContention } from "./contention.js"
import type { HeldGrant, HoldState } from "./holdState.js"
import { disarmPark, type ParkedLease, type Parking, parking } from "./parking.js"
import { leaseHold, policyOf } from "./policy.js"
import { nextRequest, relayFrom, takeOverTurn, waitedForIo } from "./relay.js"
import type { Request, Session, SessionEnv } from "./session.js"
import { disarmDeadline, resumeKeepAlive, startKeepAlive, stopKeepAlive, withKeepAlive } from "./timing.js"

/**
 * A modification its caller ran under the grant in its own fiber (`caller.complete`), left
 * to the hold to write with the ones queued behind it: its writes, and its request to
 * acknowledge once they are written.
 *
 * @internal
 */
export interface DecidedByCaller {
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
  carried?: DecidedByCaller
): Effect.Effect<QueuePlace | Parking> =>
  Effect.gen(function* () {
    const policy = policyOf(env, grant)
    const handedOver = grant.handedOver === true
    const held: HeldGrant = {
      env,
      session,
      token: grant.token,
      lockId: grant.lockId,
      fence: grant.fence,
      clock: yield* Clock.Clock
    }
    const state: HoldState = {
      grant: held,
      policy,
      cache: HoldCache.ofGrant(grant.values, carried),
      timing: {
        deadline: policy.deadlineOf(env, grant),
        deadlineTimer: undefined,
        claim: handedOver ? grant.fence : undefined,
        // a lock handed over lives the hand-off timeout from its release, before the grant:
        // nothing is known of it until its first extension, or a write that carried one (till
        // then `claim` bars a renewal)
        confirmedUntil: handedOver ? grant.grantedAt : grant.grantedAt + env.lockMs,
        clearSince: Number.NEGATIVE_INFINITY,
        keeper: undefined
      },
      turns: {
        inProgress: undefined,
        served: carried === undefined ? 0 : 1,
        servedAt: Number.NEGATIVE_INFINITY,
        turnAt: 0,
        ioAt: grant.grantedAt,
        relayEnd: undefined,
        longHolds: []
      },
      contention: { contended: policy.contendedAtGrant(grant), watching: session.signals !== undefined },
      idle: { idleSince: undefined, parkDue: false, parkTimer: undefined },
      failed: undefined
    }
    // a lock handed over lives for the hand-off timeout until extended, whatever the hold
    if (policy.keepsAlive || handedOver) yield* startKeepAlive(state, handedOver ? env.handoffMs : env.lockMs)
    return yield* serveThenFinish(state, false)
  })

/**
 * Serve, then finish (unless the serving parked). The session's fiber is uninterruptible
 * (see `start`): only the serving is interrupted.
 */
const serveThenFinish = (state: HoldState, resumed: boolean): Effect.Effect<QueuePlace | Parking> =>
  Effect.flatMap(
    Effect.exit(Effect.interruptible(serve(state, resumed))),
    (served): Effect.Effect<QueuePlace | Parking> =>
      Exit.isSuccess(served) && served.value === parking ? Effect.succeed(parking) : finish(state)
  )

/**
 * Go on with a parked hold, in the fiber that resumed it: the hold is built again from what
 * the lease kept (its keep-alive extends when it was to, not a third of the lock
 * expiration from now).
 *
 * @internal
 */
export const resumeHold = (parked: ParkedLease): Effect.Effect<QueuePlace | Parking> => {
  const stepping = parked.stepping
  // a write made under the record by its caller (`parkedStep.ts`): its outcome first
  return stepping === undefined ? rebuild(parked) : Effect.andThen(stepping.await, rebuild(parked))
}

/** The hold built again from its parked record. */
const rebuild = (parked: ParkedLease): Effect.Effect<QueuePlace | Parking> =>
  Effect.suspend(() => {
    const { env, session } = parked
    const grant: HeldGrant = {
      env,
      session,
      token: session.token,
      lockId: parked.lockId,
      fence: parked.fence,
      clock: parked.clock
    }
    const state: HoldState = {
      grant,
      policy: leaseHold,
      cache: HoldCache.ofFlat(parked.slices, parked.writeMs),
      timing: {
        deadline: parked.deadline,
        deadlineTimer: undefined,
        claim: parked.claim,
        confirmedUntil: parked.confirmedUntil,
        clearSince: parked.clearSince,
        keeper: undefined
      },
      turns: {
        inProgress: undefined,
        served: parked.served,
        servedAt: parked.servedAt,
        turnAt: 0,
        // parked, the worker's event loop ran freely: what arrived meanwhile has been read
        ioAt: preciseMillis(grant.clock),
        relayEnd: undefined,
        longHolds: []
      },
      contention: { contended: false, watching: session.signals !== undefined },
      idle: { idleSince: undefined, parkDue: false, parkTimer: undefined },
      // a failed write under the record: the hold serves nothing, and ends
      failed: parked.failed
    }
    resumeKeepAlive(state, parked.heap, parked.extendAt)
    session.lease = state
    return serveThenFinish(state, true)
  })

/**
 * Serve `request` and, through the relay, the requests queued behind it that memory can
 * serve, once the slices it reads and the hold has not are fetched.
 */
const serveFrom = (state: HoldState, request: Request): Effect.Effect<void, InvalidInput | StoreError> =>
  // Steps chained by hand, not `Effect.gen`: every leased modification makes one.
  Effect.suspend(() => {
    const { cache } = state
    const missing = request.slices.filter((name) => !cache.has(name))
    if (missing.length === 0) return relayFrom(state, request)
    const { env, token } = state.grant
    // Fetched under the lock this worker holds: as current as the grant's reads.
    return Effect.andThen(
      Effect.map(env.store.readSlices(token, missing), (values) => cache.fetched(missing, values)),
      relayFrom(state, request)
    )
  })

/**
 * The serving loop: the hold's turns, until its deadline (or its one turn), its lock lost,
 * or nothing left to serve; `parking` when an idle lease parked. Its policy says what a
 * busy loop does, whether the hold goes on at its deadline, and what it does once idle.
 */
const serve = (state: HoldState, resumed: boolean) =>
  Effect.gen(function* () {
    const { grant, policy, turns, timing } = state
    const lookForContenders = checkSignals(state)
    yield* policy.begins(state, resumed)
    // parked, the worker's event loop ran freely: what arrived meanwhile has been read
    if (resumed) waitedForIo(state)
    // whether the queue was found empty and one turn of the event loop given for callers to queue again
    let lingered = false
    while (state.failed === undefined) {
      if (policy.servesOneTurn && turns.served > 0) return
      // Looked for before every modification: a busy local queue never waits for a signal.
      if (policy.watchesNotices) yield* lookForContenders
      // Taken before the queue is read: an arrival after the read completes it.
      const changed = grant.session.changed
      const now = preciseMillis(grant.clock)
      // a caller came back within the turn given (even if the deadline ends the hold now):
      // this token's contended grants here linger for its callers
      if (lingered && grant.session.queue.length > 0) {
        grant.env.returning.mark(grant.token, now, now + grant.env.holdMs)
        lingered = false
      }
      // Served from memory alone, a busy local loop runs on microtasks and the event
      // loop never turns: the socket that brings a contender's signal is not read, and
      // timers do not fire. A turn of the event loop at least every quantum bounds that.
      if (!policy.servesOneTurn && now - turns.ioAt >= grant.env.yieldMs) {
        yield* policy.whenBusy(state)
        waitedForIo(state)
        continue
      }
      // Past the deadline nothing more is served, however full the queue: a busy
      // local loop must not keep a remote waiter out. `finish` writes in one step.
      if (turns.served > 0 && now >= timing.deadline && !(yield* policy.atDeadline(state, now))) return
      const request = nextRequest(state)
      if (request !== undefined && policy.watchesNotices && !state.contention.watching && turns.served > 0) {
        yield* watchContention(state)
        continue
      }
      if (request !== undefined) {
        lingered = false
        yield* serveFrom(state, request)
        continue
      }
      if (now >= timing.deadline && !(yield* policy.atDeadline(state, now))) return
      const idle = yield* policy.whenIdle(state, now, changed, lingered)
      if (idle === "ended") return
      if (idle === "parked") return parking
      if (idle === "lingered") lingered = true
    }
  })

/** Whatever ended the hold: finish the modification in progress, write, release. */
export const finish = (state: HoldState) =>
  Effect.gen(function* () {
    const { env, session, token, lockId } = state.grant
    const { cache } = state
    session.lease = undefined
    state.policy.ends(state)
    disarmDeadline(state)
    // an interrupted wait did not cancel it (the serving loop does after a wait it finishes)
    disarmPark(state)
    // the relay ends here: the turn in progress, if any, is taken over
    const inProgress = takeOverTurn(state)
    if (inProgress !== undefined) {
      const outcome = yield* state.timing.keeper === undefined
        ? withKeepAlive(state, env.lockMs, inProgress.done.await)
        : inProgress.done.await
      if (outcome._tag === "Commit") cache.owe(inProgress, outcome.writes)
      else cache.unwritten(inProgress)
    }
    stopKeepAlive(state)
    if (state.failed !== undefined) {
      // The lock is lost or the store is away: nothing more is written; release what may remain.
      failAcks(env, cache.awaitingWrite, lockId, state.failed)
      yield* Effect.ignore(env.store.releaseQueued(token, lockId, { instanceId: env.instanceId }))
      return noTurn
    }
    return yield* commitAndRelease(
      env,
      session,
      lockId,
      cache.owed(),
      cache.awaitingWrite,
      cache.names(),
      state.timing.claim
    )
  })
