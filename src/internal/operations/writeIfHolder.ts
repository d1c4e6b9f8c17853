/**
 * `writeIfHolder`: write every slice (with its TTL, and the fence's TTL with them) only while
 * `lockId` holds the lock, or takes it back with `claim` (`holderOrClaim`). Asked to
 * (`extend`), it extends the lock to a full lock expiration too, as `extend` does; asked to
 * (an `instanceId`), it counts the live queue entries other than that worker's, as
 * `queueLength` does, before anything is written (-1 in the reply when not asked). A lease's
 * writes carry its keep-alive and its renewal's look when they are due, instead of requests
 * of their own. SET and PEXPIRE take a key of any type, so no write can fail half-way.
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
import { countQueued, ids, serverClock } from "./queueLua.js"
import { wrote } from "./wrote.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly entries: ReadonlyArray<SliceEntry>
  /** The fence of the grant that handed `lockId` over (`Store.HolderOptions`), or `undefined`. */
  readonly claim: number | undefined
  /** Count the workers queued, leaving out this one's own entry; `undefined`: no count. */
  readonly instanceId: string | undefined
  /** Extend the lock to a full lock expiration. */
  readonly extend: boolean
}

/** The reply: written, with the other workers queued (`undefined`: not counted); or lost. @internal */
export type Reply =
  | { readonly _tag: "Written"; readonly queued: number | undefined }
  | Exclude<HolderCheck, { _tag: "Written" }>

/** `{1, queued}` written (-1: not counted), `{0, holder}` lost. */
const decode = (reply: unknown): Reply | undefined => {
  const check = decodeHolderCheck(reply)
  if (check === undefined || check._tag === "Lost") return check
  const queued = asArray(reply)?.[1]
  if (typeof queued !== "number" || queued < -1) return undefined
  return { _tag: "Written", queued: queued === -1 ? undefined : queued }
}

/** @internal */
export const operation = describeAcknowledged({
  name: "writeIfHolder",
  keys: ["lock", "fence", "queue", "ids", "deadlines"],
  restKeys: "slices",
  // instanceId: "" for no count; extend: "1" to extend the lock
  args: ["lockId", "claim", "lockMs", "tokenMs", "instanceId", "extend"],
  restArgs: "values",
  body: () => `${serverClock}${ids}${holderOrClaim()}
local quiet = instanceId == "" or redis.call("EXISTS", deadlines) == 0
local now = quiet and 0 or serverMillis()
${countQueued}
if instanceId == "" then
  queued = -1
end
-- the writes after the reads: once a script has written, Redis lets it write past maxmemory,
-- and an out-of-memory refusal must come before anything is written
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
if reclaimed then
  redis.call("SET", lock, lockId, "PX", lockMs)
elseif extend == "1" then
  redis.call("PEXPIRE", lock, lockMs)
end
return {1, queued}
`,
  decode,
  input: ({ keys, lockMs, tokenMs }, { claim, entries, extend, instanceId, lockId, token }: Args) => ({
    keys: {
      lock: keys.lock(token),
      fence: keys.fence(token),
      queue: keys.queue(token),
      ids: keys.queueIds(token),
      deadlines: keys.queueDeadlines(token)
    },
    restKeys: entries.map(([name]) => keys.slice(token, name)),
    args: { lockId, claim: claimArg(claim), lockMs, tokenMs, instanceId: instanceId ?? "", extend: extend ? "1" : "" },
    restArgs: entries.map(([, value]) => value)
  }),
  memory: (s, now, { claim, entries, extend, instanceId, lockId, token }): Reply => {
    const held = heldOrReclaimed(s, now, token, lockId, claim)
    if (typeof held !== "string") return held
    const queued =
      instanceId === undefined
        ? undefined
        : countQueuedSteps(s.ks.getSet(s.keys.queueDeadlines(token), now), instanceId, now)
    writeSlices(s, token, entries, now)
    const lockKey = s.keys.lock(token)
    const lock = s.ks.getString(lockKey, now)
    if (held === "reclaimed") s.ks.setString(lockKey, lockId, now + s.lockMs)
    else if (extend && lock !== undefined) s.ks.expire(lockKey, lock, now + s.lockMs, now)
    return { _tag: "Written", queued }
  },
  read: (reply): Guarded<number | undefined> =>
    reply._tag === "Lost"
      ? { _tag: "Lost", holder: Option.fromNullishOr(reply.holder) }
      : { _tag: "Done", value: reply.queued },
  wrote: (reply, { entries }) => wrote(entries)(reply),
  check: ({ claim, entries, instanceId, token }) =>
    tokenError(token) ??
    sliceNamesError(entries.map(([name]) => name)) ??
    claimError(claim) ??
    (instanceId === undefined ? undefined : instanceIdError(instanceId))
})
