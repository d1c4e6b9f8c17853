/**
 * `commitAndRelease`: `writeIfHolder` and `release` in one step. When `lockId` no longer
 * holds the lock nothing at all is written or published. It neither reads nor writes the
 * token's queue (that is `commitAndReleaseQueued`).
 *
 * @internal
 */
import type { SliceEntry } from "../../Store.js"
import { lost, writeSlices } from "../memory/space.js"
import { sliceNamesError, tokenError } from "../validate.js"
import { guardedReply, type HolderCheck, written } from "./holderCheck.js"
import { describeAcknowledged } from "./operation.js"
import { wrote } from "./wrote.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly entries: ReadonlyArray<SliceEntry>
  /** The wire form of the `Released` signal published when it deletes. */
  readonly released: string
}

import { decodeHolderCheck } from "./holderCheck.js"

/** @internal */
export const operation = describeAcknowledged({
  name: "commitAndRelease",
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
  decode: decodeHolderCheck,
  input: ({ keys, tokenMs }, { entries, lockId, released, token }: Args) => ({
    keys: { lock: keys.lock(token), fence: keys.fence(token) },
    restKeys: entries.map(([name]) => keys.slice(token, name)),
    args: { lockId, tokenMs, channel: keys.signal(token), releasedMessage: released },
    restArgs: entries.map(([, value]) => value)
  }),
  memory: (s, now, { entries, lockId, released, token }): HolderCheck => {
    const lockKey = s.keys.lock(token)
    const lock = s.ks.getString(lockKey, now)
    if (lock?.value !== lockId) return lost(lock)
    writeSlices(s, token, entries, now)
    s.ks.delete(lockKey)
    s.publish(s.keys.signal(token), released)
    return written
  },
  read: guardedReply,
  wrote: (reply, { entries }) => wrote(entries)(reply),
  check: ({ entries, token }) => tokenError(token) ?? sliceNamesError(entries.map(([name]) => name))
})
