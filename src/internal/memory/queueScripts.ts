/**
 * The twins of the queue scripts (`../redis/scripts/acquireQueued.ts`, `releaseQueued.ts`,
 * `commitAndReleaseQueued.ts`, `queue.ts`), last in `Scripts.all` and here in the same order,
 * and of the fragments they share (`queueLua.ts`), over the shared parts of `./scripts.ts`.
 *
 * The queue is two sets with a number per member, as on Redis: `queue` (arrival order, the
 * lowest first) and `deadlines`; a third, `ids`, holds `<worker> <lock id>` members (the lock
 * id each worker queued under). A twin reads all three (a key of another kind throws
 * `WrongTypeError` there) and the lock before it writes anything.
 *
 * @internal
 */

import { guardedReply } from "../operations/holderCheck.js"
import type * as AcquireQueued from "../redis/scripts/acquireQueued.js"
import type * as ReleaseQueued from "../redis/scripts/releaseQueued.js"
import type { Guarded, Handoff, NoticeMessages } from "../store/driver.js"
import { parseFence } from "../store/replies.js"
import type { SetEntry } from "./keyspace.js"
import {
  holderOrClaim,
  NotAnInteger,
  pttl,
  readAndRefresh,
  readFence,
  recordedId,
  type Space,
  writeSlices
} from "./space.js"

/** A token's queue as one step sees it. */
interface Queue {
  readonly s: Space
  readonly now: number
  readonly token: string
  readonly lockKey: string
  readonly orderKey: string
  readonly deadlineKey: string
  readonly idsKey: string
  order: SetEntry | undefined
  deadlines: SetEntry | undefined
  ids: SetEntry | undefined
}

/** The reads every step makes first (`findLate`): both sets, type-checked. */
const openQueue = (s: Space, now: number, token: string): Queue => {
  const orderKey = s.keys.queue(token)
  const deadlineKey = s.keys.queueDeadlines(token)
  const idsKey = s.keys.queueIds(token)
  return {
    s,
    now,
    token,
    lockKey: s.keys.lock(token),
    orderKey,
    deadlineKey,
    idsKey,
    order: s.ks.getSet(orderKey, now),
    deadlines: s.ks.getSet(deadlineKey, now),
    ids: s.ks.getSet(idsKey, now)
  }
}

/** `idOf`: the lock id the worker queued under, if recorded. */
const idOf = (q: Queue, worker: string): string | undefined => recordedId(q.ids, worker)

/** `forget`: the worker's lock id is dropped (the set deleted with its last member). */
const forget = (q: Queue, worker: string): void => {
  if (q.ids === undefined) return
  const head = `${worker} `
  for (const member of [...q.ids.members.keys()]) if (member.startsWith(head)) q.ids.members.delete(member)
  if (q.ids.members.size === 0) {
    q.s.ks.delete(q.idsKey)
    q.ids = undefined
  }
}

/** `pendingFor`: the lock's value is a grant the worker has not claimed. */
const pendingFor = (q: Queue, value: string | undefined, worker: string): boolean =>
  value !== undefined && (value === `?${worker}` || value === idOf(q, worker))

/** ZREM from both sets; a set left empty is deleted, as Redis deletes it. */
const remove = (q: Queue, member: string): void => {
  if (q.order !== undefined) {
    q.order.members.delete(member)
    if (q.order.members.size === 0) {
      q.s.ks.delete(q.orderKey)
      q.order = undefined
    }
  }
  if (q.deadlines !== undefined) {
    q.deadlines.members.delete(member)
    if (q.deadlines.members.size === 0) {
      q.s.ks.delete(q.deadlineKey)
      q.deadlines = undefined
    }
  }
}

/** `dropLate`: the entries whose deadline has passed leave the queue, their lock ids with them. */
const dropLate = (q: Queue): void => {
  const late = [...(q.deadlines?.members ?? [])].filter(([, deadline]) => deadline <= q.now)
  for (const [member] of late) {
    remove(q, member)
    forget(q, member)
  }
}

/** ZRANGE queue 0 -1: by score, then by member (as Redis orders equal scores). */
const ordered = (q: Queue): ReadonlyArray<string> =>
  [...(q.order?.members ?? [])]
    .sort(([a, x], [b, y]) => x - y || (a < b ? -1 : a > b ? 1 : 0))
    .map(([member]) => member)

/** `countQueued`: the live entries other than `instanceId`. */
const countQueued = (deadlines: SetEntry | undefined, instanceId: string, now: number): number => {
  let queued = 0
  for (const [member, deadline] of deadlines?.members ?? []) if (deadline > now && member !== instanceId) queued++
  return queued
}

/**
 * `enqueue`: a new member at the tail (or the head); its deadline `lockMs` from now, its lock
 * id `id` (none for ""), and the sets' deadlines at least as late (a set's deadline is only
 * ever moved later: a worker with a shorter lock expiration than another's must not cut the
 * other's entry short).
 */
