/**
 * A token's queue on the embedded store: the steps of the Lua fragments the queue operations
 * share (`../operations/queueLua.ts`), each under the fragment's name, for the operations'
 * `memory` (`../operations/acquireQueued.ts`, `releaseQueued.ts`, `queue.ts`), over the
 * shared parts of `./space.ts`.
 *
 * The queue is two sets with a number per member, as on Redis: `queue` (arrival order, the
 * lowest first) and `deadlines`; a third, `ids`, holds `<worker> <lock id>` members (the lock
 * id each worker queued under). A step reads all three (a key of another kind throws
 * `WrongTypeError` there) and the lock before it writes anything.
 *
 * @internal
 */

import type { Handoff } from "../store/driver.js"
import { parseFence } from "../store/replies.js"
import type { SetEntry } from "./keyspace.js"
import { recordedId, type Space } from "./space.js"

/** A token's queue as one step sees it. @internal */
export interface Queue {
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
export const openQueue = (s: Space, now: number, token: string): Queue => {
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
export const idOf = (q: Queue, worker: string): string | undefined => recordedId(q.ids, worker)

/** `forget`: the worker's lock id is dropped (the set deleted with its last member). */
export const forget = (q: Queue, worker: string): void => {
  if (q.ids === undefined) return
  const head = `${worker} `
  for (const member of [...q.ids.members.keys()]) if (member.startsWith(head)) q.ids.members.delete(member)
  if (q.ids.members.size === 0) {
    q.s.ks.delete(q.idsKey)
    q.ids = undefined
  }
}

/** `pendingFor`: the lock's value is a grant the worker has not claimed. */
export const pendingFor = (q: Queue, value: string | undefined, worker: string): boolean =>
  value !== undefined && (value === `?${worker}` || value === idOf(q, worker))

/** ZREM from both sets; a set left empty is deleted, as Redis deletes it. */
export const remove = (q: Queue, member: string): void => {
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
export const dropLate = (q: Queue): void => {
  const late = [...(q.deadlines?.members ?? [])].filter(([, deadline]) => deadline <= q.now)
  for (const [member] of late) {
    remove(q, member)
    forget(q, member)
  }
}

/** ZRANGE queue 0 -1: by score, then by member (as Redis orders equal scores). */
export const ordered = (q: Queue): ReadonlyArray<string> =>
  [...(q.order?.members ?? [])]
    .sort(([a, x], [b, y]) => x - y || (a < b ? -1 : a > b ? 1 : 0))
    .map(([member]) => member)

/** `countQueued`: the live entries other than `instanceId`. */
export const countQueued = (deadlines: SetEntry | undefined, instanceId: string, now: number): number => {
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
export const enqueue = (q: Queue, member: string, atHead: boolean, id: string): void => {
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
export const fenceNow = (q: Queue): string | undefined => {
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
export const grantNext = (q: Queue, granted: string, carry: ReadonlyArray<string>): void => {
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
export const noticeHolder = (q: Queue, contended: string): void => {
  const holder = q.s.ks.getString(q.lockKey, q.now)?.value
  if (holder === undefined || holder.startsWith("?")) return
  const end = holder.lastIndexOf(":")
  if (end > 0) q.s.publish(q.s.keys.workerNotices(holder.slice(0, end)), contended)
}

/** The end of a release: the worker's lock id forgotten, its requeue, the grant to the head. @internal */
export const passOn = (
  q: Queue,
  lockId: string,
  instanceId: string,
  handoff: Handoff,
  granted: string,
  written: ReadonlyArray<string>
): void => {
  if (idOf(q, instanceId) === lockId) forget(q, instanceId)
  if (handoff.requeue) enqueue(q, instanceId, false, handoff.queueAs)
  const carry =
    written.length === 0 ? handoff.carry : [...written, ...handoff.carry.filter((name) => !written.includes(name))]
  grantNext(q, granted, carry)
}

/**
 * Whether any worker could take the token's lock now: no lock key of any kind (not held,
 * no grant pending) and nobody queued once the late entries have left (dropped here, as
 * every step drops them). A free lock with workers queued goes to the head, as in every
 * step (`grantNext`, its notice carrying `carry`). For the embedded store's own step
 * (`./step.ts`), which has no Lua. @internal
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
