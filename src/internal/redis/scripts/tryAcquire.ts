/**
 * `tryAcquire`: take the lock if it is free, with the fence incremented and the requested
 * slices read (their TTL refreshed) in the same step; when held, `pttl`. It neither reads nor
 * writes the token's queue (that is `acquireQueued`).
 *
 * Redis does not roll back a script that fails half-way: a read that fails (a slice key of
 * the wrong type) deletes the lock it just took.
 *
 * @internal
 */
import { asArray, asNullableString, asNumber, define } from "../script.js"

/** @internal */
export type Reply =
  | {
      readonly _tag: "Acquired"
      readonly fence: number
      /** One per slice key, `null` where missing. */
      readonly values: ReadonlyArray<string | null>
    }
  | { readonly _tag: "Held"; readonly pttl: number }

/** @internal */
export const script = define({
  name: "leaseholdTryAcquire",
  keys: ["lock", "fence"],
  restKeys: "slices",
  args: ["lockId", "lockMs", "tokenMs"],
  body: () => `
if not redis.call("SET", lock, lockId, "NX", "PX", lockMs) then
  return {0, redis.call("PTTL", lock)}
end
-- false (not nil) marks a missing slice: a Lua array ends at its first nil
local result = {1, 0}
for i, key in ipairs(slices) do
  local value = redis.pcall("GETEX", key, "PX", tokenMs)
  if type(value) == "table" and value.err then
    redis.call("DEL", lock)
    return value
  end
  result[i + 2] = value
end
local fenced = redis.pcall("INCR", fence)
if type(fenced) == "table" and fenced.err then
  redis.call("DEL", lock)
  return fenced
end
redis.call("PEXPIRE", fence, tokenMs)
result[2] = fenced
return result
`,
  decode: (reply): Reply | undefined => {
    const list = asArray(reply)
    if (list?.[0] === 1) {
      const fence = asNumber(list[1])
      const values = list.slice(2).map(asNullableString)
      if (fence === undefined || values.some((value) => value === undefined)) return
      return { _tag: "Acquired", fence, values: values as ReadonlyArray<string | null> }
    }
    const pttl = asNumber(list?.[1])
    if (list?.[0] === 0 && pttl !== undefined) return { _tag: "Held", pttl }
    return undefined
  }
})
