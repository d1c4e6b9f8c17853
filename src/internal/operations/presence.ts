/**
 * A worker's presence entry: refreshed with its TTL in one step that also tells whether it
 * was still there (a worker whose entry lapsed checks its records). Reads and deletes of
 * the entry are plain commands.
 *
 * @internal
 */
import { instanceIdError } from "../validate.js"
import { describe } from "./operation.js"

/** @internal */
export interface Args {
  readonly instanceId: string
  /** Whole milliseconds, at least 1. */
  readonly ttlMs: number
}

/** @internal */
export const refresh = describe({
  name: "refreshPresence",
  keys: ["presence"],
  args: ["ttlMs"],
  body: () => `
local was = redis.call("EXISTS", presence)
redis.call("SET", presence, "1", "PX", ttlMs)
return was
`,
  decode: (reply): boolean | undefined => (reply === 1 ? true : reply === 0 ? false : undefined),
  input: ({ keys }, { instanceId, ttlMs }: Args) => ({
    keys: { presence: keys.presence(instanceId) },
    args: { ttlMs }
  }),
  memory: (s, now, { instanceId, ttlMs }): boolean => {
    const key = s.keys.presence(instanceId)
    const was = s.ks.get(key, now) !== undefined
    s.ks.setString(key, "1", now + ttlMs)
    return was
  },
  check: ({ instanceId }) => instanceIdError(instanceId)
})
