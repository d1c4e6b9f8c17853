/** `holder`: the lock id, the fence (nil when gone) and the lock's PTTL in one step; nil when free. @internal */

import type * as Option from "effect/Option"
import type { LockHolder } from "../../Store.js"
import type { StoreRefused } from "../../StoreError.js"
import { pttl } from "../memory/space.js"
import { asArray, asNullableString, asNumber } from "../redis/script.js"
import { lockHolder } from "../store/replies.js"
import { tokenError } from "../validate.js"
import { describe } from "./operation.js"

/** @internal */
export interface Args {
  readonly token: string
}

/** @internal */
export type Reply =
  | { readonly _tag: "Free" }
  | { readonly _tag: "Held"; readonly lockId: string; readonly fence: string | null; readonly pttl: number }

/** @internal */
export const operation = describe({
  name: "holder",
  keys: ["lock", "fence"],
  args: [],
  body: () => `
local id = redis.call("GET", lock)
if not id then
  return false
end
return {id, redis.call("GET", fence), redis.call("PTTL", lock)}
`,
  decode: (reply): Reply | undefined => {
    if (reply === null) return { _tag: "Free" }
    const [lockId, fence, pttl] = asArray(reply) ?? []
    const fenceValue = asNullableString(fence ?? null)
    const pttlValue = asNumber(pttl)
    if (typeof lockId !== "string" || fenceValue === undefined || pttlValue === undefined) return
    return { _tag: "Held", lockId, fence: fenceValue, pttl: pttlValue }
  },
  input: ({ keys }, { token }: Args) => ({ keys: { lock: keys.lock(token), fence: keys.fence(token) }, args: {} }),
  memory: (s, now, { token }): Reply => {
    const lock = s.ks.getString(s.keys.lock(token), now)
    if (lock === undefined) return { _tag: "Free" }
    const fence = s.ks.getString(s.keys.fence(token), now)
    return { _tag: "Held", lockId: lock.value, fence: fence?.value ?? null, pttl: pttl(lock, now) }
  },
  read: (reply, _, lockMs): Option.Option<LockHolder> | StoreRefused => {
    const held = lockHolder(reply, lockMs)
    return held._tag === "Success" ? held.success : held.failure
  },
  check: ({ token }) => tokenError(token)
})
