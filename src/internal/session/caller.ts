/**
 * A modification's request and the token's session (`modify.ts` calls these): `begin`,
 * which queues it behind the token's session on this worker or, with none, makes the
 * uncontended attempt in the caller's own fiber; `complete`, which writes and releases a
 * grant the caller held for its own modification (or hands it to a session for the
 * modifications queued meanwhile); and `cancel`, for a caller that left before its turn.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type { Turn } from "../lease.js"
import { preciseMillis } from "../timers.js"
import { commitAndRelease, warnHeld } from "./commit.js"
import { starting } from "./idle.js"
import { policyOf } from "./policy.js"
import { start } from "./run.js"
import { leases, newSession, notify, prune, type Request, type SessionEnv } from "./session.js"

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
 * Start a modification. With nothing queued on the token here, the caller makes the
 * uncontended attempt itself; when that grants a lock to be held for this one
 * modification, the turn is returned (`Some`): the caller decides, completes `done` and
 * calls `complete`. Otherwise (`None`) the request is queued, and the caller awaits its
 * turn. Run uninterruptibly, with `complete` in the same region: a lock granted to a caller
 * that left would stay taken until it expires.
 *
 * A session in the map always has a fiber or a caller holding its grant (`callerGrant`):
 * whoever holds it looks at the queue when it is done, so a request queued meanwhile is
 * served.
 *
 * @internal
 */
export const begin = (env: SessionEnv, token: string, request: Request) =>
  Effect.suspend(() => {
    starting(env, token)
    const { lock, signals, sessions } = env
    if (join(env, token, request)) return noOwnTurn
    const session = newSession(env, token)
    // before the attempt is sent: a notice it causes comes after this
    const mark = signals.mark(token)
    // `attemptMasked`: `begin` runs uninterruptibly
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
 * After a turn from `begin`, with `done` completed: write, release, then complete `ack`.
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
 * A request whose caller left before its turn: the session skips it.
 *
 * @internal
 */
export const cancel = (env: SessionEnv, token: string, request: Request) => {
  request.cancelled = true
  const session = env.sessions.get(token)
  if (session !== undefined) notify(session)
}
