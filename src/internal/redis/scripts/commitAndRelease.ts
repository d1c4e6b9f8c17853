/**
 * `commitAndRelease`: `writeIfHolder` and `release` in one step. When `lockId` no longer
 * holds the lock nothing at all is written or published. It neither reads nor writes the
 * token's queue (that is `commitAndReleaseQueued`).
 *
 * @internal
 */
import { define } from "../script.js"
import { decodeHolderCheck } from "./writeIfHolder.js"

/** @internal */
export const script = define({
  name: "leaseholdCommitAndRelease",
  keys: ["lock", "fence"],
  restKeys: "slices",
  args: ["lockId", "tokenMs", "channel", "releasedMessage"],
  restArgs: "values",
  body: (dialect) => `
local holder = redis.call("GET", lock)
if holder ~= lockId then
  return {0, holder}
end
-- the writes first (see writeIfHolder): an out-of-memory refusal comes before any write
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
redis.call("DEL", lock)
redis.call("${dialect.publish}", channel, releasedMessage)
return {1}
`,
  decode: decodeHolderCheck
})
