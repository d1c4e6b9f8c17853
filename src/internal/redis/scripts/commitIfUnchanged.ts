/**
 * `commitIfUnchanged`: a whole modification in one step, made on values this worker read or
 * wrote under its last grant of the token (`Store.Stepping` on Redis). When the lock is free,
 * no worker is queued (none of the queue's keys exists), the fence still reads `fence` (no
 * grant since) and every slice still holds the value expected: the fence is incremented (the
 * step's own grant), the slices given a value are written and the others' expiry refreshed,
 * with the fence's, and the reply is the new fence. Otherwise nothing at all is done
 * (`{0}`), and the modification takes the lock the queued way.
 *
 * The values are compared as well as the fence: a failover that lost writes can bring the
 * fence back to the same number over other values. Each slice has two arguments, the value
 * expected (`=<value>`, or `-` for none) and the value to write (`=<value>`, or `` to keep).
 * Every read comes before the first write (the INCR), so a slice key of another kind, or an
 * out-of-memory refusal, refuses the whole step before anything is written.
 *
 * @internal
 */
import { asArray, asNumber, define } from "../script.js"

/** @internal */
export type Reply = { readonly _tag: "Committed"; readonly fence: number } | { readonly _tag: "Refused" }

/** @internal */
export const script = define({
  name: "leaseholdCommitIfUnchanged",
  keys: ["lock", "fence", "queue", "deadlines", "ids"],
  restKeys: "slices",
  args: ["expected", "tokenMs"],
  restArgs: "values",
  body: () => `
if redis.call("EXISTS", lock, queue, deadlines, ids) > 0 or redis.call("GET", fence) ~= expected then
  return {0}
end
for i, key in ipairs(slices) do
  local found = redis.call("GET", key)
  local want = values[2 * i - 1]
  if want == "-" then
    if found then
      return {0}
    end
  elseif found ~= string.sub(want, 2) then
    return {0}
  end
end
local fenced = redis.call("INCR", fence)
redis.call("PEXPIRE", fence, tokenMs)
for i, key in ipairs(slices) do
  local value = values[2 * i]
  if value ~= "" then
    redis.call("SET", key, string.sub(value, 2), "PX", tokenMs)
  else
    redis.call("PEXPIRE", key, tokenMs)
  end
end
return {1, fenced}
`,
  decode: (reply): Reply | undefined => {
    const list = asArray(reply)
    if (list?.[0] === 0 && list.length === 1) return { _tag: "Refused" }
    const fence = asNumber(list?.[1])
    return list?.[0] === 1 && fence !== undefined ? { _tag: "Committed", fence } : undefined
  }
})
