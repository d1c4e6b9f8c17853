/**
 * `extend`: compare-and-PEXPIRE to a full lock expiration (or take the lock back with
 * `claim`: `holderOrClaim`), with the fence and the named slices to a full token
 * expiration; 1 when extended.
 *
 * @internal
 */
import { define } from "../script.js"
import { ids } from "./queueLua.js"
import { holderOrClaim } from "./writeIfHolder.js"

/** @internal */
export const script = define({
  name: "leaseholdExtend",
  keys: ["lock", "fence", "queue", "ids"],
  restKeys: "slices",
  args: ["lockId", "claim", "lockMs", "tokenMs"],
  body: () => `${ids}${holderOrClaim("0")}
if reclaimed then
  redis.call("SET", lock, lockId, "PX", lockMs)
else
  redis.call("PEXPIRE", lock, lockMs)
end
redis.call("PEXPIRE", fence, tokenMs)
for _, key in ipairs(slices) do
  redis.call("PEXPIRE", key, tokenMs)
end
return 1
`,
  decode: (reply): boolean | undefined => (typeof reply === "number" ? reply === 1 : undefined)
})
