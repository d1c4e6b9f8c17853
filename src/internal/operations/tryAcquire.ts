/**
 * `tryAcquire`: take the lock if it is free, with the fence incremented and the requested
 * slices read (their TTL refreshed) in the same step; when held, `pttl`. It neither reads nor
 * writes the token's queue (that is `acquireQueued`).
 *
 * Redis does not roll back a script that fails half-way: a read that fails (a slice key of
 * the wrong type) deletes the lock it just took.
 *
 * @internal
 */

import { NotAnInteger, pttl, readAndRefresh, readFence } from "../memory/space.js"
import { asArray, asNullableString, asNumber } from "../redis/script.js"
import { acquireResult } from "../store/replies.js"
import { sliceNamesError, tokenError } from "../validate.js"
import { describeAcknowledged, unexpectedReply } from "./operation.js"
import { granted } from "./wrote.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly slices: ReadonlyArray<string>
}

/** @internal */
export type Reply =
  | {
      readonly _tag: "Acquired"
      readonly fence: number
      /** One per slice key, `null` where missing. */
      readonly values: ReadonlyArray<string | null>
    }
  | { readonly _tag: "Held"; readonly pttl: number }

/** @internal */
export const operation = describeAcknowledged({
  name: "tryAcquire",
  keys: ["lock", "fence"],
  restKeys: "slices",
  args: ["lockId", "lockMs", "tokenMs"],
  body: () => `
if not redis.call("SET", lock, lockId, "NX", "PX", lockMs) then
  return {0, redis.call("PTTL", lock)}
end
-- false (not nil) marks a missing slice: a Lua array ends at its first nil
local result = {1, 0}
for i, key in ipairs(slices) do
  local value = redis.pcall("GETEX", key, "PX", tokenMs)
  if type(value) == "table" and value.err then
    redis.call("DEL", lock)
    return value
  end
  result[i + 2] = value
end
local fenced = redis.pcall("INCR", fence)
if type(fenced) == "table" and fenced.err then
  redis.call("DEL", lock)
  return fenced
end
redis.call("PEXPIRE", fence, tokenMs)
result[2] = fenced
return result
`,
  decode: (reply): Reply | undefined => {
    const list = asArray(reply)
    if (list?.[0] === 1) {
      const fence = asNumber(list[1])
      const values = list.slice(2).map(asNullableString)
      if (fence === undefined || values.some((value) => value === undefined)) return
      return { _tag: "Acquired", fence, values: values as ReadonlyArray<string | null> }
    }
    const pttl = asNumber(list?.[1])
    if (list?.[0] === 0 && pttl !== undefined) return { _tag: "Held", pttl }
    return undefined
  },
  input: ({ keys, lockMs, tokenMs }, { lockId, slices, token }: Args) => ({
    keys: { lock: keys.lock(token), fence: keys.fence(token) },
    restKeys: slices.map((name) => keys.slice(token, name)),
    args: { lockId, lockMs, tokenMs }
  }),
  memory: (s, now, { lockId, slices, token }): Reply => {
    const lockKey = s.keys.lock(token)
    const lock = s.ks.getString(lockKey, now)
    if (lock !== undefined) return { _tag: "Held", pttl: pttl(lock, now) }
    const fence = readFence(s, token, now)
    if (fence === undefined) throw new NotAnInteger()
    const values = readAndRefresh(s, token, slices, now)
    s.ks.setString(lockKey, lockId, now + s.lockMs)
    s.ks.setString(s.keys.fence(token), String(fence + 1), now + s.tokenMs)
    return { _tag: "Acquired", fence: fence + 1, values }
  },
  read: (reply, { slices }, lockMs) =>
    reply._tag === "Acquired" && reply.values.length !== slices.length
      ? unexpectedReply("tryAcquire", reply)
      : acquireResult(reply, lockMs),
  wrote: granted,
  check: ({ slices, token }) => tokenError(token) ?? sliceNamesError(slices)
})
