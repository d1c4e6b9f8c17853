/**
 * The socket-record scripts. A claim is `SET NX` or the record already there, so two
 * workers claiming one token at once get exactly one `Claimed`. Delete and refresh decode
 * the stored record inside the script and touch it only when it names exactly this
 * instance and connection: a record that does not decode is never touched.
 *
 * @internal
 */
import * as Result from "effect/Result"
import type { SocketRecord } from "../../Store.js"
import { decodeSocketRecord, encodeSocketRecord } from "../codec.js"
import type { Space } from "../memory/space.js"
import { asArray } from "../redis/script.js"
import type { RawTakeOver } from "../store/driver.js"
import { instanceIdsError, tokenAndInstanceError, tokenError } from "../validate.js"
import { describe } from "./operation.js"

/** A claim's arguments: the record is encoded for the store. @internal */
export interface ClaimArgs {
  readonly token: string
  readonly record: SocketRecord
}

/** The record a step acts on only while it names exactly this instance and connection. @internal */
export interface OwnerArgs {
  readonly token: string
  readonly instanceId: string
  readonly connectionId: string
}

/** @internal */
export interface TakeOverArgs {
  readonly token: string
  readonly expectedInstance: string
  readonly expectedConnection: string
  readonly record: SocketRecord
}

/** The record under `key` when it decodes to exactly this instance and connection: a corrupt record matches nothing. */
const ownRecord = (s: Space, now: number, key: string, instanceId: string, connectionId: string) => {
  const entry = s.ks.getString(key, now)
  if (entry === undefined) return undefined
  const decoded = decodeSocketRecord(key, entry.value)
  return Result.isSuccess(decoded) &&
    decoded.success.instanceId === instanceId &&
    decoded.success.connectionId === connectionId
    ? entry
    : undefined
}

const ownerCheckOf = ({ instanceId, token }: OwnerArgs) => tokenAndInstanceError(token, instanceId)

/** @internal */
export type ClaimReply = { readonly _tag: "Claimed" } | { readonly _tag: "Taken"; readonly raw: string }

/** @internal */
export const claim = describe({
  name: "claimSocket",
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
  },
  input: ({ keys, tokenMs }, { record, token }: ClaimArgs) => ({
    keys: { socket: keys.socket(token) },
    args: { record: encodeSocketRecord(record), tokenMs }
  }),
  memory: (s, now, { record, token }): ClaimReply => {
    const key = s.keys.socket(token)
    const existing = s.ks.getString(key, now)
    if (existing !== undefined) return { _tag: "Taken", raw: existing.value }
    s.ks.setString(key, encodeSocketRecord(record), now + s.tokenMs)
    s.keyEvent(key, "set")
    return { _tag: "Claimed" }
  },
  check: ({ record, token }) => tokenAndInstanceError(token, record.instanceId)
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
export const deleteIfOwner = describe({
  name: "deleteSocketIfOwner",
  keys: ["socket"],
  args: ["instanceId", "connectionId"],
  body: () => `${ownerCheck}
redis.call("DEL", socket)
return 1
`,
  decode: done,
  input: ({ keys }, { connectionId, instanceId, token }: OwnerArgs) => ({
    keys: { socket: keys.socket(token) },
    args: { instanceId, connectionId }
  }),
  memory: (s, now, { connectionId, instanceId, token }): boolean => {
    const key = s.keys.socket(token)
    if (ownRecord(s, now, key, instanceId, connectionId) === undefined) return false
    s.ks.delete(key)
    s.keyEvent(key, "del")
    return true
  },
  check: ownerCheckOf
})

/** @internal */
export const refresh = describe({
  name: "refreshSocket",
  keys: ["socket"],
  args: ["instanceId", "connectionId", "tokenMs"],
  body: () => `${ownerCheck}
redis.call("PEXPIRE", socket, tokenMs)
return 1
`,
  decode: done,
  input: ({ keys, tokenMs }, { connectionId, instanceId, token }: OwnerArgs) => ({
    keys: { socket: keys.socket(token) },
    args: { instanceId, connectionId, tokenMs }
  }),
  memory: (s, now, { connectionId, instanceId, token }): boolean => {
    const key = s.keys.socket(token)
    const entry = ownRecord(s, now, key, instanceId, connectionId)
    if (entry === undefined) return false
    s.ks.expire(key, entry, now + s.tokenMs, now)
    return true
  },
  check: ownerCheckOf
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
export const takeOver = describe({
  name: "takeOverSocket",
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
  },
  input: ({ keys, tokenMs }, { expectedConnection, expectedInstance, record, token }: TakeOverArgs) => ({
    keys: { socket: keys.socket(token) },
    args: { expectedInstance, expectedConnection, record: encodeSocketRecord(record), tokenMs }
  }),
  memory: (s, now, { expectedConnection, expectedInstance, record, token }): TakeOverReply => {
    const key = s.keys.socket(token)
    const existing = s.ks.getString(key, now)
    if (existing === undefined) return { _tag: "Changed", raw: null }
    if (ownRecord(s, now, key, expectedInstance, expectedConnection) === undefined) {
      return { _tag: "Changed", raw: existing.value }
    }
    s.ks.setString(key, encodeSocketRecord(record), now + s.tokenMs)
    s.keyEvent(key, "set")
    return { _tag: "TakenOver" }
  },
  read: (reply): RawTakeOver =>
    reply._tag === "TakenOver" ? reply : { _tag: "Changed", raw: reply.raw === null ? undefined : reply.raw },
  check: ({ expectedInstance, record, token }) =>
    tokenError(token) ?? instanceIdsError(expectedInstance, record.instanceId)
})
