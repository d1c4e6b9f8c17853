/** `extend`: compare-and-PEXPIRE to a full lock expiration; 1 when extended. @internal */
import { define } from "../script.js"

/** @internal */
export const script = define({
  name: "leaseholdExtend",
  keys: ["lock"],
  args: ["lockId", "lockMs"],
  body: () => `
if redis.call("GET", lock) == lockId then
  return redis.call("PEXPIRE", lock, lockMs)
end
return 0
`,
  decode: (reply): boolean | undefined => (typeof reply === "number" ? reply === 1 : undefined)
})
