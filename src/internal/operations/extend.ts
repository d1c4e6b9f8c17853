/**
 * `extend`: compare-and-PEXPIRE to a full lock expiration (or take the lock back with
 * `claim`: `holderOrClaim`), with the fence and the named slices to a full token
 * expiration; 1 when extended.
 *
 * @internal
 */
import { holderOrClaim as heldOrReclaimed, refreshTokenKey } from "../memory/space.js"
import { claimArg } from "../redis/script.js"
import { claimError, sliceNamesError, tokenError } from "../validate.js"
import { describe } from "./operation.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly slices: ReadonlyArray<string>
  /** The fence of the grant that handed `lockId` over (`Store.HolderOptions`), or `undefined`. */
  readonly claim: number | undefined
}

import { holderOrClaim } from "./holderCheck.js"
import { ids } from "./queueLua.js"

/** @internal */
export const operation = describe({
  name: "extend",
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
  decode: (reply): boolean | undefined => (typeof reply === "number" ? reply === 1 : undefined),
  input: ({ keys, lockMs, tokenMs }, { claim, lockId, slices, token }: Args) => ({
    keys: { lock: keys.lock(token), fence: keys.fence(token), queue: keys.queue(token), ids: keys.queueIds(token) },
    restKeys: slices.map((name) => keys.slice(token, name)),
    args: { lockId, claim: claimArg(claim), lockMs, tokenMs }
  }),
  memory: (s, now, { claim, lockId, slices, token }): boolean => {
    const lockKey = s.keys.lock(token)
    const lock = s.ks.getString(lockKey, now)
    if (lock?.value === lockId) s.ks.expire(lockKey, lock, now + s.lockMs, now)
    else if (heldOrReclaimed(s, now, token, lockId, claim) === "reclaimed") {
      s.ks.setString(lockKey, lockId, now + s.lockMs)
    } else return false
    refreshTokenKey(s, s.keys.fence(token), now)
    for (const name of slices) refreshTokenKey(s, s.keys.slice(token, name), now)
    return true
  },
  check: ({ claim, slices, token }) => tokenError(token) ?? sliceNamesError(slices) ?? claimError(claim)
})
