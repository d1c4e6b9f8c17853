/**
 * The queue on its own (DESIGN §4.3): `leave` (and a grant pending for the worker passes to
 * the next head), the number of other live entries, the live entries in order. The two
 * reads skip the entries past their deadline without removing them: they write nothing
 * (the next step that writes drops them).
 *
 * @internal
 */
import { asArray, define } from "../script.js"
import { countQueued, dropLate, findLate, grantNext, serverNow } from "./queueLua.js"

/** @internal */
export const leave = define({
  name: "leaseholdLeaveQueue",
  // fence: read (never written) for the grant's notice
  keys: ["lock", "fence", "queue", "deadlines"],
  args: ["instanceId", "handoffMs", "noticePrefix", "granted"],
  body: (dialect) => `${serverNow}${findLate}
local value = redis.call("GET", lock)
${dropLate}${grantNext(dialect)}
redis.call("ZREM", queue, instanceId)
redis.call("ZREM", deadlines, instanceId)
if value == "?" .. instanceId then
  redis.call("DEL", lock)
end
grantNext()
return 1
`,
  decode: (reply): true | undefined => (reply === 1 ? true : undefined)
})

/** The live entries other than `instanceId`. Reads only. @internal */
export const length = define({
  name: "leaseholdQueueLength",
  keys: ["deadlines"],
  args: ["instanceId"],
  body: () => `${serverNow}${countQueued}
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
