/**
 * `mailboxAppend`: XADD with approximate trimming; a stream without an expiry gets one (a
 * reader's longer expiry is kept). Returns the entry id.
 *
 * @internal
 */
import { define } from "../script.js"

/** @internal */
export const script = define({
  name: "leaseholdMailboxAppend",
  keys: ["mailbox"],
  args: ["maxLen", "payload", "ttlMs"],
  body: () => `
local id = redis.call("XADD", mailbox, "MAXLEN", "~", maxLen, "*", "payload", payload)
if redis.call("PTTL", mailbox) == -1 then
  redis.call("PEXPIRE", mailbox, ttlMs)
end
return id
`,
  decode: (reply): string | undefined => (typeof reply === "string" ? reply : undefined)
})
