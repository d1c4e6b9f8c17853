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

/** @internal */
export type TakeOverReply = { readonly _tag: "TakenOver" } | { readonly _tag: "Changed"; readonly raw: string | null }

/**
 * Compare-and-set on the record alone: overwrite it with `record` only while it still names
 * exactly the expected instance and connection (decoded inside the script, as the owner
 * checks do); otherwise write nothing and return the record there, or none. The owner's
 * presence is not read here: it lives in another slot, and was only the caller's reason to
 * try.
 */
export const takeOver = define({
  name: "leaseholdTakeOverSocket",
  keys: ["socket"],
  args: ["expectedInstance", "expectedConnection", "record", "tokenMs"],
  body: () => `
local raw = redis.call("GET", socket)
if not raw then
  return {0}
end
local ok, stored = pcall(cjson.decode, raw)
if not ok or type(stored) ~= "table" or stored.instanceId ~= expectedInstance or stored.connectionId ~= expectedConnection then
  return {0, raw}
end
redis.call("SET", socket, record, "PX", tokenMs)
return {1}
`,
  decode: (reply): TakeOverReply | undefined => {
    const list = asArray(reply)
    if (list?.[0] === 1 && list.length === 1) return { _tag: "TakenOver" }
    if (list?.[0] === 0 && list.length === 1) return { _tag: "Changed", raw: null }
    if (list?.[0] === 0 && typeof list[1] === "string") return { _tag: "Changed", raw: list[1] }
    return undefined
  }
})
