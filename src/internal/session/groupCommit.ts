/**
 * The group commit: one write of every modification a hold served since the last one, and
 * for an uncontended lease, the wait for the worker's commit line before it.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import { preciseMillis } from "../timers.js"
import { failAcks, orDefect, succeedAcks } from "./commit.js"
import type { CommitLine } from "./commitLine.js"
import { checkSignals } from "./contention.js"
import type { HoldState } from "./holdState.js"
import { flushes, flushFailures } from "./metrics.js"
import { confirmedByWrite, lookDue } from "./timing.js"

/**
 * Group commit: one write for every modification served since the last one (`false`: nothing to write).
 *
 * Uninterruptible: the batch leaves the cache before its write, and only the write's outcome
 * acknowledges or fails it. Called from the serving loop, which a closing worker interrupts:
 * an interruption during the write would drop the batch, and its callers, decided, would wait
 * for their acknowledgements for ever. The write is bounded (the command timeout; a closed
 * store fails at once), and `finish` would make it anyway.
 *
 * @internal
 */
export const flush = (state: HoldState): Effect.Effect<boolean> =>
  // Steps chained by hand, not `Effect.gen`: a leased modification written alone makes one.
  Effect.uninterruptible(
    Effect.suspend(() => {
      const { env, token, lockId, clock } = state.grant
      const taken = state.cache.takeBatch()
      if (taken === undefined) return Effect.succeed(false)
      const [batch, entries] = taken
      let started = preciseMillis(clock)
      const write = Effect.suspend(() => {
        started = preciseMillis(clock)
        const { timing } = state
        // the renewal's look when due (the keep-alive extends on its own cadence)
        const look = lookDue(env, timing.deadline, timing.clearSince, started)
        return env.store.writeIfHolder(token, lockId, entries, {
          claim: timing.claim,
          instanceId: look ? env.instanceId : undefined
        })
      })
      // an uncontended lease's commit meets the worker's others at the commit line (nobody waits for its lock)
      const line = env.commitLine
      const written =
        line === undefined || !state.policy.meetsCommitLine || state.contention.contended
          ? write
          : Effect.andThen(atLine(state, line), write)
      return Effect.matchEffect(written, {
        onSuccess: (queued) => {
          state.cache.committedIn(preciseMillis(clock) - started)
          confirmedByWrite(env, state.timing, started, false, queued)
          return Effect.map(Metric.update(flushes, 1), () => {
            succeedAcks(batch)
            return true
          })
        },
        onFailure: orDefect((error) => {
          state.cache.committedIn(preciseMillis(clock) - started)
          // The lock is lost or the store is away: this lease writes nothing more.
          return Metric.update(flushFailures, 1).pipe(
            Effect.andThen(
              Effect.logWarning(`writing the leased modifications of token ${token} failed: ${error.message}`)
            ),
            Effect.map(() => {
              state.failed = error
              failAcks(env, batch, lockId, error)
              return true
            })
          )
        })
      })
    })
  )

/**
 * Wait for the commit line, unless the lease is contended meanwhile: a contender's notice
 * (or the lock lost) ends the wait at once, so that contention still ends the lease within
 * the quantum. Any other change (a modification queued here) is looked at and the wait
 * goes on.
 */
const atLine = (state: HoldState, line: CommitLine): Effect.Effect<void> =>
  Effect.flatMap(checkSignals(state), () =>
    state.contention.contended || state.failed !== undefined
      ? Effect.void
      : Effect.flatMap(
          Effect.suspend(() => line.next(state.grant.session.changed)),
          (reached): Effect.Effect<void> => (reached ? Effect.void : atLine(state, line))
        )
  )
