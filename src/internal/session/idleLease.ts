/**
 * A lease seen from outside its hold: the slice it caches (`cachedOf`), and a plain
 * modification made under an idle lease's grant in one step of the store (`idleLease`,
 * `servedInStep`).
 *
 * @internal
 */
import * as Option from "effect/Option"
import { preciseMillis } from "../timers.js"
import type { HoldState } from "./holdState.js"
import { idleAgainFrom, ParkedLease } from "./parking.js"
import { countServed } from "./relay.js"
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
 * made under its grant by its caller, in one step of the store (`modify.ts`), with no
 * step of the hold's fiber: the hold idle (its serving loop waiting for something to do, or
 * parked), with nothing queued, in progress or left to write, no signal to read, no
 * contention, and before its deadline. Made so, the modification is what the loop would
 * have served next, and the store holds what the hold's cache holds.
 *
 * @internal
 */
export const idleLease = (session: Session): HoldState | ParkedLease | undefined => {
  const lease = session.lease
  if (lease === undefined) return undefined
  if (lease instanceof ParkedLease) {
    if (session.parked !== lease || lease.dirty || (session.signals?.size ?? 0) > 0) return undefined
    if (lease.stepping !== undefined || lease.failed !== undefined) return undefined
    if (preciseMillis(lease.clock) >= lease.deadline) return undefined
    prune(session)
    return session.queue.length === 0 && session.callerGrant === undefined ? lease : undefined
  }
  const { turns, cache } = lease
  if (lease.idle.idleSince === undefined) return undefined
  // the hold's deadline is on the hold's clock
  const now = preciseMillis(lease.grant.clock)
  if (lease.failed !== undefined || lease.contention.contended) return undefined
  if (turns.inProgress !== undefined || turns.relayEnd !== undefined) return undefined
  if (cache.awaitingWrite.length > 0 || cache.owesWrites || (session.signals?.size ?? 0) > 0) return undefined
  if (now >= lease.timing.deadline) return undefined
  prune(session)
  return session.queue.length === 0 && session.callerGrant === undefined ? lease : undefined
}

/**
 * What a step of the store under an idle lease runs under (`Store.Stepping`'s `when`): the
 * lease's lock, and the claim of a lock handed over not yet extended.
 *
 * @internal
 */
export const holderOf = (lease: HoldState | ParkedLease) =>
  lease instanceof ParkedLease
    ? { lockId: lease.lockId, claim: lease.claim }
    : { lockId: lease.grant.lockId, claim: lease.timing.claim }

/**
 * The clock a lease's hold reads: its deadline is on it.
 *
 * @internal
 */
export const clockOf = (lease: HoldState | ParkedLease) =>
  lease instanceof ParkedLease ? lease.clock : lease.grant.clock

/**
 * A modification made under an idle lease's grant, in the store's step (`idleLease`): its
 * reads and writes taken into the hold's cache (in the step itself, so that nothing sees the
 * store and the cache apart), and counted as served; the idle wait goes on as from now, so a
 * busy lease does not park.
 *
 * @internal
 */
export const servedInStep = (
  lease: HoldState | ParkedLease,
  slices: ReadonlyArray<string>,
  values: ReadonlyArray<Option.Option<string>>,
  writes: ReadonlyArray<readonly [string, string]>,
  now: number
) => {
  if (lease instanceof ParkedLease) return lease.servedInStep(slices, values, writes, now)
  lease.cache.servedInStep(slices, values, writes)
  countServed(lease, now)
  idleAgainFrom(lease, now)
}
