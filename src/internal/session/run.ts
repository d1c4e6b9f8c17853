/**
 * The session's fiber: it holds the grants of a token's queued modifications one after
 * another, and ends the session once nothing is queued here (failing what is left queued
 * if it ended otherwise).
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import { forkInUninterruptible } from "../fork.js"
import type { Grant, QueuePlace } from "../lock/service.js"
import { noTurn } from "./commit.js"
import { type DecidedByCaller, hold, resumeHold } from "./hold.js"
import { type ParkedLease, type Parking, parking } from "./parking.js"
import { localQueue, prune, type Session, type SessionEnv } from "./session.js"

const isParking = (held: QueuePlace | Parking): held is Parking => held === parking

/** Where a session's fiber starts: a grant taken, what the last release left, or a parked hold. */
type From = Grant | QueuePlace | { readonly parked: ParkedLease }

/**
 * The session's fiber, from a grant already taken, from what the last release left, or
 * from a parked hold. A hold that parks ends the fiber, the session going on (its hold in
 * `Session.parked`).
 */
const run = (env: SessionEnv, session: Session, start: From, carried?: DecidedByCaller) => {
  // Whether this worker is in the token's store queue (put back by its last release, or
  // queued by an attempt): a fiber that ends otherwise than by leaving it normally (closed,
  // failed) leaves it in its exit, so a grant handed to it meanwhile passes on at once.
  let queued = "fence" in start || "parked" in start ? false : start.queued
  // the lock id it is queued under, when known: a leave names it (a newer attempt keeps its place)
  let queuedAs = "fence" in start || "parked" in start ? undefined : start.lockId
  // whether the fiber ends because its hold parked: the session lives on
  let parked = false
  return Effect.gen(function* () {
    const { store, lock, sessions, instanceId } = env
    let held: QueuePlace | Parking =
      "fence" in start
        ? yield* hold(env, session, start, carried)
        : "parked" in start
          ? yield* resumeHold(start.parked)
          : start
    if (isParking(held)) {
      parked = true
      return
    }
    let after: QueuePlace = held
    queued = after.queued
    queuedAs = after.lockId
    while (true) {
      const next = yield* Effect.sync(() => {
        prune(session)
        if (session.queue.length > 0) return "work" as const
        sessions.delete(session.token)
        return "exit" as const
      })
      if (next === "exit") {
        // queued by the last release for waiters that have left since (a grant already
        // pending for this worker passes to the next one)
        if (after.queued) yield* Effect.ignore(store.leaveQueue(session.token, instanceId, after.lockId))
        queued = false
        return
      }
      const slices = [...new Set(session.queue.flatMap((request) => request.slices))]
      const grant: Option.Option<Grant> = yield* Effect.interruptible(
        lock.acquire(session.token, slices, localQueue(env, session), after)
      )
      // the acquisition left the queue itself unless it was granted
      queued = false
      held = Option.isSome(grant) ? yield* hold(env, session, grant.value) : noTurn
      if (isParking(held)) {
        parked = true
        return
      }
      after = held
      queued = after.queued
      queuedAs = after.lockId
    }
  }).pipe(
    Effect.onExit((exit) =>
      Effect.suspend(() => {
        if (parked && Exit.isSuccess(exit)) return Effect.void
        if (env.sessions.get(session.token) === session) env.sessions.delete(session.token)
        const left = session.queue.splice(0)
        session.unlisten?.()
        session.unlisten = undefined
        const closeScope = queued
          ? Effect.ignore(env.store.leaveQueue(session.token, env.instanceId, queuedAs))
          : Effect.void
        if (Exit.isSuccess(exit)) return closeScope
        const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause))
        return Effect.forEach(
          left,
          (request) => Effect.sync(() => request.turn.done(error === undefined ? Exit.interrupt() : Exit.fail(error))),
          { discard: true }
        ).pipe(Effect.andThen(closeScope))
      })
    )
  )
}

/**
 * Start the session's fiber in the service's scope.
 *
 * Uninterruptible but where it waits (acquiring, lingering, serving): an interruption
 * between a grant and its hold, even before the fiber's first step, would leave the
 * lock taken until it expires: the fiber is forked uninterruptible, and runs even when the
 * service's scope has closed meanwhile (`forkInUninterruptible`).
 *
 * Forked outside the span of the modification that starts it: the session outlives that
 * modification (a lease, for as long as it is held), and its writes are not the
 * modification's children; nor does a held lease keep the span alive.
 *
 * @internal
 */
export const start = (env: SessionEnv, session: Session, from: From, carried?: DecidedByCaller) =>
  Effect.asVoid(
    Effect.updateContext(
      forkInUninterruptible(Effect.uninterruptible(run(env, session, from, carried)), env.scope),
      withoutParentSpan
    )
  )

const withoutParentSpan: (context: Context.Context<never>) => Context.Context<never> = Context.omit(Tracer.ParentSpan)

/**
 * A parked hold goes on in a new fiber of the session (`SessionEnv.resume`).
 *
 * @internal
 */
export const resumed = (env: SessionEnv, session: Session, parked: ParkedLease) => start(env, session, { parked })

/**
 * At shutdown: every parked hold writes what it served and releases, as an interrupted
 * session does (its fiber, started here, is interrupted at once: `finish` runs).
 *
 * @internal
 */
export const closeParked = (env: SessionEnv) =>
  Effect.forEach(
    [...env.sessions.values()],
    (session) =>
      Effect.suspend(() => {
        const parked = session.parked
        if (parked === undefined) return Effect.void
        parked.unpark()
        return Effect.flatMap(
          Effect.forkChild(Effect.uninterruptible(run(env, session, { parked })), { uninterruptible: true }),
          Fiber.interrupt
        )
      }),
    { discard: true }
  )
