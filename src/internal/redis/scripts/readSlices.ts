/**
 * `readSlices`: GETEX each slice, refreshing its TTL, and the fence's with them (it lives as
 * long as the slices it protects); values in order, nil where missing.
 *
 * @internal
 */
import { asArray, asNullableString, define } from "../script.js"

/** @internal */
export const script = define({
  name: "leaseholdReadSlices",
  keys: ["fence"],
  restKeys: "slices",
  args: ["tokenMs"],
  body: () => `
redis.call("PEXPIRE", fence, tokenMs)
local result = {}
for i, key in ipairs(slices) do
  result[i] = redis.call("GETEX", key, "PX", tokenMs)
end
return result
`,
  decode: (reply): ReadonlyArray<string | null> | undefined => {
    const values = asArray(reply)?.map(asNullableString)
    return values === undefined || values.some((value) => value === undefined)
      ? undefined
      : (values as ReadonlyArray<string | null>)
  }
})