const enqueue = (q: Queue, member: string, atHead: boolean, id: string): void => {
  const { ks, lockMs } = q.s
  if (q.order === undefined) {
    q.order = { _tag: "set", members: new Map(), deadline: undefined }
    ks.insert(q.orderKey, q.order)
  }
  if (q.deadlines === undefined) {
    q.deadlines = { _tag: "set", members: new Map(), deadline: undefined }
    ks.insert(q.deadlineKey, q.deadlines)
  }
  if (!q.order.members.has(member)) {
    const scores = [...q.order.members.values()]
    const score = scores.length === 0 ? 1 : atHead ? Math.min(...scores) - 1 : Math.max(...scores) + 1
    q.order.members.set(member, score)
  }
  const deadline = q.now + lockMs
  q.deadlines.members.set(member, deadline)
  forget(q, member)
  if (id !== "") {
    if (q.ids === undefined) {
      q.ids = { _tag: "set", members: new Map(), deadline: undefined }
      ks.insert(q.idsKey, q.ids)
    }
    q.ids.members.set(`${member} ${id}`, 0)
  }
  for (const [key, set] of [
    [q.orderKey, q.order],
    [q.deadlineKey, q.deadlines],
    [q.idsKey, q.ids]
  ] as const) {
    if (set === undefined) continue
    // a new set, without a deadline yet, as a new key's PTTL of -1
    if (set.deadline === undefined || set.deadline < deadline) ks.expire(key, set, deadline, q.now)
  }
}

/**
 * `fenceNow`: the fence as a grant names it, the string stored (`"0"` when there is none),
 * or `undefined` when it is not a canonical whole number (a key of another kind included:
 * it refuses nothing here).
 */
const fenceNow = (q: Queue): string | undefined => {
  const key = q.s.keys.fence(q.token)
  const entry = q.s.ks.get(key, q.now)
  if (entry === undefined) return "0"
  if (entry._tag !== "string") return undefined
  return parseFence(entry.value) === undefined ? undefined : entry.value
}

/**
 * `grantNext`: a free lock becomes the head's own, under the lock id it queued with (for the
 * hand-off timeout, the fence incremented), and the head alone is told, by
 * `granted <fence> <json>`: the workers still queued, the lock id, then the name and value
 * (`false`: none) of each slice of `carry` that reads as a string or nothing (its TTL
 * refreshed). A head queued without a lock id, or a fence that is not a number, gets a pending
 * grant (`?<worker>`) and `granted <fence>` (the fence as it stands), or `granted` alone.
 */
const grantNext = (q: Queue, granted: string, carry: ReadonlyArray<string>): void => {
  const { keys, ks } = q.s
  // EXISTS: a key of any kind
  if (ks.get(q.lockKey, q.now) !== undefined) return
  const head = ordered(q)[0]
  if (head === undefined) return
  const named = fenceNow(q)
  const id = idOf(q, head)
  remove(q, head)
  if (named === undefined || id === undefined) {
    ks.setString(q.lockKey, `?${head}`, q.now + q.s.handoffMs)
    q.s.publish(keys.workerNotices(head), named === undefined ? granted : `${granted} ${named}`)
    return
  }
  const fenced = Number(named) + 1
  ks.setString(keys.fence(q.token), String(fenced), q.now + q.s.tokenMs)
  ks.setString(q.lockKey, id, q.now + q.s.handoffMs)
  const carried: Array<string | number | false> = [q.order?.members.size ?? 0, id]
  for (const name of carry) {
    const key = keys.slice(q.token, name)
    const entry = ks.get(key, q.now)
    if (entry === undefined) carried.push(name, false)
    else if (entry._tag === "string") {
      ks.expire(key, entry, q.now + q.s.tokenMs, q.now)
      carried.push(name, entry.value)
    }
  }
  q.s.publish(keys.workerNotices(head), `${granted} ${fenced} ${JSON.stringify(carried)}`)
}

/** `noticeHolder`: the worker of the lock id holding the lock (before its last `:`) hears of the queue. */
const noticeHolder = (q: Queue, contended: string): void => {
  const holder = q.s.ks.getString(q.lockKey, q.now)?.value
  if (holder === undefined || holder.startsWith("?")) return
  const end = holder.lastIndexOf(":")
  if (end > 0) q.s.publish(q.s.keys.workerNotices(holder.slice(0, end)), contended)
}

// --- the twins, in the order of `Scripts.all` ---------------------------------------------

