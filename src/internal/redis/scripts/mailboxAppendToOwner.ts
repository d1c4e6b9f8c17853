/**
 * `mailboxAppendToOwner`: the token's socket record read, and the entry appended to the
 * mailbox of the instance it names, as `mailboxAppend` appends it, in one step. Returns
 * `false` without a record, `{record}` for a record that names no valid instance (not
 * JSON, another shape, an instance id outside `[A-Za-z0-9_.:-]{1,128}`: nothing appended),
 * `{record, id}` once appended.
 *
 * The mailbox's key is built here from the record (`mailboxPrefix` and the instance id),
 * not passed in: on a single server only, where a script may touch any key. On a Cluster
 * the mailbox lives in another slot, and the store makes the two steps.
 *
 * @internal
 */
import { asArray, define } from "../script.js"

/** @internal */
export interface Reply {
  readonly record: string | undefined
  readonly id: string | undefined
}

/** @internal */
export const script = define({
  name: "leaseholdMailboxAppendToOwner",
  keys: ["socket"],
  args: ["mailboxPrefix", "maxLen", "payload", "ttlMs"],
  body: () => `
local raw = redis.call("GET", socket)
if not raw then return false end
local decoded, record = pcall(cjson.decode, raw)
if not decoded or type(record) ~= "table" or type(record.connectionId) ~= "string" then return {raw} end
local instance = record.instanceId
if type(instance) ~= "string" or #instance < 1 or #instance > 128 or not string.match(instance, "^[%w_%.:%-]+$") then
  return {raw}
end
local mailbox = mailboxPrefix .. instance
local id = redis.call("XADD", mailbox, "MAXLEN", "~", maxLen, "*", "payload", payload)
if redis.call("PTTL", mailbox) == -1 then
  redis.call("PEXPIRE", mailbox, ttlMs)
end
return {raw, id}
`,
  decode: (reply): Reply | undefined => {
    if (reply === null) return { record: undefined, id: undefined }
    const parts = asArray(reply)
    if (parts === undefined || parts.length < 1 || parts.length > 2) return undefined
    const [record, id] = parts
    if (typeof record !== "string" || (id !== undefined && typeof id !== "string")) return undefined
    return { record, id }
  }
})
