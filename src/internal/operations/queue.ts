/**
 * The queue on its own (docs/design.md#the-queue): `leave` (and a grant pending for the worker
 * passes to the next head; with a lock id, only an entry queued under it leaves, and only a grant
 * made under it passes: a newer attempt of the same worker keeps its place and its grant), the
 * number of other live entries, the live entries in order. The two reads skip the entries past
 * their deadline without removing them: they write nothing (the next step that writes drops them).
 *
 * @internal
 */

import {
  countQueued as countQueuedSteps,
  dropLate as dropLateSteps,
  forget,
  grantNext as grantNextSteps,
  idOf,
  openQueue,
  ordered,
  remove
} from "../memory/queue.js"
import { asArray } from "../redis/script.js"
import type { NoticeMessages } from "../store/driver.js"
import { instanceIdError, lockIdError, tokenError } from "../validate.js"
import { describe } from "./operation.js"
import { queueKeys } from "./queueKeys.js"
import { countQueued, dropLate, findLate, grantNext, ids, serverNow } from "./queueLua.js"

/** @internal */
export interface LeaveArgs {
  readonly token: string
  readonly instanceId: string
  /** Only the entry queued under it leaves, and only a grant made under it passes on; `undefined`: any. */
  readonly lockId: string | undefined
  readonly notices: NoticeMessages
}

/** @internal */
export interface WorkerArgs {
  readonly token: string
  readonly instanceId: string
}

/** @internal */
export const leave = describe({
  name: "leaveQueue",
  keys: ["lock", "fence", "queue", "deadlines", "ids"],
  // lockId: the lock id the worker queued under, "" for any
  args: ["instanceId", "lockId", "tokenMs", "handoffMs", "noticePrefix", "granted"],
  body: (dialect) => `${serverNow}${ids}${findLate}
local value = redis.call("GET", lock)
${dropLate}${grantNext(dialect)}
local recorded = idOf(instanceId)
if lockId == "" or not recorded or recorded == lockId then
  redis.call("ZREM", queue, instanceId)
  redis.call("ZREM", deadlines, instanceId)
  forget(instanceId)
end
if value and (value == "?" .. instanceId or (lockId == "" and value == recorded) or (lockId ~= "" and value == lockId)) then
  redis.call("DEL", lock)
end
grantNext({})
return 1
`,
  decode: (reply): true | undefined => (reply === 1 ? true : undefined),
  input: (env, { instanceId, lockId, notices, token }: LeaveArgs) => ({
    keys: queueKeys(env.keys, token),
    args: {
      instanceId,
      lockId: lockId ?? "",
      tokenMs: env.tokenMs,
      handoffMs: env.handoffMs,
      noticePrefix: env.noticePrefix(token),
      granted: notices.granted
    }
  }),
  memory: (s, now, { instanceId, lockId, notices, token }): true => {
    const q = openQueue(s, now, token)
    const value = s.ks.getString(q.lockKey, now)?.value
    dropLateSteps(q)
    const recorded = idOf(q, instanceId)
    if (lockId === undefined || recorded === undefined || recorded === lockId) {
      remove(q, instanceId)
      forget(q, instanceId)
    }
    if (value !== undefined && (value === `?${instanceId}` || value === (lockId ?? recorded))) {
      s.ks.delete(q.lockKey)
    }
    grantNextSteps(q, notices.granted, [])
    return true
  },
  read: (): void => undefined,
  check: ({ instanceId, lockId, token }) =>
    tokenError(token) ?? instanceIdError(instanceId) ?? (lockId === undefined ? undefined : lockIdError(lockId))
})

/** The live entries other than `instanceId`. Reads only. @internal */
export const length = describe({
  name: "queueLength",
  keys: ["deadlines"],
  args: ["instanceId"],
  // (no `findLate` here: the count reads the deadlines whatever the other keys hold)
  body: () => `${serverNow}
local quiet = false
${countQueued}
return queued
`,
  decode: (reply): number | undefined => (typeof reply === "number" ? reply : undefined),
  input: ({ keys }, { instanceId, token }: WorkerArgs) => ({
    keys: { deadlines: keys.queueDeadlines(token) },
    args: { instanceId }
  }),
  memory: (s, now, { instanceId, token }) =>
    countQueuedSteps(s.ks.getSet(s.keys.queueDeadlines(token), now), instanceId, now),
  check: ({ instanceId, token }) => tokenError(token) ?? instanceIdError(instanceId)
})

/** The live entries, head first. Reads only. @internal */
export const live = describe({
  name: "queue",
  keys: ["queue", "deadlines"],
  args: [],
  body: () => `${serverNow}
local live = {}
for _, member in ipairs(redis.call("ZRANGE", queue, 0, -1)) do
  local deadline = redis.call("ZSCORE", deadlines, member)
  if deadline and tonumber(deadline) > now then
    live[#live + 1] = member
  end
end
return live
`,
  decode: (reply): ReadonlyArray<string> | undefined => {
    const list = asArray(reply)
    return list?.every((member) => typeof member === "string") ? (list as ReadonlyArray<string>) : undefined
  },
  input: ({ keys }, { token }: { readonly token: string }) => ({
    keys: { queue: keys.queue(token), deadlines: keys.queueDeadlines(token) },
    args: {}
  }),
  memory: (s, now, { token }): ReadonlyArray<string> => {
    const q = openQueue(s, now, token)
    return ordered(q).filter((member) => (q.deadlines?.members.get(member) ?? now) > now)
  },
  check: ({ token }) => tokenError(token)
})
