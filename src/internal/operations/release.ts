/**
 * `release`: compare-and-delete; `released` is published only when it deleted. It neither
 * reads nor writes the token's queue (that is `releaseQueued`).
 *
 * @internal
 */
import { tokenError } from "../validate.js"
import { describe } from "./operation.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  /** The wire form of the `Released` signal published when it deletes. */
  readonly released: string
}

/** @internal */
export interface Reply {
  readonly released: boolean
}

/** @internal */
export const operation = describe({
  name: "release",
  keys: ["lock"],
  args: ["lockId", "channel", "releasedMessage"],
  body: (dialect) => `
if redis.call("GET", lock) == lockId then
  redis.call("DEL", lock)
  redis.call("${dialect.publish}", channel, releasedMessage)
  return 1
end
return 0
`,
  decode: (reply): Reply | undefined => (reply === 1 || reply === 0 ? { released: reply === 1 } : undefined),
  input: ({ keys }, { lockId, released, token }: Args) => ({
    keys: { lock: keys.lock(token) },
    args: { lockId, channel: keys.signal(token), releasedMessage: released }
  }),
  memory: (s, now, { lockId, released, token }): Reply => {
    const lockKey = s.keys.lock(token)
    const deleted = s.ks.getString(lockKey, now)?.value === lockId
    if (deleted) {
      s.ks.delete(lockKey)
      s.publish(s.keys.signal(token), released)
    }
    return { released: deleted }
  },
  check: ({ token }) => tokenError(token)
})
