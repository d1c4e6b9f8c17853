/**
 * `writeIfHolder`: write every slice (with its TTL, and the fence's TTL with them) only while
 * `lockId` holds the lock, or takes it back with `claim` (`holderOrClaim`). SET and PEXPIRE
 * take a key of any type, so no write can fail half-way.
 *
 * @internal
 */
import { asArray, asNullableString, define } from "../script.js"
import { ids } from "./queueLua.js"

/**
 * The holder check of the steps that write or extend under a lock (keys `lock`, `fence`,
 * `queue` and `ids`, arguments `lockId` and `claim`; the `ids` fragment before it):
 * `lockId` holds the lock; or `claim` is the fence of the grant that handed `lockId` over
 * ("" for none) and nobody was granted the lock since that grant expired unused: the lock
 * is free, the fence still reads the claim, and the worker of `lockId` is recorded under it
 * and no longer queued (as its grant left it; a lock id is never granted twice on one
 * timeline, so a fence that came back to the same number after a failover lost writes does
 * not pass). The step then goes on as the lock's holder (`reclaimed` true: it sets the lock
 * again). Otherwise it returns `lost` (`{0, holder}` unless said).
 *
 * @internal
 */
export const holderOrClaim = (lost = "{0, holder}") => `
local holder = redis.call("GET", lock)
local reclaimed = false
if holder ~= lockId then
  local worker = string.match(lockId, "^(.+):")
  if holder or claim == "" or not worker or redis.call("GET", fence) ~= claim
    or redis.call("ZSCORE", queue, worker) or idOf(worker) ~= lockId then
    return ${lost}
  end
  reclaimed = true
end
`

/** @internal */
export type Reply = { readonly _tag: "Written" } | { readonly _tag: "Lost"; readonly holder: string | null }

/** @internal */
export const script = define({
  name: "leaseholdWriteIfHolder",
  keys: ["lock", "fence", "queue", "ids"],
  restKeys: "slices",
  args: ["lockId", "claim", "lockMs", "tokenMs"],
  restArgs: "values",
  body: () => `${ids}${holderOrClaim()}
-- the writes first: once a script has written, Redis lets it write past maxmemory, and an
-- out-of-memory refusal must come before anything is written
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
if reclaimed then
  redis.call("SET", lock, lockId, "PX", lockMs)
end
return {1}
`,
  decode: (reply): Reply | undefined => decodeHolderCheck(reply)
})

/** `{1, …}` written, `{0, holder-or-nil}` lost: the reply of the scripts that check the holder first. @internal */
export const decodeHolderCheck = (
  reply: unknown
): { readonly _tag: "Written" } | { readonly _tag: "Lost"; readonly holder: string | null } | undefined => {
  const list = asArray(reply)
  if (list?.[0] === 1) return { _tag: "Written" }
  const holder = asNullableString(list?.[1] ?? null)
  if (list?.[0] === 0 && holder !== undefined) return { _tag: "Lost", holder }
  return undefined
}
