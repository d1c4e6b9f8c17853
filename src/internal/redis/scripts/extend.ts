/**
 * `extend`: compare-and-PEXPIRE to a full lock expiration, with the fence and the named
 * slices to a full token expiration; 1 when extended.
 *
 * @internal
 */
import { define } from "../script.js"

/** @internal */
export const script = define({
  name: "leaseholdExtend",
  keys: ["lock", "fence"],
  restKeys: "slices",
  args: ["lockId", "lockMs", "tokenMs"],
  body: () => `
if redis.call("GET", lock) ~= lockId then
  return 0
end
redis.call("PEXPIRE", lock, lockMs)
redis.call("PEXPIRE", fence, tokenMs)
for _, key in ipairs(slices) do
  redis.call("PEXPIRE", key, tokenMs)
end
return 1
`,
  decode: (reply): boolean | undefined => (typeof reply === "number" ? reply === 1 : undefined)
})
