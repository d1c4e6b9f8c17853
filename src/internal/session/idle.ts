/**
 * What a hold does once nothing is queued here (`HoldPolicy.whenIdle`): linger (write what
 * it owes, give its callers one turn of the event loop to come back, then end; while another
 * worker waits, after one modification, end at once unless the token's callers were seen to
 * come back), or, a lease that nobody contends, wait for something to do and park when
 * nothing comes.
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

/**
 * How often a contended grant that served one modification lingers for a token whose callers
 * were not seen to come back.
 */
const probeEvery = 4

/**
 * Whether a contended grant that served one modification lingers: its token's callers came
 * back within a linger here lately (a loop, a socket's bursts), or this is a probe. A
 * token's calls that come one at a time (API calls to a tab whose socket is elsewhere) are
 * not waited for, but one time in `probeEvery` of this worker's such grants.
 */
const expectsCallers = (state: HoldState, now: number) => {
  const { env, token } = state.grant
  if (env.returning.size > 0 && env.returning.has(token, now)) return true
  return ++env.lingerProbes.made % probeEvery === 0
}

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
 * write's release. And while another worker waits, a grant that served one modification
 * lingers only for a token whose callers came back within a linger here lately
 * (`SessionEnv.returning`), or one time in `probeEvery` (to find that out): otherwise its
 * write goes in its release (`ended`), and the worker behind waits for one step of the
 * store, not a write, a turn of the event loop and a release. With nothing to write
 * (acknowledged from memory), the turn is given all the same: the callers acknowledged at
 * once queue their next modification within it. A grant that served nothing, its only
 * request gone, owes its callers no turn.
 *
 * @internal
 */
export const linger = (state: HoldState, now: number, lingered: boolean): Effect.Effect<IdleStep> => {
  const owes = state.cache.awaitingWrite.length > 0
  if (lingered || (!owes && state.turns.served === 0)) return ended
  if (state.contention.contended && state.turns.served <= 1 && !expectsCallers(state, now)) return ended
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