/** @internal */
export const acquireQueued = (
  s: Space,
  now: number,
  token: string,
  lockId: string,
  slices: ReadonlyArray<string>,
  instanceId: string,
  claim: number | undefined,
  notices: NoticeMessages
): AcquireQueued.Reply => {
  const q = openQueue(s, now, token)
  const value = s.ks.getString(q.lockKey, now)?.value
  dropLate(q)
  const head = ordered(q)[0]
  // the grant claimed is still the last one made: nobody has taken the lock since; or one
  // grant only came since, the one its expiry passed on
  const current = fenceNow(q)
  const claimed = claim !== undefined && current === String(claim)
  const passedOn = claim !== undefined && current !== undefined && Number(current) === claim + 1
  if (
    pendingFor(q, value, instanceId) ||
    (value === undefined && (head === undefined || head === instanceId || claimed))
  ) {
    // Read before anything is written: a fence or a slice that cannot be read refuses the step.
    const fence = readFence(s, token, now)
    if (fence === undefined) throw new NotAnInteger()
    const values = readAndRefresh(s, token, slices, now)
    // a grant handed over to this worker took its fence already: taking it over keeps it
    const next = value !== undefined && value !== `?${instanceId}` && fence > 0 ? fence : fence + 1
    s.ks.setString(q.lockKey, lockId, now + s.lockMs)
    s.ks.setString(s.keys.fence(token), String(next), now + s.tokenMs)
    remove(q, instanceId)
    forget(q, instanceId)
    return { _tag: "Acquired", fence: next, queued: q.order?.members.size ?? 0, values }
  }
  if (value === undefined) grantNext(q, notices.granted, slices)
  enqueue(q, instanceId, claimed || (passedOn && s.ks.get(q.lockKey, now) !== undefined), lockId)
  noticeHolder(q, notices.contended)
  const lock = s.ks.getString(q.lockKey, now)
  return { _tag: "Queued", pttl: lock === undefined ? -2 : pttl(lock, now) }
}

/** @internal */
export const releaseQueued = (
  s: Space,
  now: number,
  token: string,
  lockId: string,
  instanceId: string,
  handoff: Handoff,
  notices: NoticeMessages
): ReleaseQueued.Reply => {
  const q = openQueue(s, now, token)
  const value = s.ks.getString(q.lockKey, now)?.value
  const queued = countQueued(q.deadlines, instanceId, now)
  dropLate(q)
  const released = value === lockId
  if (released) s.ks.delete(q.lockKey)
  passOn(q, lockId, instanceId, handoff, notices, [])
  return { released, queued }
}

/** The end of a release: the worker's lock id forgotten, its requeue, the grant to the head. */
const passOn = (
  q: Queue,
  lockId: string,
  instanceId: string,
  handoff: Handoff,
  notices: NoticeMessages,
  written: ReadonlyArray<string>
): void => {
  if (idOf(q, instanceId) === lockId) forget(q, instanceId)
  if (handoff.requeue) enqueue(q, instanceId, false, handoff.queueAs)
  const carry =
    written.length === 0 ? handoff.carry : [...written, ...handoff.carry.filter((name) => !written.includes(name))]
  grantNext(q, notices.granted, carry)
}

/** @internal */
export const commitAndReleaseQueued = (
  s: Space,
  now: number,
  token: string,
  lockId: string,
  entries: ReadonlyArray<readonly [string, string]>,
  instanceId: string,
  handoff: Handoff,
  claim: number | undefined,
  notices: NoticeMessages
): Guarded<number> => {
  const holder = holderOrClaim(s, now, token, lockId, claim)
  if (typeof holder !== "string") return guardedReply(holder) as Guarded<never>
  const q = openQueue(s, now, token)
  const queued = countQueued(q.deadlines, instanceId, now)
  writeSlices(s, token, entries, now)
  dropLate(q)
  s.ks.delete(q.lockKey)
  passOn(
    q,
    lockId,
    instanceId,
    handoff,
    notices,
    entries.map(([name]) => name)
  )
  return { _tag: "Done", value: queued }
}

/** @internal */
export const leaveQueue = (
  s: Space,
  now: number,
  token: string,
  instanceId: string,
  lockId: string | undefined,
  notices: NoticeMessages
): void => {
  const q = openQueue(s, now, token)
  const value = s.ks.getString(q.lockKey, now)?.value
  dropLate(q)
  const recorded = idOf(q, instanceId)
  if (lockId === undefined || recorded === undefined || recorded === lockId) {
    remove(q, instanceId)
    forget(q, instanceId)
  }
  if (value !== undefined && (value === `?${instanceId}` || value === (lockId ?? recorded))) {
    s.ks.delete(q.lockKey)
  }
  grantNext(q, notices.granted, [])
}

/** Reads only. @internal */
export const queueLength = (s: Space, now: number, token: string, instanceId: string): number =>
  countQueued(s.ks.getSet(s.keys.queueDeadlines(token), now), instanceId, now)

/** The live entries, head first. Reads only. @internal */
export const queue = (s: Space, now: number, token: string): ReadonlyArray<string> => {
  const q = openQueue(s, now, token)
  return ordered(q).filter((member) => (q.deadlines?.members.get(member) ?? now) > now)
}

/**
 * Whether any worker could take the token's lock now: no lock key of any kind (not held,
 * no grant pending) and nobody queued once the late entries have left (dropped here, as
 * every step drops them). A free lock with workers queued goes to the head, as in every
 * step (`grantNext`, its notice carrying `carry`). For the embedded store's own step
 * (`./step.ts`), which has no twin. @internal
 */
export const freeForAll = (
  s: Space,
  now: number,
  token: string,
  granted: string,
  carry: ReadonlyArray<string>
): boolean => {
  const q = openQueue(s, now, token)
  if (s.ks.get(q.lockKey, now) !== undefined) return false
  if (q.order === undefined && q.deadlines === undefined) return true
  dropLate(q)
  if (ordered(q)[0] === undefined) return true
  grantNext(q, granted, carry)
  return false
}
