/**
 * One modification on this worker (`Lease.Service.modify`), and the way it takes, chosen
 * here. A plain one (`Pure`) is made in one step of the store where it can (under a grant of
 * the step's own, or this worker's idle lease), and is otherwise decided by the session
 * when its turn comes, its caller waiting once, for its result. An effectful one
 * (`Effectful`) is decided in its caller's fiber, under a grant of its own when nothing is
 * queued here and the grant is held for it alone, or on a turn the session gives it. Either
 * answers once its outcome is acknowledged.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { SliceEntry, Store } from "../../Store.js"
import type { Effectful, Modification, ModifyFailure, Pure, Turn } from "../lease.js"
import { OneShot } from "../oneShot.js"
import { preciseMillis } from "../timers.js"
import { begin, cancel, complete } from "./caller.js"
import { warnHeld } from "./commit.js"
import type { HoldState } from "./holdState.js"
import { clockOf, holderOf, idleLease, servedInStep } from "./idleLease.js"
import { parkedStep } from "./parkedStep.js"
import { ParkedLease } from "./parking.js"
import { leases, type Outcome, type Request, type SessionEnv } from "./session.js"

/**
 * Make `modification` of `token` (`Lease.Service.modify`). Called when the modification
 * runs: a plain modification's way is built then, and reads what the step reads.
 *
 * @internal
 */
export const modify = <A, E, R>(
  env: SessionEnv,
  token: string,
  modification: Modification<A, E, R>
): Effect.Effect<A, E | ModifyFailure, R> =>
  modification._tag === "Pure" ? pure(env, token, modification) : effectful(env, token, modification)

/** A modification's request, its signals made: the same shape for every request. */
const newRequest = (
  slices: ReadonlyArray<string>,
  event: Option.Option<string>,
  decideOnTurn: Request["decideOnTurn"]
): Request => ({
  slices,
  event,
  turn: new OneShot(),
  done: new OneShot(),
  ack: new OneShot(),
  cancelled: false,
  decideOnTurn
})

const abortOutcome: Outcome = { _tag: "Abort" }
const abortExit: Exit.Exit<Outcome> = Exit.succeed(abortOutcome)

/** A plain modification's answer, `result`, after what its last run logs. */
const answer = <A, E, B, F>(m: Pure<A, E>, result: Effect.Effect<B, F>): Effect.Effect<B, F> =>
  m.warnings === undefined ? result : Effect.andThen(m.warnings, result)

/**
 * A plain modification: in one step of the store where the store has one (`inStep`), else,
 * or when the step did nothing, decided by the session (`decidedOnTurn`).
 */
const pure = <A, E>(env: SessionEnv, token: string, m: Pure<A, E>): Effect.Effect<A, E | ModifyFailure> => {
  const step = env.store.modifyInStep
  return step === undefined ? decidedOnTurn(env, token, m) : inStep(env, step, token, m)
}

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
 * A plain modification in one step of the store (`Store.Stepping`), with no step of a
 * session's fiber. The step asks, inside itself on the embedded store (`when`: nothing here
 * can change before it is made; on Redis, just before its script is sent, which the store
 * checks), what to run under: with the oplock off and no session on the token here, a grant
 * of the step's own (the lock free, nobody queued); under this worker's lease when its hold
 * is idle (`idleLease`: the modification is what it would serve next), the lease's grant;
 * nothing otherwise (the token has a session busy here: the modification queues behind
 * it, in its order; or, with the oplock on, none yet: the session starts the lease). Made,
 * the modification answers at once, with the warning of a decision that took too long.
 * Not made (also when the store found the lock taken or workers queued, or, on Redis, the
 * values the decision ran on had moved on), its run counts for nothing (`discarded`), and
 * the session decides it (`decidedOnTurn`).
 *
 * A yield follows every `stepsPerYield`-th step made on this worker, as `complete`'s
 * follows a release: the embedded store never makes a fiber wait, and a loop of
 * modifications would hold every other fiber off. (No lock is held across it: the fiber of
 * another worker that runs then finds the lock free, and takes it.) An interruption there
 * finds the modification whole (its one step made), as an interrupted modification on the
 * queued way ends once its write is made.
 */
const inStep = <A, E>(
  env: SessionEnv,
  step: NonNullable<Store.Service["modifyInStep"]>,
  token: string,
  m: Pure<A, E>
): Effect.Effect<A, E | ModifyFailure> => {
  const { slices, discarded } = m
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
    const writes = m.decide(values, fence)
    ended = preciseMillis(clock)
    heldMs = ended - started
    return writes
  }
  // in the step, once its writes are made: the lease's cache holds what the store does
  const written = (values: ReadonlyArray<Option.Option<string>>, writes: ReadonlyArray<SliceEntry>) => {
    if (lease !== undefined) servedInStep(lease, slices, values, writes, ended)
  }
  let stepEnded = false
  // Steps chained by hand, not `Effect.gen`: on the embedded store this is the whole of an
  // uncontended modification.
  const stepped = Effect.flatMap(step(token, slices, decideTimed, { when, written }), (done) => {
    stepEnded = true
    if (!done) {
      discarded?.()
      // a parked lease on a store whose step does not run under a lease: one write of its caller
      return lease instanceof ParkedLease
        ? parkedStep(env, token, lease, m, () => decidedOnTurn(env, token, m))
        : decidedOnTurn(env, token, m)
    }
    const next = afterStep(env, answer(m, m.exit!))
    return heldMs > env.warnMs ? Effect.andThen(warnHeld(env, token, m.event, heldMs), next) : next
  })
  if (discarded === undefined) return stepped
  // a step that failed may have run the decision on values that had moved on
  return Effect.onError(stepped, () => (stepEnded ? Effect.void : Effect.sync(discarded)))
}

