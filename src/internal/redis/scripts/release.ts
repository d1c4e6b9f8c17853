/**
 * `release`: compare-and-delete; `released` is published only when it deleted. It neither
 * reads nor writes the token's queue (that is `releaseQueued`).
 *
 * @internal
 */
import { define } from "../script.js"

/** @internal */
export interface Reply {
  readonly released: boolean
}

/** @internal */
export const script = define({
  name: "leaseholdRelease",
  keys: ["lock"],
  args: ["lockId", "channel", "releasedMessage"],
  body: (dialect) => `
if redis.call("GET", lock) == lockId then
  redis.call("DEL", lock)
  redis.call("${dialect.publish}", channel, releasedMessage)
  return 1
end
return 0
`,
  decode: (reply): Reply | undefined => (reply === 1 || reply === 0 ? { released: reply === 1 } : undefined)
})
