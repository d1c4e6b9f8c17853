/**
 * The queue on its own (docs/design.md#the-queue): `leave` (and a grant pending for the worker
 * passes to the next head; with a lock id, only an entry queued under it leaves, and only a grant
 * made under it passes: a newer attempt of the same worker keeps its place and its grant), the
 * number of other live entries, the live entries in order. The two reads skip the entries past
 * their deadline without removing them: they write nothing (the next step that writes drops them).
 *
 * @internal
 */

import { countQueued, dropLate, findLate, grantNext, ids, serverNow } from "../../operations/queueLua.js"
import { asArray, define } from "../script.js"

/** @internal */
export const leave = define({
  name: "leaseholdLeaveQueue",
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
  decode: (reply): true | undefined => (reply === 1 ? true : undefined)
})

/** The live entries other than `instanceId`. Reads only. @internal */
export const length = define({
  name: "leaseholdQueueLength",
  keys: ["deadlines"],
  args: ["instanceId"],
  // (no `findLate` here: the count reads the deadlines whatever the other keys hold)
  body: () => `${serverNow}
local quiet = false
${countQueued}
return queued
`,
  decode: (reply): number | undefined => (typeof reply === "number" ? reply : undefined)
})

/** The live entries, head first. Reads only. @internal */
export const live = define({
  name: "leaseholdQueue",
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
  }
})
