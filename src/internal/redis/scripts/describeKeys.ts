/**
 * `describeKeys`: `{type, pttl, size}` of each key of one token, where the size is STRLEN
 * of a string, ZCARD of a sorted set (the queue and its deadlines), 0 otherwise. Reads only.
 *
 * @internal
 */
import { asArray, asNumber, define } from "../script.js"

/** @internal */
export interface KeyDescription {
  readonly type: string
  readonly pttl: number
  readonly size: number
}

/** @internal */
export const script = define({
  name: "leaseholdDescribeKeys",
  keys: [],
  restKeys: "names",
  args: [],
  body: () => `
local out = {}
for i, key in ipairs(names) do
  local kind = redis.call("TYPE", key)["ok"]
  local size = 0
  if kind == "string" then
    size = redis.call("STRLEN", key)
  elseif kind == "zset" then
    size = redis.call("ZCARD", key)
  end
  out[i] = {kind, redis.call("PTTL", key), size}
end
return out
`,
  decode: (reply): ReadonlyArray<KeyDescription> | undefined => {
    const rows = asArray(reply)?.map((row) => {
      const [type, pttl, size] = asArray(row) ?? []
      const pttlValue = asNumber(pttl)
      const sizeValue = asNumber(size)
      return typeof type === "string" && pttlValue !== undefined && sizeValue !== undefined
        ? { type, pttl: pttlValue, size: sizeValue }
        : undefined
    })
    return rows === undefined || rows.some((row) => row === undefined)
      ? undefined
      : (rows as ReadonlyArray<KeyDescription>)
  }
})
