/**
 * The socket-record scripts. A claim is `SET NX` or the record already there, so two
 * workers claiming one token at once get exactly one `Claimed`. Delete and refresh decode
 * the stored record inside the script and touch it only when it names exactly this
 * instance and connection: a record that does not decode is never touched.
 *
 * @internal
 */
import { asArray, define } from "../script.js"

/** @internal */
export type ClaimReply = { readonly _tag: "Claimed" } | { readonly _tag: "Taken"; readonly raw: string }

/** @internal */
export const claim = define({
  name: "leaseholdClaimSocket",
  keys: ["socket"],
  args: ["record", "tokenMs"],
  body: () => `
if redis.call("SET", socket, record, "NX", "PX", tokenMs) then
  return {1}
end
return {0, redis.call("GET", socket)}
`,
  decode: (reply): ClaimReply | undefined => {
    const list = asArray(reply)
    if (list?.[0] === 1) return { _tag: "Claimed" }
    if (list?.[0] === 0 && typeof list[1] === "string") return { _tag: "Taken", raw: list[1] }
    return undefined
  }
})

const ownerCheck = `
local raw = redis.call("GET", socket)
if not raw then
  return 0
end
local ok, stored = pcall(cjson.decode, raw)
if not ok or type(stored) ~= "table" then
  return 0
end
if stored.instanceId ~= instanceId or stored.connectionId ~= connectionId then
  return 0
end
`

const done = (reply: unknown): boolean | undefined => (typeof reply === "number" ? reply === 1 : undefined)

/** @internal */
export const deleteIfOwner = define({
  name: "leaseholdDeleteSocketIfOwner",
  keys: ["socket"],
  args: ["instanceId", "connectionId"],
  body: () => `${ownerCheck}
redis.call("DEL", socket)
return 1
`,
  decode: done
})

/** @internal */
export const refresh = define({
  name: "leaseholdRefreshSocket",
  keys: ["socket"],
  args: ["instanceId", "connectionId", "tokenMs"],
  body: () => `${ownerCheck}
redis.call("PEXPIRE", socket, tokenMs)
return 1
`,
  decode: done
})