/** A turn's values in the order of `slices`. */
const valuesOf = (slices: ReadonlyArray<string>, turn: Turn) =>
  slices.map((name) => turn.values.get(name) ?? Option.none<string>())

/**
 * A plain modification decided by the session when its turn comes
 * (`Request.decideOnTurn`), with no step of the caller's fiber in between, or by its caller
 * under a grant of its own; the caller waits once, for its result (its value once the
 * writes are acknowledged, or the error). Interrupted before its turn, it leaves; decided,
 * its outcome is awaited all the same.
 */
const decidedOnTurn = <A, E>(env: SessionEnv, token: string, m: Pure<A, E>): Effect.Effect<A, E | ModifyFailure> => {
  const result = new OneShot<A, E | ModifyFailure>()
  const decideOnTurn = (turn: Turn): Outcome => {
    const writes = m.decide(valuesOf(m.slices, turn), turn.fence)
    const decided = m.exit!
    // one that writes nothing, refused or not, is acknowledged too: with the writes it read,
    // if not yet acknowledged, and fails as they do if they are lost
    request.ack.listen((acked) => result.done(Exit.isSuccess(acked) ? decided : Exit.failCause(acked.cause)))
    return writes.length === 0 ? abortOutcome : { _tag: "Commit", writes }
  }
  const request = newRequest(m.slices, m.event, decideOnTurn)
  // a turn that cannot come (the session failed or closed) ends the wait with its error
  request.turn.listen((turn) => {
    if (Exit.isFailure(turn)) result.done(Exit.failCause(turn.cause))
  })
  // Decided: the outcome is awaited even if the caller is interrupted meanwhile.
  const outcome = Effect.suspend(() => answer(m, result.await))
  return Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(begin(env, token, request), (own) => {
      if (Option.isSome(own)) {
        const decided = decideOnTurn(own.value)
        // a grant of its own read what is stored: nothing written, nothing to wait for
        if (decided._tag === "Abort") request.ack.done(Exit.void)
        request.done.done(Exit.succeed(decided))
        return Effect.andThen(complete(env, token, request), outcome)
      }
      return Effect.flatMap(Effect.exit(restore(result.await)), (waited) => {
        if (Exit.isSuccess(waited) || result.poll() !== undefined) return outcome
        cancel(env, token, request)
        // not decided yet: it never will be
        return request.done.poll() === undefined ? Effect.failCause(waited.cause) : outcome
      })
    })
  )
}

/**
 * Whether a modification that writes nothing must wait for writes it may have read: decided
 * on a turn a session gave it (a grant of its own read what is stored), and not
 * acknowledged at once (`Request.ack`).
 */
const owesAck = (own: Option.Option<Turn>, request: Request) => {
  if (Option.isSome(own)) return false
  const acked = request.ack.poll()
  return acked === undefined || Exit.isFailure(acked)
}

/**
 * An effectful modification: its turn (a grant of its own, or awaited: handed back unused
 * when the caller leaves), its decision in the caller's fiber, and its acknowledgement.
 * Uninterruptible but where the caller may leave (the wait for the turn, and what `decide`
 * makes interruptible): a lock granted to a caller that left would stay taken until it
 * expires, and a decided outcome is awaited even if the caller is interrupted meanwhile.
 */
const effectful = <A, E, R>(
  env: SessionEnv,
  token: string,
  m: Effectful<A, E, R>
): Effect.Effect<A, E | ModifyFailure, R> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function* () {
      const request = newRequest(m.slices, m.event, undefined)
      const own = yield* begin(env, token, request)
      let turn: Turn
      if (Option.isSome(own)) {
        turn = own.value
      } else {
        const turnExit = yield* Effect.exit(restore(request.turn.await))
        if (Exit.isFailure(turnExit)) {
          cancel(env, token, request)
          // The turn may have come at the moment the caller left: hand it back unused.
          const given = request.turn.poll()
          if (given !== undefined && Exit.isSuccess(given)) request.done.done(abortExit)
          return yield* Effect.failCause(turnExit.cause)
        }
        turn = turnExit.value
      }
      const decided = yield* Effect.exit(m.decide(turn, restore))
      request.done.done(
        Exit.isSuccess(decided) && decided.value.writes.length > 0
          ? Exit.succeed({ _tag: "Commit", writes: decided.value.writes })
          : abortExit
      )
      if (Option.isSome(own)) yield* complete(env, token, request)
      if (Exit.isFailure(decided)) {
        // refused after reading writes of the session not yet acknowledged: its outcome
        // rests on them, so it is reported with them, and fails as they do if they are lost
        if (!Cause.hasInterruptsOnly(decided.cause) && owesAck(own, request)) {
          const acked = yield* Effect.exit(request.ack.await)
          if (Exit.isFailure(acked)) return yield* Effect.failCause(acked.cause)
        }
        return yield* Effect.failCause(decided.cause)
      }
      if (decided.value.writes.length > 0 || owesAck(own, request)) yield* request.ack.await
      return decided.value.value
    })
  )
