/**
 * What a hold does once nothing is queued here (`HoldPolicy.whenIdle`): linger (write what
 * it owes, give its callers one turn of the event loop to come back, then end; while another
 * worker waits, after one modification, end at once unless the token's callers were seen to
 * come back at once here lately: `expectsCallers`), or, a lease that nobody contends, wait
 * for something to do and park when nothing comes.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { InvalidInput, StoreError } from "../../StoreError.js"
import type { OneShot } from "../oneShot.js"
import { preciseMillis } from "../timers.js"
import { watchContention } from "./contention.js"
import { flush } from "./groupCommit.js"
import type { HoldState } from "./holdState.js"
import { parkOrWait } from "./parking.js"
import { waitedForIo } from "./relay.js"
import { type SessionEnv, turnEventLoop } from "./session.js"
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
 * Whether a contended grant that served one modification lingers: only when its token's
 * callers came back at once here lately (`SessionEnv.returning`: a loop, a socket's
 * bursts). Otherwise it ends at once, and a modification of the token that starts here
 * within `comebackMs` of that (`SessionEnv.released`) shows a caller that comes back: the
 * token goes into `returning`. Calls that come one at a time (API calls to a tab whose
 * socket is elsewhere) are not waited for.
 */
const expectsCallers = (state: HoldState, now: number) => {
  const { env, token } = state.grant
  if (env.returning.size > 0 && env.returning.has(token, now)) return true
  env.released.mark(token, now, now + comebackMs(env))
  return false
}

/**
 * How soon after a grant that did not linger a modification of its token must start here to
 * count as its caller coming back at once: two quanta (at least 2 ms), for the release's
 * round trip and the caller's next step.
 */
const comebackMs = (env: SessionEnv) => Math.max(2, 2 * env.quantumMs)

/**
 * A modification of `token` starts on this worker: after a grant of it that ended without
 * lingering, within `comebackMs`, its caller came back at once (`SessionEnv.returning`).
 *
 * @internal
 */
export const starting = (env: SessionEnv, token: string) => {
  if (env.released.size === 0) return
  const now = preciseMillis(env.clock)
  if (env.released.has(token, now)) env.returning.mark(token, now, now + env.holdMs)
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
 * lingers only for a token whose callers were seen to come back at once here lately
 * (`expectsCallers`): otherwise its write goes in its release (`ended`), and the worker
 * behind waits for one step of the store, not a write, a turn of the event loop and a
 * release. With nothing to write
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
