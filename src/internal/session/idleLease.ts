/**
 * A lease seen from outside its hold: the slice it caches (`cachedOf`), and a plain
 * modification made under an idle lease's grant in one step of the store (`idleLease`,
 * `servedInStep`).
 *
 * @internal
 */
import * as Option from "effect/Option"
import { fineMillis } from "../timers.js"
import type { HoldState } from "./holdState.js"
import { ParkedLease } from "./parking.js"
import { prune, type Session } from "./session.js"

/**
 * The encoded slice under a lease (`Lease.Service.cached`): `None` when the lease has none.
 *
 * @internal
 */
export const cachedOf = (lease: HoldState | ParkedLease, slice: string): Option.Option<Option.Option<string>> => {
  if (lease instanceof ParkedLease) {
    const i = lease.indexOf(slice)
    if (i < 0) return Option.none()
    const value = lease.slices[i + 1] as string | undefined
    return Option.some(value === undefined ? Option.none() : Option.some(value))
  }
  const value = lease.cache.get(slice)
  return value === undefined ? Option.none() : Option.some(value)
}

/**
 * The hold of this worker's lease on the session's token, when a plain modification may be
 * made under its grant by its caller, in one step of the store (`caller.inStep`), with no
 * step of the hold's fiber: the hold idle (its serving loop waiting for something to do, or
 * parked), with nothing queued, in progress or left to write, no signal to read, no
 * contention, and before its deadline. Made so, the modification is what the loop would
 * have served next, and the store holds what the hold's cache holds.
 *
 * @internal
 */
export const idleLease = (session: Session): HoldState | ParkedLease | undefined => {
  const state = session.lease
  if (state === undefined) return undefined
  if (state instanceof ParkedLease) {
    if (session.parked !== state || state.dirty || (session.signals?.size ?? 0) > 0) return undefined
    if (fineMillis(state.clock) >= state.deadline) return undefined
    prune(session)
    return session.queue.length === 0 && session.own === undefined ? state : undefined
  }
  if (state.idleSince === undefined) return undefined
  // the hold's deadline is on the hold's clock
  const now = fineMillis(state.clock)
  if (state.failed !== undefined || state.contended || state.inProgress !== undefined || state.relayEnd !== undefined) {
    return undefined
  }
  if (state.unacked.length > 0 || state.dirty.size > 0 || (session.signals?.size ?? 0) > 0 || now >= state.deadline) {
    return undefined
  }
  prune(session)
  return session.queue.length === 0 && session.own === undefined ? state : undefined
}

/**
 * A modification made under an idle lease's grant, in the store's step (`idleLease`): its
 * reads and writes taken into the hold's cache (in the step itself, so that nothing sees the
 * store and the cache apart), and counted as served; the idle wait goes on as from now, so a
 * busy lease does not park.
 *
 * @internal
 */
export const servedInStep = (
  state: HoldState | ParkedLease,
  slices: ReadonlyArray<string>,
  values: ReadonlyArray<Option.Option<string>>,
  writes: ReadonlyArray<readonly [string, string]>,
  now: number
) => {
  if (state instanceof ParkedLease) {
    const parked = state.slices
    for (let i = 0; i < slices.length; i++) {
      if (state.indexOf(slices[i]!) < 0) parked.push(slices[i]!, Option.getOrUndefined(values[i]!), false)
    }
    for (const [name, value] of writes) {
      const i = state.indexOf(name)
      if (i < 0) parked.push(name, value, false)
      else parked[i + 1] = value
    }
    state.served++
    state.servedAt = now
    return
  }
  const { cache } = state
  for (let i = 0; i < slices.length; i++) if (!cache.has(slices[i]!)) cache.set(slices[i]!, values[i]!)
  for (const [name, value] of writes) cache.set(name, Option.some(value))
  state.served++
  state.servedAt = now
  if (state.idleSince !== undefined) state.idleSince = now
}
