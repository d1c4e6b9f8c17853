/**
 * The caller's side of a modification: `begin`, which queues it behind the token's session
 * on this worker or, with none, makes the uncontended attempt in the caller's own fiber;
 * and `complete`, which writes and releases a grant the caller held for its own
 * modification (or hands it to a session for the modifications queued meanwhile).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type { SliceEntry, Store } from "../../Store.js"
import type { AcknowledgedError, InvalidInput } from "../../StoreError.js"
import type { Request, Turn } from "../lease.js"
import { preciseMillis } from "../timers.js"
import { commitAndRelease, warnHeld } from "./commit.js"
import type { HoldState } from "./holdState.js"
import { clockOf, holderOf, idleLease, servedInStep } from "./idleLease.js"
import type { ParkedLease } from "./parking.js"
import { policyOf } from "./policy.js"
import { start } from "./run.js"
import { leases, newSession, notify, prune, type SessionEnv } from "./session.js"

/** Queued behind an existing session: `true`; the caller then awaits its turn. */
const join = (env: SessionEnv, token: string, request: Request) => {
  const existing = env.sessions.get(token)
  if (existing === undefined) return false
  existing.queue.push(request)
  notify(existing)
  return true
}

const noOwnTurn = Effect.succeed(Option.none<Turn>())

/**
 * Start a modification (`Lease.Service.begin`). A session in the map always has a fiber or
 * a caller holding its grant (`own`): whoever holds it looks at the queue when it is done,
 * so a request queued meanwhile is served.
 *
 * @internal
 */
export const begin = (env: SessionEnv, token: string, request: Request) =>
  Effect.suspend(() => {
    const { lock, signals, sessions } = env
    if (join(env, token, request)) return noOwnTurn
    const session = newSession(env, token)
    // before the attempt is sent: a notice it causes comes after this
    const mark = signals.mark(token)
    // `attemptMasked`: `begin` runs uninterruptibly (`Lease.Service.begin`)
    return Effect.matchCauseEffect(lock.attemptMasked(token, request.slices), {
      // Whatever ended the attempt (an error, a defect, an interruption), the session must
      // not stay in the map with nobody serving it: the requests queued meanwhile would
      // wait for ever.
      onFailure: (cause) => {
        // The requests queued meanwhile make their own attempts. A failed attempt may
        // still have queued this worker: the session leaves the queue if it ends
        // without a grant (the entry's own deadline covers the rest).
        if (session.queue.length > 0) {
          return Effect.andThen(start(env, session, { queued: true }), Effect.failCause(cause))
        }
        if (sessions.get(token) === session) sessions.delete(token)
        // the failed attempt may still have queued this worker, and nobody waits here: the
        // attempt itself leaves the queue, in the background, under its own lock id (a
        // newer attempt keeps its place and its grant)
        return Effect.failCause(cause)
      },
      onSuccess: (attempt) => {
        if (Result.isFailure(attempt)) {
          session.queue.unshift(request)
          // the refused attempt queued this worker
          return Effect.as(
            start(env, session, {
              queued: true,
              attempted: true,
              remainingMs: attempt.failure.remainingMs,
              lockId: attempt.failure.lockId,
              mark
            }),
            Option.none()
          )
        }
        const grant = attempt.success
        // a quantum or a lease serves the modifications that queue meanwhile: its fiber
        // does; with the oplock off the caller holds the grant for its own modification
        if (policyOf(env, grant).heldBySession) {
          session.queue.unshift(request)
          return Effect.as(start(env, session, grant), Option.none())
        }
        session.callerGrant = grant
        return Effect.succeed(Option.some<Turn>({ values: grant.values, fence: grant.fence }))
      }
    })
  })

/**
 * After a turn from `begin`, with `done` completed: write, release, then complete `ack`
 * (`Lease.Service.complete`).
 *
 * @internal
 */
export const complete = (env: SessionEnv, token: string, request: Request): Effect.Effect<void> =>
  // Steps chained by hand, not `Effect.gen`: this is on the path of every uncontended modification.
  Effect.suspend(() => {
    const { sessions, store, instanceId } = env
    const session = sessions.get(token)
    const own = session?.callerGrant
    if (session === undefined || own === undefined) return Effect.die(new Error("complete without a turn from begin"))
    session.callerGrant = undefined
    const { lockId } = own
    const outcome = request.done.poll()
    const writes =
      outcome !== undefined && Exit.isSuccess(outcome) && outcome.value._tag === "Commit" ? outcome.value.writes : []
    const written = () => {
      prune(session)
      return !leases(env, token) && env.quantumMs > 0 && session.queue.length > 0
        ? // The modifications queued here meanwhile are served under the same grant (with
          // this one written in their first batch), for at most a quantum once another
          // worker waits: a release and a claim fewer per batch
          // (docs/design.md#local-batching-bounded-unfairness).
          start(env, session, own, { writes, request })
        : Effect.flatMap(commitAndRelease(env, session, lockId, writes, [request], [...own.values.keys()]), (after) => {
            prune(session)
            if (session.queue.length > 0) return start(env, session, after)
            sessions.delete(token)
            // A store that answers synchronously (the embedded one) never made this fiber
            // wait: without a yield, a loop of modifications would keep every other fiber
            // from running. The yield goes through Effect's scheduler, on microtasks: it
            // does not turn the event loop, so a caller's own tight loop of awaited
            // modifications on the embedded store still keeps Node's timers and sockets
            // waiting until it pauses. On Redis the yield costs next to nothing beside its
            // round trips.
            return after.queued
              ? Effect.andThen(Effect.ignore(store.leaveQueue(token, instanceId, after.lockId)), Effect.yieldNow)
              : Effect.yieldNow
          })
    }
    // the held time read in the step that goes on: one step fewer than a warning step first
    return Effect.clockWith((clock) => {
      const heldMs = preciseMillis(clock) - own.grantedAt
      return heldMs > env.warnMs
        ? Effect.andThen(warnHeld(env, token, request.event, heldMs), Effect.suspend(written))
        : written()
    })
  })

