/**
 * The relay of a hold's turns: the caller whose turn ends hands the grant to the next request queued here, in its own call stack, while the
 * serving loop of `hold.ts` would serve that request from memory at once.
 *
 * @internal
 */
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { Outcome, Request, Turn } from "../lease.js"
import { fineMillis } from "../timers.js"
import type { HoldState } from "./holdState.js"
import { prune } from "./session.js"

/** @internal */
export const nextRequest = (state: HoldState) => {
  prune(state.session)
  return state.session.queue[0]
}

/**
 * Give `request` its turn (taken off the queue only now: after a failed read it waits for
 * the next grant, or fails with the store's error, instead of waiting for a turn nobody
 * gives). `false` for a request cancelled meanwhile.
 */
const giveTurn = (state: HoldState, request: Request, now: number): boolean => {
  const { session, cache } = state
  if (session.queue[0] === request) session.queue.shift()
  if (request.cancelled) return false
  state.inProgress = request
  state.turnAt = now
  state.servedAt = now
  state.served++
  const turn: Turn = {
    values: new Map(request.slices.map((name) => [name, cache.get(name) ?? Option.none()])),
    fence: state.fence
  }
  // a plain function is decided here and now: its caller waits for the outcome alone
  if (request.decideNow !== undefined) request.done.done(Exit.succeed(request.decideNow(turn)))
  else request.turn.done(Exit.succeed(turn))
  return true
}

/** What the caller decided, taken into the hold: its writes, and its acknowledgement (now, or once written). */
const record = (state: HoldState, request: Request, outcome: Outcome, now: number) => {
  const heldMs = now - state.turnAt
  if (heldMs > state.env.warnMs) state.longHolds.push([request, heldMs])
  if (outcome._tag === "Abort") return unwritten(state, request)
  for (const [name, value] of outcome.writes) {
    state.cache.set(name, Option.some(value))
    state.dirty.set(name, value)
  }
  if (state.policy.acknowledgesFromMemory(state.env)) request.ack.done(Exit.void)
  else state.unacked.push(request)
}

/**
 * A modification that writes nothing, acknowledged: at once, or, when it read a slice the
 * hold owes a write of while writes wait for their acknowledgement, with them, by the group
 * commit that makes them. `dirty` holds every write not yet made, those of `unacked` among
 * them (a group commit takes both at once), so a modification that read none of its slices
 * (`Lock.withLock` reads none) read nothing unacknowledged and does not wait.
 *
 * @internal
 */
export const unwritten = (state: HoldState, request: Request) => {
  if (state.unacked.length > 0 && readsDirty(state, request)) state.unacked.push(request)
  else request.ack.done(Exit.void)
}

const readsDirty = (state: HoldState, request: Request): boolean => {
  for (const name of request.slices) if (state.dirty.has(name)) return true
  return false
}

/**
 * The next request the relay may give its turn to at once, without the fiber: the
 * conditions under which the serving loop would serve it from memory straight away.
 * `undefined` when the loop has something else to do first (a signal to read, a write
 * or a turn of the event loop due, the deadline, a slice to read, nothing queued).
 */
const relayNext = (state: HoldState, now: number): Request | undefined => {
  const { env, session, policy } = state
  if (state.failed !== undefined || policy.servesOneTurn) return undefined
  const watches = policy.watchesNotices
  if (watches && !state.contended && (session.signals?.size ?? 0) > 0) return undefined
  if (now - state.ioAt >= env.yieldMs || now >= state.deadline) return undefined
  const request = nextRequest(state)
  if (request === undefined || (watches && !state.watching)) return undefined
  for (const name of request.slices) if (!state.cache.has(name)) return undefined
  return request
}

/**
 * A relay of turns: the caller whose turn ends hands the grant to the next request queued
 * here, in its own call stack (`OneShot.listen`), with no step of the hold's fiber in
 * between; a request decided at once (`decideNow`) hands it on in the same loop. The
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
      state.inProgress = undefined
      at = fineMillis(state.clock)
      if (Exit.isSuccess(decided)) record(state, request, decided.value, at)
    }
    request = relayNext(state, at)
  }
  return false
}

const listenForTurnEnd = (state: HoldState, request: Request) =>
  request.done.listen((exit) => {
    const end = state.relayEnd
    if (state.inProgress !== request || end === undefined) return
    state.inProgress = undefined
    const at = fineMillis(state.clock)
    if (Exit.isSuccess(exit)) record(state, request, exit.value, at)
    const next = relayNext(state, at)
    if (next === undefined || !relay(state, next, at)) end.done(Exit.void)
  })
