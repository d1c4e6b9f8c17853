/**
 * A lone modification under a parked lease, made by its caller in one write (`parkedStep`),
 * on a store whose step cannot run under a lease (Redis: `Store.Stepping` answers a
 * `holder` with `false`). Without it, every modification of a token at a person's pace
 * builds the lease's hold again from its parked record, runs its serving loop in a new
 * fiber, writes in a group commit of one and parks again: several fibers and some forty
 * kilobytes of allocation per modification, where this is one decision on the record's
 * values and one `writeIfHolder`.
 *
 * The record stays parked meanwhile, marked `stepping`: another modification of the token
 * queues on its session (`idleLease` refuses it), and whatever resumes the hold (that
 * modification, a signal, its timer, the shutdown) builds it only once the write's outcome
 * is in the record (`resumeHold` waits). Written, the record holds what the store holds
 * (`servedInStep`). Refused because the lock is no longer this lease's, nothing was written:
 * the record is marked failed (its hold, once resumed, ends and releases nothing) and the
 * modification is decided again by the session (a new grant). Any other failure leaves the
 * write's outcome unknown: the record is marked failed (the lease writes nothing more on
 * values that may be stale) and the modification fails with the store's error, as a group
 * commit's callers do.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Option from "effect/Option"
import { type AcknowledgedError, isInvalidInput, type LockLost } from "../../StoreError.js"
import type { ModifyFailure, Pure } from "../lease.js"
import { OneShot } from "../oneShot.js"
import { preciseMillis } from "../timers.js"
import { warnHeld } from "./commit.js"
import { idleLease } from "./idleLease.js"
import type { ParkedLease } from "./parking.js"
import type { SessionEnv } from "./session.js"

/**
 * Whether `lease` may make `m` in one write: still the session's idle parked lease, its
 * modifications acknowledged once written and not waiting for a commit line (a window of
 * 0), and every slice `m` reads in its record. The values, in the order of `m.slices`, or
 * `undefined`.
 */
const valuesFor = (
  env: SessionEnv,
  token: string,
  lease: ParkedLease,
  slices: ReadonlyArray<string>
): ReadonlyArray<Option.Option<string>> | undefined => {
  if (!env.durable || env.commitLine !== undefined) return undefined
  const session = env.sessions.get(token)
  if (session === undefined || idleLease(session) !== lease) return undefined
  return lease.valuesOf(slices)
}

/**
 * Make `m` under the parked `lease` in one write, or hand it to `otherwise` (the session's
 * way) when the lease cannot, or no longer holds the lock.
 *
 * @internal
 */
export const parkedStep = <A, E>(
  env: SessionEnv,
  token: string,
  lease: ParkedLease,
  m: Pure<A, E>,
  otherwise: () => Effect.Effect<A, E | ModifyFailure>
): Effect.Effect<A, E | ModifyFailure> =>
  Effect.suspend(() => {
    const values = valuesFor(env, token, lease, m.slices)
    if (values === undefined) return otherwise()
    const started = preciseMillis(lease.clock)
    const writes = m.decide(values, lease.fence)
    const ended = preciseMillis(lease.clock)
    const answer = (): Effect.Effect<A, E> => {
      const result = m.warnings === undefined ? m.exit! : Effect.andThen(m.warnings, m.exit!)
      return ended - started > env.warnMs
        ? Effect.andThen(warnHeld(env, token, m.event, ended - started), result)
        : result
    }
    if (writes.length === 0) {
      // nothing to write, on values the store holds: answered at once
      lease.servedInStep(m.slices, values, writes, ended)
      return answer()
    }
    const stepping = new OneShot<void>()
    lease.stepping = stepping
    // the write's outcome into the record, then whatever resumes the hold may build it
    const settle = (outcome: "written" | "refused" | LockLost | AcknowledgedError) => {
      if (outcome === "written") lease.servedInStep(m.slices, values, writes, ended)
      else if (outcome !== "refused") lease.failed = outcome
      lease.stepping = undefined
      stepping.done(Exit.void)
    }
    // Uninterruptible: once decided, the write's outcome is awaited and recorded even if
    // the caller leaves meanwhile (bounded by the command timeout), as on the session's way.
    return Effect.uninterruptible(
      Effect.matchEffect(env.store.writeIfHolder(token, lease.lockId, writes, { claim: lease.claim }), {
        onSuccess: () => {
          settle("written")
          return answer()
        },
        onFailure: (error) => {
          // tokens and slice names were checked before a session existed: a defect here,
          // refused before any I/O
          if (isInvalidInput(error)) {
            settle("refused")
            return Effect.die(error)
          }
          settle(error)
          if (error._tag !== "LockLost") return Effect.fail(error)
          // nothing was written: decided again on a grant the session takes
          m.discarded?.()
          return otherwise()
        }
      })
    )
  })
