/**
 * A lone modification under a parked lease, made by its caller in one write (`parkedStep`),
 * on a store whose step cannot run under a lease (Redis: `Store.Stepping` answers a
 * `holder` with `false`; on the embedded store, which can, it is reached only when its step
 * found the lock no longer the lease's, and then ends the lease at once). Without it, every modification of a token at a person's pace
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
 * the record is marked failed and the modification is decided again by the session (a new
 * grant). Any other failure leaves the write's outcome unknown (a defect of the write too):
 * the record is marked failed (the lease writes nothing more on values that may be stale)
 * and the modification fails with the store's error, as a group commit's callers do. A
 * failed record wakes its hold at once, which ends the lease.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { isInvalidInput, StoreUnavailable } from "../../StoreError.js"
import type { ModifyFailure, Pure } from "../lease.js"
import { OneShot } from "../oneShot.js"
import { preciseMillis } from "../timers.js"
import { warnHeld } from "./commit.js"
import { idleLease } from "./idleLease.js"
import type { ParkedLease } from "./parking.js"
import { notify, type SessionEnv } from "./session.js"

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
  // Uninterruptible from the look on: once decided, the write's outcome is awaited and
  // recorded even if the caller leaves meanwhile (bounded by the command timeout), as on the
  // session's way; the caller may leave again once it is handed to the session.
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      const values = valuesFor(env, token, lease, m.slices)
      if (values === undefined) return restore(otherwise())
      const started = preciseMillis(lease.clock)
      const writes = m.decide(values, lease.fence)
      const ended = preciseMillis(lease.clock)
      if (writes.length === 0) {
        // nothing to write, on values the store holds: answered at once
        lease.servedInStep(m.slices, values, writes, ended)
        return answer(env, token, m, ended - started)
      }
      const stepping = new OneShot<void>()
      lease.stepping = stepping
      // the record's keep-alive and its renewal's look carried by the write when due
      const carried = lease.carried(writes, ended)
      const write = env.store.writeIfHolder(token, lease.lockId, writes, {
        claim: lease.claim,
        extend: carried.extend,
        instanceId: carried.look ? env.instanceId : undefined
      })
      return Effect.flatMap(Effect.exit(write), (exit) => {
        // the write's outcome into the record, then whatever resumes the hold may build it
        const settled = () => {
          lease.stepping = undefined
          stepping.done(Exit.void)
        }
        if (Exit.isSuccess(exit)) {
          lease.written(ended, carried, exit.value)
          lease.servedInStep(m.slices, values, writes, ended)
          settled()
          return answer(env, token, m, ended - started)
        }
        const error = Cause.findErrorOption(exit.cause)
        // tokens and slice names were checked before a session existed: a refusal is a
        // defect; a defect or an interruption of the write leaves its outcome unknown
        lease.failed =
          Option.isSome(error) && !isInvalidInput(error.value)
            ? error.value
            : new StoreUnavailable({ operation: "writeIfHolder", reason: `the write of token ${token} did not end` })
        settled()
        // the lease writes nothing more: woken, its hold ends it
        notify(lease.session)
        // a defect of the write stays one
        if (Option.isNone(error)) return Effect.failCause(exit.cause as Cause.Cause<never>)
        if (isInvalidInput(error.value)) return Effect.die(error.value)
        if (error.value._tag !== "LockLost") return Effect.fail(error.value)
        // nothing was written: decided again on a grant the session takes
        m.discarded?.()
        return restore(otherwise())
      })
    })
  )

/** A modification's answer once made, after what its run logs and a warning of a decision that took too long. */
const answer = <A, E>(env: SessionEnv, token: string, m: Pure<A, E>, heldMs: number): Effect.Effect<A, E> => {
  const result = m.warnings === undefined ? m.exit! : Effect.andThen(m.warnings, m.exit!)
  return heldMs > env.warnMs ? Effect.andThen(warnHeld(env, token, m.event, heldMs), result) : result
}
