/**
 * `release`: compare-and-delete; `released` is published only when it deleted. The other
 * waiters are counted before any registration; with `register` "1" the instance then
 * registers (after `released`), whoever held the lock.
 *
 * @internal
 */
import { asArray, asNumber, define } from "../script.js"
import { countOthers, register, serverNow } from "./waiterLua.js"

/** @internal */
export interface Reply {
  readonly released: boolean
  readonly contenders: number
}

/** @internal */
export const script = define({
  name: "leaseholdRelease",
  keys: ["lock", "waiters"],
  args: ["lockId", "channel", "releasedMessage", "instanceId", "register", "contended", "lockMs"],
  body: (dialect) => `${serverNow}${countOthers}
local released = 0
if redis.call("GET", lock) == lockId then
  redis.call("DEL", lock)
  redis.call("${dialect.publish}", channel, releasedMessage)
  released = 1
end
if register == "1" then
${register(dialect)}
end
return {released, contenders}
`,
  decode: (reply): Reply | undefined => {
    const [released, contenders] = asArray(reply) ?? []
    if (typeof released !== "number" || asNumber(contenders) === undefined) return
    return { released: released === 1, contenders: contenders as number }
  }
})
