/**
 * `writeIfHolder`: write every slice (with its TTL, and the fence's TTL with them) only while
 * `lockId` holds the lock, or takes it back with `claim` (`holderOrClaim`). SET and PEXPIRE
 * take a key of any type, so no write can fail half-way.
 *
 * @internal
 */
import type { SliceEntry } from "../../Store.js"
import { holderOrClaim as heldOrReclaimed, writeSlices } from "../memory/space.js"
import { claimArg } from "../redis/script.js"
import { claimError, sliceNamesError, tokenError } from "../validate.js"
import { decodeHolderCheck, guardedReply, type HolderCheck, holderOrClaim, written } from "./holderCheck.js"
import { describeAcknowledged } from "./operation.js"
import { ids } from "./queueLua.js"
import { wrote } from "./wrote.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly entries: ReadonlyArray<SliceEntry>
  /** The fence of the grant that handed `lockId` over (`Store.HolderOptions`), or `undefined`. */
  readonly claim: number | undefined
}

/** @internal */
export const operation = describeAcknowledged({
  name: "writeIfHolder",
  keys: ["lock", "fence", "queue", "ids"],
  restKeys: "slices",
  args: ["lockId", "claim", "lockMs", "tokenMs"],
  restArgs: "values",
  body: () => `${ids}${holderOrClaim()}
-- the writes first: once a script has written, Redis lets it write past maxmemory, and an
-- out-of-memory refusal must come before anything is written
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
if reclaimed then
  redis.call("SET", lock, lockId, "PX", lockMs)
end
return {1}
`,
  decode: decodeHolderCheck,
  input: ({ keys, lockMs, tokenMs }, { claim, entries, lockId, token }: Args) => ({
    keys: { lock: keys.lock(token), fence: keys.fence(token), queue: keys.queue(token), ids: keys.queueIds(token) },
    restKeys: entries.map(([name]) => keys.slice(token, name)),
    args: { lockId, claim: claimArg(claim), lockMs, tokenMs },
    restArgs: entries.map(([, value]) => value)
  }),
  memory: (s, now, { claim, entries, lockId, token }): HolderCheck => {
    const held = heldOrReclaimed(s, now, token, lockId, claim)
    if (typeof held !== "string") return held
    writeSlices(s, token, entries, now)
    if (held === "reclaimed") s.ks.setString(s.keys.lock(token), lockId, now + s.lockMs)
    return written
  },
  read: guardedReply,
  wrote: (reply, { entries }) => wrote(entries)(reply),
  check: ({ claim, entries, token }) =>
    tokenError(token) ?? sliceNamesError(entries.map(([name]) => name)) ?? claimError(claim)
})
