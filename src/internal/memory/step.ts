/**
 * The embedded store's one step of a whole modification (`Store.Stepping`), which has no
 * Lua: Redis cannot run the caller's function inside a script. The step reads the
 * slices (refreshing their TTLs), runs `decide` on them and writes what it returns, in one
 * synchronous block, under one of two grants:
 *
 * - a grant of its own, when the lock is free and nobody is queued: the fence incremented
 *   (as `acquireQueued` increments it), and since nobody can see the lock taken, no lock
 *   key written and no notice sent (the release that would follow has nothing to hand on);
 * - the grant of a `holder`, when its lock id holds the lock (or takes it back by its
 *   claim, as `writeIfHolder` does): the fence as it stands.
 *
 * What to run under is asked of the caller (`when`) inside the step, so that what it looks
 * at (its own state) cannot change before the step is made; what was written is told to it
 * (`written`) in the step too. When the caller asks for nothing, the step does nothing.
 * Otherwise, when the grant cannot be had, it changes only what every step would: on the
 * way of its own grant, the late queue entries leave and a free lock with workers queued
 * goes to the head (as `acquireQueued` would grant it); and it answers `false`: the caller
 * goes the way of the queue.
 *
 * As in the operations' steps, everything that can refuse the step (a fence that is not an integer, a
 * slice key of another kind) is read before anything is written. `decide` must not throw:
 * if it does, nothing is written (a grant of its own has taken its fence), and the throw
 * is the caller's defect.
 *
 * @internal
 */
import * as Option from "effect/Option"
import type { SliceEntry } from "../../Store.js"
import type { NoticeMessages } from "../store/driver.js"
import { freeForAll } from "./queue.js"
import { holderOrClaim, NotAnInteger, readAndRefresh, readFence, type Space, writeSlices } from "./space.js"

/** @internal */
export type Decide = (values: ReadonlyArray<Option.Option<string>>, fence: number) => ReadonlyArray<SliceEntry>

/** The grant a step runs under when it is not one of its own: a holder's lock id, and its claim. @internal */
export interface Holder {
  readonly lockId: string
  readonly claim?: number | undefined
}

/**
 * What the caller asks for, looked at first, inside the step: `undefined` to do nothing (the
 * step answers `false`), `{}` for a grant of the step's own, or a holder's grant.
 *
 * @internal
 */
export type When = () => { readonly holder?: Holder | undefined } | undefined

/** @internal */
export const modifyInStep = (
  s: Space,
  now: number,
  token: string,
  slices: ReadonlyArray<string>,
  decide: Decide,
  options: {
    readonly when: When | undefined
    readonly written:
      | ((values: ReadonlyArray<Option.Option<string>>, entries: ReadonlyArray<SliceEntry>) => void)
      | undefined
    readonly notices: NoticeMessages
  }
): boolean => {
  const asked = options.when === undefined ? {} : options.when()
  if (asked === undefined) return false
  const holder = asked.holder
  const held = holder === undefined ? undefined : holderOrClaim(s, now, token, holder.lockId, holder.claim)
  if (holder === undefined ? !freeForAll(s, now, token, options.notices.granted, slices) : typeof held !== "string") {
    return false
  }
  const fence = readFence(s, token, now)
  if (fence === undefined) throw new NotAnInteger()
  const values = readAndRefresh(s, token, slices, now).map(Option.fromNullishOr)
  const granted = holder === undefined ? fence + 1 : fence
  if (holder === undefined) s.ks.setString(s.keys.fence(token), String(granted), now + s.tokenMs)
  const entries = decide(values, granted)
  if (entries.length > 0) writeSlices(s, token, entries, now)
  if (held === "reclaimed") s.ks.setString(s.keys.lock(token), holder!.lockId, now + s.lockMs)
  options.written?.(values, entries)
  return true
}
