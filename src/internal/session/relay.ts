/**
 * The hold's turns (`HoldState.turns`), and their relay: the caller whose turn ends hands
 * the grant to the next request queued here, in its own call stack, while the serving loop
 * of `hold.ts` would serve that request from memory at once.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { Turn } from "../lease.js"
import { OneShot } from "../oneShot.js"
import { preciseMillis } from "../timers.js"
import { warnHeld } from "./commit.js"
import type { HoldState } from "./holdState.js"
import { type Outcome, prune, type Request } from "./session.js"

/** @internal */
export const nextRequest = (state: HoldState) => {
  prune(state.grant.session)
  return state.grant.session.queue[0]
}

/**
 * Give `request` its turn (taken off the queue only now: after a failed read it waits for
 * the next grant, or fails with the store's error, instead of waiting for a turn nobody
 * gives). `false` for a request cancelled meanwhile.
 */
const giveTurn = (state: HoldState, request: Request, now: number): boolean => {
  const { session } = state.grant
  const { turns, cache } = state
  if (session.queue[0] === request) session.queue.shift()
  if (request.cancelled) return false
  turns.inProgress = request
  turns.turnAt = now
  countServed(state, now)
  const turn: Turn = {
    values: new Map(request.slices.map((name) => [name, cache.get(name) ?? Option.none()])),
    fence: state.grant.fence
  }
  // a plain function is decided here and now: its caller waits for the outcome alone
  if (request.decideOnTurn !== undefined) request.done.done(Exit.succeed(request.decideOnTurn(turn)))
  else request.turn.done(Exit.succeed(turn))
  return true
}

/** What the caller decided, taken into the hold: its writes, and its acknowledgement (now, or once written). */
const record = (state: HoldState, request: Request, outcome: Outcome, now: number) => {
  const heldMs = now - state.turns.turnAt
  if (heldMs > state.grant.env.warnMs) state.turns.longHolds.push([request, heldMs])
  if (outcome._tag === "Abort") state.cache.unwritten(request)
  else state.cache.served(request, outcome.writes, state.policy.acknowledgesFromMemory(state.grant.env))
}

/**
 * The next request the relay may give its turn to at once, without the fiber: the
 * conditions under which the serving loop would serve it from memory straight away.
 * `undefined` when the loop has something else to do first (a signal to read, a write
 * or a turn of the event loop due, the deadline, a slice to read, nothing queued).
 */
const relayNext = (state: HoldState, now: number): Request | undefined => {
  const {
    grant: { env, session },
    policy
  } = state
  if (state.failed !== undefined || policy.servesOneTurn) return undefined
  const watches = policy.watchesNotices
  if (watches && !state.contention.contended && (session.signals?.size ?? 0) > 0) return undefined
  if (now - state.turns.ioAt >= env.yieldMs || now >= state.timing.deadline) return undefined
  const request = nextRequest(state)
  if (request === undefined || (watches && !state.contention.watching)) return undefined
  for (const name of request.slices) if (!state.cache.has(name)) return undefined
  return request
}

/**
 * A relay of turns: the caller whose turn ends hands the grant to the next request queued
 * here, in its own call stack (`OneShot.listen`), with no step of the hold's fiber in
 * between; a request decided at once (`decideOnTurn`) hands it on in the same loop. The
 * fiber, waiting on `relayEnd`, resumes once the relay can go no further (`false` when
 * that is at once). An interrupted fiber ends the relay first (`finish` takes the turn in
 * progress over).
 */
export const relay = (state: HoldState, first: Request, now: number): boolean => {
  let request: Request | undefined = first
  let at = now
  while (request !== undefined) {
    if (giveTurn(state, request, at)) {
      const decided = request.done.poll()
      if (decided === undefined) {
        listenForTurnEnd(state, request)
        return true
      }
      state.turns.inProgress = undefined
      at = preciseMillis(state.grant.clock)
      if (Exit.isSuccess(decided)) record(state, request, decided.value, at)
    }
    request = relayNext(state, at)
  }
  return false
}

const listenForTurnEnd = (state: HoldState, request: Request) =>
  request.done.listen((exit) => {
    const end = state.turns.relayEnd
    if (state.turns.inProgress !== request || end === undefined) return
    state.turns.inProgress = undefined
    const at = preciseMillis(state.grant.clock)
    if (Exit.isSuccess(exit)) record(state, request, exit.value, at)
    const next = relayNext(state, at)
    if (next === undefined || !relay(state, next, at)) end.done(Exit.void)
  })

/**
 * Serve `request` and, through the relay, the requests queued behind it that memory can
 * serve (its slices cached); then the warnings of the modifications that held the lock too
 * long in the relay.
 *
 * @internal
 */
export const relayFrom = (state: HoldState, request: Request): Effect.Effect<void> =>
  Effect.suspend(() => {
    const end = new OneShot<void>()
    state.turns.relayEnd = end
    const relayed = relay(state, request, preciseMillis(state.grant.clock))
    return relayed
      ? Effect.andThen(
          end.await,
          Effect.suspend(() => afterRelay(state))
        )
      : afterRelay(state)
  })

/** The relay has ended: the warnings of the modifications that held the lock too long in it. */
const afterRelay = (state: HoldState): Effect.Effect<void> => {
  const { turns } = state
  turns.relayEnd = undefined
  const longHolds = turns.longHolds
  if (longHolds.length === 0) return Effect.void
  turns.longHolds = []
  const { env, token } = state.grant
  return Effect.forEach(longHolds, ([held, heldMs]) => warnHeld(env, token, held.event, heldMs), { discard: true })
}

/**
 * The hold ends: the relay with it, and the turn in progress, if any, is the end's to take
 * over (to wait for its outcome and write it).
 *
 * @internal
 */
export const takeOverTurn = (state: HoldState): Request | undefined => {
  const { turns } = state
  turns.relayEnd = undefined
  const inProgress = turns.inProgress
  turns.inProgress = undefined
  return inProgress
}

/**
 * A modification served at `now` (by a turn, or in one step of the store under the lease).
 *
 * @internal
 */
export const countServed = (state: HoldState, now: number) => {
  state.turns.served++
  state.turns.servedAt = now
}

/**
 * The serving has just waited for the store or the event loop: what arrived meanwhile
 * (a contender's signal) has been read, and the relay may go on for another `yieldMs`.
 *
 * @internal
 */
export const waitedForIo = (state: HoldState) => {
  state.turns.ioAt = preciseMillis(state.grant.clock)
}
