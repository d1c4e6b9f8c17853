/**
 * Contention: whether another worker waits for the token, told by the token's notices (or
 * asked of the store after a resubscription), which cuts the hold to a quantum.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import { currentPreciseMillis } from "../timers.js"
import type { HoldState } from "./holdState.js"
import { leasesBroken } from "./metrics.js"
import { openSignals } from "./session.js"
import { cutDeadline } from "./timing.js"

/**
 * Another worker waits: the hold has a quantum left at most (`leasesBroken` counts the
 * leases so cut).
 *
 * @internal
 */
export const contend = (state: HoldState) =>
  Effect.flatMap(currentPreciseMillis, (now) =>
    Effect.suspend(() => {
      if (state.contention.contended) return Effect.void
      state.contention.contended = true
      const rearmed = cutDeadline(state, now + state.grant.env.quantumMs)
      return Effect.andThen(Metric.update(leasesBroken, 1), rearmed)
    })
  )

/**
 * A lease is told of contention by notices. Subscribed before the attempt that
 * granted it, it needs nothing more: the grant counted the workers queued before it,
 * and every later enqueue is a `Contended` notice on that subscription. A lease
 * granted first subscribes now and then asks the store once, for the workers queued
 * in between; it does so once the requests queued at its grant are served, or
 * before a second one, so that the first is not kept waiting for it.
 *
 * @internal
 */
export const watchContention = (state: HoldState) =>
  Effect.gen(function* () {
    const { env, session, token } = state.grant
    state.contention.watching = true
    const events = yield* openSignals(env, session)
    // what came before the check is covered by it
    events.take()
    if ((yield* env.store.queueLength(token, env.instanceId)) > 0) yield* contend(state)
  })

/** After a resubscription a contender may have queued unseen: ask the store. */
const recheckContenders = (state: HoldState) => {
  const { env, token } = state.grant
  return Effect.flatMap(
    Effect.orElseSucceed(env.store.queueLength(token, env.instanceId), () => 1),
    (n) => (n > 0 ? contend(state) : Effect.void)
  )
}

/**
 * Between two modifications: has another worker queued meanwhile?
 *
 * @internal
 */
export const checkSignals = (state: HoldState) =>
  Effect.suspend(() => {
    const events = state.grant.session.signals
    if (events === undefined || state.contention.contended) return Effect.void
    let resubscribed = false
    for (const event of events.take()) {
      // notices reach this worker only: a `Contended` one says another worker queued
      if (event._tag === "Contended") return contend(state)
      if (event._tag === "Resubscribed") resubscribed = true
    }
    return resubscribed ? recheckContenders(state) : Effect.void
  })
