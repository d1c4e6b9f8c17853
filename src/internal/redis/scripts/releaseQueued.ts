/**
 * `releaseQueued` (docs/design.md#hand-off-in-the-release-step): compare-and-delete, then (with
 * `requeue` "1") the worker goes back to the tail of the queue (under the lock id `queueAs`), then
 * a free lock is granted to the queue's head, in the same step, its notice carrying the slices
 * named. `queued` counts the other live entries before the requeue and the grant. Whether or not
 * the lock was still the caller's, the requeue and the grant happen.
 *
 * @internal
 */

import { countQueued, dropLate, enqueue, findLate, grantNext, ids, serverNow } from "../../operations/queueLua.js"
import { asArray, asNumber, define } from "../script.js"

/** @internal */
export interface Reply {
  readonly released: boolean
  readonly queued: number
}

/** @internal */
export const script = define({
  name: "leaseholdReleaseQueued",
  keys: ["lock", "fence", "queue", "deadlines", "ids"],
  // the slices a grant's notice carries
  restKeys: "slices",
  // requeue "1" / "0"
  args: ["lockId", "lockMs", "tokenMs", "handoffMs", "instanceId", "requeue", "queueAs", "noticePrefix", "granted"],
  body: (dialect) => `${serverNow}${ids}${findLate}
local value = redis.call("GET", lock)
${countQueued}${dropLate}${enqueue}${grantNext(dialect)}
local released = 0
if value == lockId then
  redis.call("DEL", lock)
  released = 1
end
if not quiet and idOf(instanceId) == lockId then
  forget(instanceId)
end
if requeue == "1" then
  enqueue(instanceId, false, queueAs)
end
if not quiet or requeue == "1" then
  grantNext(slices)
end
return {released, queued}
`,
  decode: (reply): Reply | undefined => {
    const [released, queued] = asArray(reply) ?? []
    if (typeof released !== "number" || asNumber(queued) === undefined) return
    return { released: released === 1, queued: queued as number }
  }
})
