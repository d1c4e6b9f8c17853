/**
 * The twins of the queue scripts (`../redis/scripts/acquireQueued.ts`, `releaseQueued.ts`,
 * `commitAndReleaseQueued.ts`, `queue.ts`), last in `Scripts.all` and here in the same order,
 * and of the fragments they share (`queueLua.ts`), over the shared parts of `./scripts.ts`.
 *
 * The queue is two sets with a number per member, as on Redis: `queue` (arrival order, the
 * lowest first) and `deadlines`. A twin reads both (a key of another kind throws
 * `WrongTypeError` there) and the lock before it writes anything.
 *
 * @internal
 */
import type * as AcquireQueued from "../redis/scripts/acquireQueued.js"
import type * as ReleaseQueued from "../redis/scripts/releaseQueued.js"
import type { Guarded, NoticeMessages } from "../store/driver.js"
import { parseFence } from "../store/replies.js"
import type { SetEntry } from "./keyspace.js"
import { lost, NotAnInteger, pttl, readAndRefresh, readFence, type Space, writeSlices } from "./scripts.js"

/** A token's queue as one step sees it. */
interface Queue {
  readonly s: Space
  readonly now: number
  readonly token: string
  readonly lockKey: string
  readonly orderKey: string
  readonly deadlineKey: string
  order: SetEntry | undefined
  deadlines: SetEntry | undefined
}

/** The reads every step makes first (`findLate`): both sets, type-checked. */
const openQueue = (s: Space, now: number, token: string): Queue => {
  const orderKey = s.keys.queue(token)
  const deadlineKey = s.keys.queueDeadlines(token)
  return {
    s,
    now,
    token,
    lockKey: s.keys.lock(token),
    orderKey,
    deadlineKey,
    order: s.ks.getSet(orderKey, now),
    deadlines: s.ks.getSet(deadlineKey, now)
  }
}

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

/** `dropLate`: the entries whose deadline has passed leave both sets. */
const dropLate = (q: Queue): void => {
  const late = [...(q.deadlines?.members ?? [])].filter(([, deadline]) => deadline <= q.now)
  for (const [member] of late) remove(q, member)
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
 * `enqueue`: a new member at the tail (or the head); its deadline `lockMs` from now, and both
 * sets' at least as late (a set's deadline is only ever moved later: a worker with a shorter
 * lock expiration than another's must not cut the other's entry short).
 */
const enqueue = (q: Queue, member: string, atHead: boolean): void => {
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
  for (const [key, set] of [
    [q.orderKey, q.order],
    [q.deadlineKey, q.deadlines]
  ] as const) {
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
 * `grantNext`: a free lock becomes the head's pending grant, and the head alone is told, by
 * `granted <fence>` (the fence as it stands: the notice names the grant), or by `granted`
 * alone when the fence is not a number.
 */
const grantNext = (q: Queue, granted: string): void => {
  const { keys, ks } = q.s
  // EXISTS: a key of any kind
  if (ks.get(q.lockKey, q.now) !== undefined) return
  const head = ordered(q)[0]
  if (head === undefined) return
  const named = fenceNow(q)
  remove(q, head)
  ks.setString(q.lockKey, `?${head}`, q.now + q.s.handoffMs)
  q.s.publish(keys.workerNotices(head), named === undefined ? granted : `${granted} ${named}`)
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
  // the grant claimed is still the last one made: nobody has claimed since
  const claimed = claim !== undefined && fenceNow(q) === String(claim)
  if (value === `?${instanceId}` || (value === undefined && (head === undefined || head === instanceId || claimed))) {
    // Read before anything is written: a fence or a slice that cannot be read refuses the step.
    const fence = readFence(s, token, now)
    if (fence === undefined) throw new NotAnInteger()
    const values = readAndRefresh(s, token, slices, now)
    s.ks.setString(q.lockKey, lockId, now + s.lockMs)
    s.ks.setString(s.keys.fence(token), String(fence + 1), now + s.tokenMs)
    remove(q, instanceId)
    return { _tag: "Acquired", fence: fence + 1, queued: q.order?.members.size ?? 0, values }
  }
  if (value === undefined) grantNext(q, notices.granted)
  enqueue(q, instanceId, claimed)
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
  requeue: boolean,
  notices: NoticeMessages
): ReleaseQueued.Reply => {
  const q = openQueue(s, now, token)
  const value = s.ks.getString(q.lockKey, now)?.value
  const queued = countQueued(q.deadlines, instanceId, now)
  dropLate(q)
  const released = value === lockId
  if (released) s.ks.delete(q.lockKey)
  if (requeue) enqueue(q, instanceId, false)
  grantNext(q, notices.granted)
  return { released, queued }
}

/** @internal */
export const commitAndReleaseQueued = (
  s: Space,
  now: number,
  token: string,
  lockId: string,
  entries: ReadonlyArray<readonly [string, string]>,
  instanceId: string,
  requeue: boolean,
  notices: NoticeMessages
): Guarded<number> => {
  const lock = s.ks.getString(s.keys.lock(token), now)
  if (lock?.value !== lockId) return lost(lock)
  const q = openQueue(s, now, token)
  const queued = countQueued(q.deadlines, instanceId, now)
  writeSlices(s, token, entries, now)
  dropLate(q)
  s.ks.delete(q.lockKey)
  if (requeue) enqueue(q, instanceId, false)
  grantNext(q, notices.granted)
  return { _tag: "Done", value: queued }
}

/** @internal */
export const leaveQueue = (s: Space, now: number, token: string, instanceId: string, notices: NoticeMessages): void => {
  const q = openQueue(s, now, token)
  const value = s.ks.getString(q.lockKey, now)?.value
  dropLate(q)
  remove(q, instanceId)
  if (value === `?${instanceId}`) s.ks.delete(q.lockKey)
  grantNext(q, notices.granted)
}

/** Reads only. @internal */
export const queueLength = (s: Space, now: number, token: string, instanceId: string): number =>
  countQueued(s.ks.getSet(s.keys.queueDeadlines(token), now), instanceId, now)

/** The live entries, head first. Reads only. @internal */
export const queue = (s: Space, now: number, token: string): ReadonlyArray<string> => {
  const q = openQueue(s, now, token)
  return ordered(q).filter((member) => (q.deadlines?.members.get(member) ?? now) > now)
}
