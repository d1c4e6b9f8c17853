/**
 * What a hold does once nothing is queued here (`HoldPolicy.whenIdle`): linger (write what
 * it owes, give its callers one turn of the event loop to come back, then end; while another
 * worker waits, end at once where the last such turn found nobody), or, a lease that nobody
 * contends, wait for something to do and park when nothing comes.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { InvalidInput, StoreError } from "../../StoreError.js"
import type { OneShot } from "../oneShot.js"
import { watchContention } from "./contention.js"
import { flush } from "./groupCommit.js"
import type { HoldState } from "./holdState.js"
import { parkOrWait } from "./parking.js"
import { waitedForIo } from "./relay.js"
import { turnEventLoop } from "./session.js"
import { armTimer } from "./timing.js"

/**
 * How an idle step left the hold: `ended` (the serving ends, the hold is finished),
 * `parked` (the serving ends, the lease lives on parked), `lingered` (one turn of the event
 * loop given to the callers: the next idle step ends the hold), `goOn` (look again).
 *
 * @internal
 */
export type IdleStep = "ended" | "parked" | "lingered" | "goOn"

const ended = Effect.succeed<IdleStep>("ended")

/** How often a contended grant of a token whose last linger found nobody lingers all the same. */
const probeEvery = 4

/**
 * Nothing queued here, and the modifications served wait for their write. Written now under
 * the grant kept, they are acknowledged, and their callers usually queue their next
 * modification at once (a loop, a burst of events): one turn of the event loop lets them,
 * and the grant serves those too (within the quantum once another worker waits) instead of
 * a release and a hand-off per round.
 *
 * A caller that does not come back costs the grant one write more before its release. While
 * another worker waits, only a write that ends before the deadline (as long as the last one
 * took) is made: the wait of the worker behind stays within the quantum and the last
 * write's release; and while another worker waits, a grant of a token whose last linger
 * here, after one modification, found nobody (`SessionEnv.unreturned`, for `leaseHoldTime`)
 * does not linger at all but one time in `probeEvery`: its write goes in its release. With nothing to write (acknowledged from memory), the turn is given all
 * the same: the callers acknowledged at once queue their next modification within it. A
 * grant that served nothing, its only request gone, owes its callers no turn.
 *
 * @internal
 */
export const linger = (state: HoldState, now: number, lingered: boolean): Effect.Effect<IdleStep> => {
  const owes = state.cache.awaitingWrite.length > 0
  const { env, token } = state.grant
  if (lingered) {
    // the turn given to the caller of the one modification served found nobody: this
    // token's callers here do not come back at once (a grant that served several had
    // callers that did, or several callers)
    if (state.turns.served === 1) env.unreturned.mark(token, now, now + env.holdMs)
    return ended
  }
  if (!owes && state.turns.served === 0) return ended
  // Another worker waits, and the last linger here found nobody (API calls, one each, say):
  // the write goes in the release, and the worker behind waits for one step, not a write, a
  // turn of the event loop and a release. Every `probeEvery`-th such grant lingers all the
  // same: a caller that came back late once is not kept from its batches for long.
  if (state.contention.contended && env.unreturned.size > 0 && env.unreturned.hasUnlessProbe(token, now, probeEvery)) {
    return ended
  }
  return Effect.gen(function* () {
    if (owes) {
      if (state.contention.contended && now + state.cache.writeMs >= state.timing.deadline) return "ended"
      yield* flush(state)
      if (state.failed !== undefined) return "ended"
    }
    yield* turnEventLoop
    waitedForIo(state)
    return "lingered"
  })
}

/**
 * A lease that nobody contends, with nothing queued: its writes made if they are to be
 * acknowledged once written, contention watched from now if it was not, then a wait for a
 * modification, a signal or the deadline; or, woken by nothing but its park timer, it parks.
 *
 * @internal
 */
export const waitIdle = (
  state: HoldState,
  changed: OneShot<void>
): Effect.Effect<IdleStep, InvalidInput | StoreError> =>
  Effect.gen(function* () {
    if (state.grant.env.durable && (yield* flush(state))) waitedForIo(state)
    // a failed write ends the lease at once: it can write nothing more
    if (state.failed !== undefined) return "ended"
    if (!state.contention.watching) {
      yield* watchContention(state)
      return "goOn"
    }
    // woken by a modification, a signal, or the deadline
    if (state.timing.deadlineTimer === undefined) yield* armTimer(state)
    return (yield* parkOrWait(state, changed)) ? "parked" : "goOn"
  })
