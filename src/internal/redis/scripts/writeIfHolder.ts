/**
 * `writeIfHolder`: write every slice (with its TTL, and the fence's TTL with them) only while
 * `lockId` holds the lock. SET and PEXPIRE take a key of any type, so no write can fail
 * half-way.
 *
 * @internal
 */
import { asArray, asNullableString, define } from "../script.js"

/** @internal */
export type Reply = { readonly _tag: "Written" } | { readonly _tag: "Lost"; readonly holder: string | null }

/** @internal */
export const script = define({
  name: "leaseholdWriteIfHolder",
  keys: ["lock", "fence"],
  restKeys: "slices",
  args: ["lockId", "tokenMs"],
  restArgs: "values",
  body: () => `
local holder = redis.call("GET", lock)
if holder ~= lockId then
  return {0, holder}
end
-- the writes first: once a script has written, Redis lets it write past maxmemory, and an
-- out-of-memory refusal must come before anything is written
for i, key in ipairs(slices) do
  redis.call("SET", key, values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
return {1}
`,
  decode: (reply): Reply | undefined => decodeHolderCheck(reply)
})

/** `{1, …}` written, `{0, holder-or-nil}` lost: the reply of the scripts that check the holder first. @internal */
export const decodeHolderCheck = (
  reply: unknown
): { readonly _tag: "Written" } | { readonly _tag: "Lost"; readonly holder: string | null } | undefined => {
  const list = asArray(reply)
  if (list?.[0] === 1) return { _tag: "Written" }
  const holder = asNullableString(list?.[1] ?? null)
  if (list?.[0] === 0 && holder !== undefined) return { _tag: "Lost", holder }
  return undefined
}
