/**
 * A worker's presence entry: refreshed with its TTL in one step that also tells whether it
 * was still there (a worker whose entry lapsed checks its records). Reads and deletes of
 * the entry are plain commands.
 *
 * @internal
 */
import { define } from "../script.js"

/** @internal */
export const refresh = define({
  name: "leaseholdRefreshPresence",
  keys: ["presence"],
  args: ["ttlMs"],
  body: () => `
local was = redis.call("EXISTS", presence)
redis.call("SET", presence, "1", "PX", ttlMs)
return was
`,
  decode: (reply): boolean | undefined => (reply === 1 ? true : reply === 0 ? false : undefined)
})
