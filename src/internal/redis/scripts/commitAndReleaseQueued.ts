/**
 * `commitAndReleaseQueued`: `writeIfHolder` and `releaseQueued` in one step, a modification's
 * last round trip under the queue protocol. When `lockId` no longer holds the lock (nor takes
 * it back with `claim`: `holderOrClaim`) nothing at all is written, queued, granted or
 * published: the reply names the holder found.
 * Otherwise the other live entries are counted, the slices written (the fence's TTL with
 * them), the lock deleted, the worker queued again at the tail with `requeue` "1" (under the
 * lock id `queueAs`), and the lock granted to the queue's head. The slice keys are the
 * written ones (one value each, in order), then those only carried: the grant's notice
 * carries the values of all of them.
 *
 * @internal
 */

import { decodeHolderCheck, holderOrClaim } from "../../operations/holderCheck.js"
import { countQueued, dropLate, enqueue, findLate, grantNext, ids, serverNow } from "../../operations/queueLua.js"
import { asArray, asNumber, define } from "../script.js"

/** @internal */
export type Reply =
  | { readonly _tag: "Written"; readonly queued: number }
  | { readonly _tag: "Lost"; readonly holder: string | null }

/** @internal */
export const script = define({
  name: "leaseholdCommitAndReleaseQueued",
  keys: ["lock", "fence", "queue", "deadlines", "ids"],
  restKeys: "slices",
  args: [
    "lockId",
    "claim",
    "lockMs",
    "tokenMs",
    "handoffMs",
    "instanceId",
    "requeue",
    "queueAs",
    "noticePrefix",
    "granted"
  ],
  restArgs: "values",
  body: (dialect) => `${ids}${holderOrClaim()}${serverNow}${findLate}${countQueued}${enqueue}${grantNext(dialect)}
-- the writes first (see writeIfHolder): an out-of-memory refusal comes before any write,
-- dropping the late entries included
for i = 1, #values do
  redis.call("SET", slices[i], values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
${dropLate}
redis.call("DEL", lock)
if not quiet and idOf(instanceId) == lockId then
  forget(instanceId)
end
if requeue == "1" then
  enqueue(instanceId, false, queueAs)
end
if not quiet or requeue == "1" then
  grantNext(slices)
end
return {1, queued}
`,
  decode: (reply): Reply | undefined => {
    const checked = decodeHolderCheck(reply)
    if (checked?._tag !== "Written") return checked
    const queued = asNumber(asArray(reply)?.[1])
    return queued === undefined ? undefined : { _tag: "Written", queued }
  }
})
