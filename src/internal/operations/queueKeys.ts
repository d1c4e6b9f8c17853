/**
 * What the queue operations share besides their Lua fragments: the keys of a token's lock
 * and queue, and the front's check of a queue step's arguments.
 *
 * @internal
 */
import type { Keys } from "../keys.js"
import { instanceIdError, lockIdError, sliceNamesError, tokenError } from "../validate.js"

/** The keys of a token's lock and queue, as every queue step (and the one-step commit) names them. @internal */
export const queueKeys = (keys: Keys, token: string) => ({
  lock: keys.lock(token),
  fence: keys.fence(token),
  queue: keys.queue(token),
  deadlines: keys.queueDeadlines(token),
  ids: keys.queueIds(token)
})

/** What is wrong with a queue step's token, worker, lock id or slice names. @internal */
export const queueStepError = (token: string, instanceId: string, lockId: string, names: ReadonlyArray<string>) =>
  tokenError(token) ?? instanceIdError(instanceId) ?? lockIdError(lockId) ?? sliceNamesError(names)

/** A release's `queueAs`: a lock id, when given. @internal */
export const queueAsError = (queueAs: string | undefined) => (queueAs === undefined ? undefined : lockIdError(queueAs))