/**
 * Steps made in a row without a yield (`inStep`): a tight loop lets the other fibers run
 * after at most this many, and a yield costs a fifth of a step: one after each would cost
 * that on every modification.
 */
const stepsPerYield = 16

/** `next`, after a yield every `stepsPerYield`-th step made on this worker. */
const afterStep = <A, E>(env: SessionEnv, next: Effect.Effect<A, E>): Effect.Effect<A, E> => {
  if (++env.inStep.made < stepsPerYield) return next
  env.inStep.made = 0
  return Effect.andThen(Effect.yieldNow, next)
}

/** What a step of the store's own grant asks for (`Store.Stepping`'s `when`). */
const ownGrant = {}

/**
 * A whole modification in one step of the store (`Lease.Service.inStep`, where the store
 * has one: `step`), with no step of a session's fiber. The step asks,
 * inside itself on the embedded store (`when`: nothing here can change before it is made;
 * on Redis, just before its script is sent, which the store checks), what to run under:
 * with the oplock off and no session on the token here, a grant of the step's own (the
 * lock free, nobody queued); under this worker's lease when its hold is idle (`idleLease`:
 * the modification is what it would serve next), the lease's grant; nothing otherwise (the
 * token has a session busy here: the modification queues behind it, in its order; or, with
 * the oplock on, none yet: `begin` starts the lease). `then(true)` once `decide` ran in the
 * step and its writes are made, with the warning of a decision that took too long;
 * `then(false)` when nothing was done (also when the store found the lock taken or
 * workers queued), and the modification goes on with `begin`.
 *
 * A yield follows every `stepsPerYield`-th step made on this worker, as `complete`'s
 * follows a release: the embedded store never makes a fiber wait, and a loop of
 * modifications would hold every other fiber off. (No lock is held across it: the fiber of
 * another worker that runs then finds the lock free, and takes it.) An interruption there
 * finds the modification whole (its one step made), as an interrupted modification on the
 * queued way ends once its write is made. Called when the modification runs (it reads
 * nothing itself: the step does).
 *
 * @internal
 */
export const inStep = <A, E>(
  env: SessionEnv,
  step: NonNullable<Store.Service["modifyInStep"]>,
  token: string,
  slices: ReadonlyArray<string>,
  event: Option.Option<string>,
  decide: (values: ReadonlyArray<Option.Option<string>>, fence: number) => ReadonlyArray<SliceEntry>,
  then: (done: boolean) => Effect.Effect<A, E>
): Effect.Effect<A, E | InvalidInput | AcknowledgedError> => {
  let lease: HoldState | ParkedLease | undefined
  let heldMs = 0
  const when = () => {
    const session = env.sessions.get(token)
    if (session === undefined) return leases(env, token) ? undefined : ownGrant
    lease = idleLease(session)
    return lease === undefined ? undefined : { holder: holderOf(lease) }
  }
  let ended = 0
  const decideTimed = (values: ReadonlyArray<Option.Option<string>>, fence: number) => {
    // a lease's hold reads its own clock; a grant of the step's own, the worker's
    const clock = lease === undefined ? env.clock : clockOf(lease)
    const started = preciseMillis(clock)
    const writes = decide(values, fence)
    ended = preciseMillis(clock)
    heldMs = ended - started
    return writes
  }
  // in the step, once its writes are made: the lease's cache holds what the store does
  const written = (values: ReadonlyArray<Option.Option<string>>, writes: ReadonlyArray<SliceEntry>) => {
    if (lease !== undefined) servedInStep(lease, slices, values, writes, ended)
  }
  return Effect.flatMap(step(token, slices, decideTimed, { when, written }), (done) => {
    if (!done) return then(false)
    const next = afterStep(env, then(true))
    return heldMs > env.warnMs ? Effect.andThen(warnHeld(env, token, event, heldMs), next) : next
  })
}
