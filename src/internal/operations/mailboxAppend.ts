/**
 * `mailboxAppend`: XADD with approximate trimming; a stream without an expiry gets one (a
 * reader's longer expiry is kept). Returns the entry id.
 *
 * @internal
 */
import { nextStreamId } from "../memory/keyspace.js"
import { trimStream } from "../memory/space.js"
import { instanceIdError } from "../validate.js"
import { describeAcknowledged } from "./operation.js"

/** @internal */
export interface Args {
  readonly instanceId: string
  readonly payload: string
  /** Passed as given: the store trims to it as Redis' XTRIM does. */
  readonly maxLen: number
  /** Whole milliseconds, at least 1. */
  readonly ttlMs: number
}

/** @internal */
export const operation = describeAcknowledged({
  name: "mailboxAppend",
  keys: ["mailbox"],
  args: ["maxLen", "payload", "ttlMs"],
  body: () => `
local id = redis.call("XADD", mailbox, "MAXLEN", "~", maxLen, "*", "payload", payload)
if redis.call("PTTL", mailbox) == -1 then
  redis.call("PEXPIRE", mailbox, ttlMs)
end
return id
`,
  decode: (reply): string | undefined => (typeof reply === "string" ? reply : undefined),
  input: ({ keys }, { instanceId, maxLen, payload, ttlMs }: Args) => ({
    keys: { mailbox: keys.mailbox(instanceId) },
    args: { maxLen, payload, ttlMs }
  }),
  // XADD (trimmed), and PEXPIRE only on a mailbox without an expiry
  memory: (s, now, { instanceId, maxLen, payload, ttlMs }): string => {
    const key = s.keys.mailbox(instanceId)
    let stream = s.ks.getStream(key, now)
    if (stream === undefined) {
      stream = { _tag: "stream", items: [], lastMs: 0, lastSeq: 0, deadline: undefined }
      s.ks.insert(key, stream)
    }
    if (stream.deadline === undefined) s.ks.expire(key, stream, now + ttlMs, now)
    const { ms, seq } = nextStreamId(stream, now)
    const id = `${ms}-${seq}`
    stream.items.push({ ms, seq, id, payload })
    stream.lastMs = ms
    stream.lastSeq = seq
    trimStream(stream, maxLen)
    s.appended(key)
    return id
  },
  wrote: () => true,
  check: ({ instanceId }) => instanceIdError(instanceId)
})
