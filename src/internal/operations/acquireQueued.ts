/**
 * `acquireQueued` (docs/design.md#the-fast-path, #the-claim): take the lock when it is a grant
 * pending for this worker (a `?<worker>` grant, or the lock id the worker was queued under, which a
 * grant installs with its fence taken: its notice was lost or is late, and this attempt takes it
 * over with the same fence), or when it is free and nobody else is queued ahead (the queue is
 * empty, its head is this worker, or a claim of a grant that expired unclaimed: `claim` equals the
 * fence, which has not moved since that grant was made). Taking sets the lock id, reads the slices,
 * increments the fence (but for a take-over) and takes the worker out of the queue. Otherwise a
 * free lock goes to the queue's head (its notice carrying the slices named here), and the worker is
 * queued under `lockId` (once: at the head for a claim that still names the fence, or names the one
 * before it while the lock is held, which is the grant its expiry passed on; else at the tail), its
 * deadline refreshed, and the lock's holder told again. A claim whose fence has moved on further is
 * an ordinary attempt.
 *
 * Redis does not roll back a script that fails half-way: a read that fails (a slice key of
 * the wrong type) deletes the lock it just set, as `tryAcquire` does.
 *
 * @internal
 */

import type { QueuedAcquireResult } from "../../Store.js"
import { StoreRefused } from "../../StoreError.js"
import {
  dropLate as dropLateSteps,
  enqueue as enqueueSteps,
  fenceNow as fenceNowSteps,
  forget as forgetSteps,
  grantNext as grantNextSteps,
  noticeHolder as noticeHolderSteps,
  openQueue,
  ordered,
  pendingFor as pendingForSteps,
  remove
} from "../memory/queue.js"
import { NotAnInteger, pttl, readAndRefresh, readFence } from "../memory/space.js"
import { asArray, asNullableString, asNumber, claimArg } from "../redis/script.js"
import type { NoticeMessages } from "../store/driver.js"
import { queuedAcquireResult } from "../store/replies.js"
import { claimError } from "../validate.js"
import { describeAcknowledged } from "./operation.js"
import { queueKeys, queueStepError } from "./queueKeys.js"
import { dropLate, enqueue, findLate, grantNext, ids, noticeHolder, pendingFor, serverNow } from "./queueLua.js"
import { granted as grantedReply } from "./wrote.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly slices: ReadonlyArray<string>
  readonly instanceId: string
  /** The fence of the grant claimed (a `Granted` notice's), or `undefined` for none. */
  readonly claim: number | undefined
  readonly notices: NoticeMessages
}

/** @internal */
export type Reply =
  | {
      readonly _tag: "Acquired"
      readonly fence: number
      /** The other workers still queued. */
      readonly queued: number
      /** One per slice key, `null` where missing. */
      readonly values: ReadonlyArray<string | null>
    }
  | { readonly _tag: "Queued"; readonly pttl: number }

