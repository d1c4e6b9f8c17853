/**
 * The holder check of the operations that write or extend under a lock: its Lua fragment
 * (`holderOrClaim`), the reply of the scripts that check the holder first, and what the
 * store makes of it.
 *
 * @internal
 */
import * as Option from "effect/Option"
import { asArray, asNullableString } from "../redis/script.js"
import type { Guarded } from "../store/driver.js"

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

/** The reply of a script that checks the holder first: written, or lost to the holder found (`null`: none). @internal */
export type HolderCheck = { readonly _tag: "Written" } | { readonly _tag: "Lost"; readonly holder: string | null }

/** The reply of a step that wrote. @internal */
export const written: HolderCheck = { _tag: "Written" }

/** `{1, …}` written, `{0, holder-or-nil}` lost: the reply of the scripts that check the holder first. @internal */
export const decodeHolderCheck = (reply: unknown): HolderCheck | undefined => {
  const list = asArray(reply)
  if (list?.[0] === 1) return written
  const holder = asNullableString(list?.[1] ?? null)
  if (list?.[0] === 0 && holder !== undefined) return { _tag: "Lost", holder }
  return undefined
}

/** The reply of a script that checks the holder first, as the driver's outcome. @internal */
export const guardedReply = (reply: HolderCheck): Guarded<void> =>
  reply._tag === "Lost" ? { _tag: "Lost", holder: Option.fromNullishOr(reply.holder) } : done

const done: Guarded<void> = { _tag: "Done", value: undefined }
