/** `holder`: the lock id, the fence (nil when gone) and the lock's PTTL in one step; nil when free. @internal */
import { asArray, asNullableString, asNumber, define } from "../script.js"

/** @internal */
export type Reply =
  | { readonly _tag: "Free" }
  | { readonly _tag: "Held"; readonly lockId: string; readonly fence: string | null; readonly pttl: number }

/** @internal */
export const script = define({
  name: "leaseholdHolder",
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
  }
})