/** @internal */
export const operation = describeAcknowledged({
  name: "acquireQueued",
  keys: ["lock", "fence", "queue", "deadlines", "ids"],
  restKeys: "slices",
  // claim: the fence of the grant claimed, "" for none; noticePrefix: a worker's notice
  // channel is noticePrefix .. <worker>
  args: ["lockId", "lockMs", "tokenMs", "handoffMs", "instanceId", "claim", "noticePrefix", "granted", "contended"],
  body: (dialect) => `${serverNow}${ids}${findLate}
local value = redis.call("GET", lock)
${dropLate}${enqueue}${grantNext(dialect)}${pendingFor}
local head = not quiet and redis.call("ZRANGE", queue, 0, 0)[1]
-- the grant claimed is still the last one made: nobody has taken the lock since (strings
-- compared, both canonical); or one grant only came since, the one its expiry passed on
local current = claim ~= "" and fenceNow()
local claimed = claim ~= "" and current == claim
local passedOn = claim ~= "" and current ~= nil and tonumber(current) == tonumber(claim) + 1
if pendingFor(value, instanceId) or (not value and (not head or head == instanceId or claimed)) then
  -- A step refused half-way (a slice of another type, a fence that is not a number) leaves
  -- the lock as it found it: a grant pending for this worker stays pending.
  local pendingMs = value and redis.call("PTTL", lock) or 0
  local function undo()
    if value and pendingMs > 0 then
      redis.call("SET", lock, value, "PX", pendingMs)
    else
      redis.call("DEL", lock)
    end
  end
  redis.call("SET", lock, lockId, "PX", lockMs)
  -- false (not nil) marks a missing slice: a Lua array ends at its first nil
  local result = {1, 0, 0}
  for i, key in ipairs(slices) do
    local found = redis.pcall("GETEX", key, "PX", tokenMs)
    if type(found) == "table" and found.err then
      undo()
      return found
    end
    result[i + 3] = found
  end
  -- a grant handed over to this worker took its fence already: taking it over keeps it (the
  -- lock id it installed was never used: its notice is answered by this attempt)
  local fenced = redis.pcall("INCRBY", fence, (value and value ~= "?" .. instanceId) and 0 or 1)
  if fenced == 0 then
    fenced = redis.pcall("INCR", fence)
  end
  if type(fenced) == "table" and fenced.err then
    undo()
    return fenced
  end
  redis.call("PEXPIRE", fence, tokenMs)
  if not quiet then
    redis.call("ZREM", queue, instanceId)
    redis.call("ZREM", deadlines, instanceId)
    forget(instanceId)
    result[3] = redis.call("ZCARD", queue)
  end
  result[2] = fenced
  return result
end
if not value then
  grantNext(slices)
end
enqueue(instanceId, claimed or (passedOn and redis.call("EXISTS", lock) == 1), lockId)
${noticeHolder(dialect)}
return {0, redis.call("PTTL", lock)}
`,
  decode: (reply): Reply | undefined => {
    const list = asArray(reply)
    if (list?.[0] === 1) {
      const fence = asNumber(list[1])
      const queued = asNumber(list[2])
      const values = list.slice(3).map(asNullableString)
      if (fence === undefined || queued === undefined || values.some((value) => value === undefined)) return
      return { _tag: "Acquired", fence, queued, values: values as ReadonlyArray<string | null> }
    }
    const pttl = asNumber(list?.[1])
    if (list?.[0] === 0 && pttl !== undefined) return { _tag: "Queued", pttl }
    return undefined
  },
  input: (env, { claim, instanceId, lockId, notices, slices, token }: Args) => ({
    keys: queueKeys(env.keys, token),
    restKeys: slices.map((name) => env.keys.slice(token, name)),
    args: {
      lockId,
      lockMs: env.lockMs,
      tokenMs: env.tokenMs,
      handoffMs: env.handoffMs,
      instanceId,
      claim: claimArg(claim),
      noticePrefix: env.noticePrefix(token),
      granted: notices.granted,
      contended: notices.contended
    }
  }),
  memory: (s, now, { claim, instanceId, lockId, notices, slices, token }): Reply => {
    const q = openQueue(s, now, token)
    const value = s.ks.getString(q.lockKey, now)?.value
    dropLateSteps(q)
    const head = ordered(q)[0]
    // the grant claimed is still the last one made: nobody has taken the lock since; or one
    // grant only came since, the one its expiry passed on
    const current = fenceNowSteps(q)
    const claimed = claim !== undefined && current === String(claim)
    const passedOn = claim !== undefined && current !== undefined && Number(current) === claim + 1
    if (
      pendingForSteps(q, value, instanceId) ||
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
      forgetSteps(q, instanceId)
      return { _tag: "Acquired", fence: next, queued: q.order?.members.size ?? 0, values }
    }
    if (value === undefined) grantNextSteps(q, notices.granted, slices)
    enqueueSteps(q, instanceId, claimed || (passedOn && s.ks.get(q.lockKey, now) !== undefined), lockId)
    noticeHolderSteps(q, notices.contended)
    const lock = s.ks.getString(q.lockKey, now)
    return { _tag: "Queued", pttl: lock === undefined ? -2 : pttl(lock, now) }
  },
  read: (reply, { slices }, lockMs): QueuedAcquireResult | StoreRefused =>
    reply._tag === "Acquired" && reply.values.length !== slices.length
      ? new StoreRefused({ operation: "acquireQueued", reply: `unexpected reply ${JSON.stringify(reply)}` })
      : queuedAcquireResult(reply, lockMs),
  wrote: grantedReply,
  check: ({ claim, instanceId, lockId, slices, token }) =>
    queueStepError(token, instanceId, lockId, slices) ?? claimError(claim)
})
