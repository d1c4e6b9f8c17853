/**
 * `writeIfHolder`: write every slice (with its TTL, and the fence's TTL with them) only while
 * `lockId` holds the lock, or takes it back with `claim` (`holderOrClaim`), and extend the
 * lock to a full lock expiration: a holder that writes extends its lock with it. Answers the
 * live queue entries other than `instanceId` (as `queueLength` counts them), read before
 * anything is written. SET and PEXPIRE take a key of any type, so no write can fail half-way.
 *
 * @internal
 */
import * as Option from "effect/Option"
import type { SliceEntry } from "../../Store.js"
import { countQueued as countQueuedSteps } from "../memory/queue.js"
import { holderOrClaim as heldOrReclaimed, writeSlices } from "../memory/space.js"
import { asArray, claimArg } from "../redis/script.js"
import type { Guarded } from "../store/driver.js"
import { claimError, instanceIdError, sliceNamesError, tokenError } from "../validate.js"
import { decodeHolderCheck, type HolderCheck, holderOrClaim } from "./holderCheck.js"
import { describeAcknowledged } from "./operation.js"
import { countQueued, ids, serverNow } from "./queueLua.js"
import { wrote } from "./wrote.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly entries: ReadonlyArray<SliceEntry>
  /** The fence of the grant that handed `lockId` over (`Store.HolderOptions`), or `undefined`. */
  readonly claim: number | undefined
  /** The worker whose own queue entry the count leaves out ("" for none). */
  readonly instanceId: string
}

/** The reply: written, with the other workers queued; or lost. @internal */
export type Reply = { readonly _tag: "Written"; readonly queued: number } | Exclude<HolderCheck, { _tag: "Written" }>

/** `{1, queued}` written, `{0, holder}` lost. */
const decode = (reply: unknown): Reply | undefined => {
  const check = decodeHolderCheck(reply)
  if (check === undefined || check._tag === "Lost") return check
  const queued = asArray(reply)?.[1]
  return typeof queued === "number" ? { _tag: "Written", queued } : undefined
}

/** @internal */
export const operation = describeAcknowledged({
  name: "writeIfHolder",
  keys: ["lock", "fence", "queue", "ids", "deadlines"],
  restKeys: "slices",
  args: ["lockId", "claim", "lockMs", "tokenMs", "instanceId"],
  restArgs: "values",
  body: () => `${serverNow}${ids}${holderOrClaim()}
local quiet = redis.call("EXISTS", deadlines) == 0
${countQueued}
-- the writes after the reads: once a script has written, Redis lets it write past maxmemory,
-- and an out-of-memory refusal must come before anything is written
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
if reclaimed then
  redis.call("SET", lock, lockId, "PX", lockMs)
else
  redis.call("PEXPIRE", lock, lockMs)
end
return {1, queued}
`,
  decode,
  input: ({ keys, lockMs, tokenMs }, { claim, entries, instanceId, lockId, token }: Args) => ({
    keys: {
      lock: keys.lock(token),
      fence: keys.fence(token),
      queue: keys.queue(token),
      ids: keys.queueIds(token),
      deadlines: keys.queueDeadlines(token)
    },
    restKeys: entries.map(([name]) => keys.slice(token, name)),
    args: { lockId, claim: claimArg(claim), lockMs, tokenMs, instanceId },
    restArgs: entries.map(([, value]) => value)
  }),
  memory: (s, now, { claim, entries, instanceId, lockId, token }): Reply => {
    const held = heldOrReclaimed(s, now, token, lockId, claim)
    if (typeof held !== "string") return held
    const queued = countQueuedSteps(s.ks.getSet(s.keys.queueDeadlines(token), now), instanceId, now)
    writeSlices(s, token, entries, now)
    const lockKey = s.keys.lock(token)
    const lock = s.ks.getString(lockKey, now)
    if (held === "held" && lock !== undefined) s.ks.expire(lockKey, lock, now + s.lockMs, now)
    else s.ks.setString(lockKey, lockId, now + s.lockMs)
    return { _tag: "Written", queued }
  },
  read: (reply): Guarded<number> =>
    reply._tag === "Lost"
      ? { _tag: "Lost", holder: Option.fromNullishOr(reply.holder) }
      : { _tag: "Done", value: reply.queued },
  wrote: (reply, { entries }) => wrote(entries)(reply),
  check: ({ claim, entries, instanceId, token }) =>
    tokenError(token) ??
    sliceNamesError(entries.map(([name]) => name)) ??
    claimError(claim) ??
    (instanceId === "" ? undefined : instanceIdError(instanceId))
})
