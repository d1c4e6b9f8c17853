/**
 * `commitAndRelease`: `writeIfHolder` and `release` in one step, a modification's second and
 * last round trip. The other waiters are counted before the instance registers (with
 * `register` "1", after `released`). When `lockId` no longer holds the lock nothing at all is
 * written, published or registered.
 *
 * @internal
 */
import { asArray, asNumber, define } from "../script.js"
import { countOthers, register, serverNow } from "./waiterLua.js"
import { decodeHolderCheck } from "./writeIfHolder.js"

/** @internal */
export type Reply =
  | { readonly _tag: "Written"; readonly contenders: number }
  | { readonly _tag: "Lost"; readonly holder: string | null }

/** @internal */
export const script = define({
  name: "leaseholdCommitAndRelease",
  keys: ["lock", "fence", "waiters"],
  restKeys: "slices",
  args: ["lockId", "tokenMs", "channel", "releasedMessage", "instanceId", "register", "contended", "lockMs"],
  restArgs: "values",
  body: (dialect) => `
local holder = redis.call("GET", lock)
if holder ~= lockId then
  return {0, holder}
end
${serverNow}${countOthers}
-- the writes first (see writeIfHolder): an out-of-memory refusal comes before any write
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
redis.call("DEL", lock)
redis.call("${dialect.publish}", channel, releasedMessage)
if register == "1" then
${register(dialect)}
end
return {1, contenders}
`,
  decode: (reply): Reply | undefined => {
    const checked = decodeHolderCheck(reply)
    if (checked?._tag !== "Written") return checked
    const contenders = asNumber(asArray(reply)?.[1])
    return contenders === undefined ? undefined : { _tag: "Written", contenders }
  }
})
