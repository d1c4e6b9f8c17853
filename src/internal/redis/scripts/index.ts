/**
 * Every Lua script of `RedisStore`: those of the operations described in `../../operations/`,
 * and the Redis driver's own, one module each (`define` in `../script.ts` gives each its named
 * keys, named arguments and reply decoder). `all` is what `defineCommand` runs over.
 *
 * @internal
 */
import * as Operations from "../../operations/index.js"
import type { AnyScript } from "../script.js"
import * as CommitIfUnchanged from "./commitIfUnchanged.js"
import * as DescribeKeys from "./describeKeys.js"
import * as MailboxAppendToOwner from "./mailboxAppendToOwner.js"

/** @internal */
export const tryAcquire = Operations.tryAcquire.script
/** @internal */
export const release = Operations.release.script
/** @internal */
export const writeIfHolder = Operations.writeIfHolder.script
/** @internal */
export const commitAndRelease = Operations.commitAndRelease.script
/** @internal */
export const extend = Operations.extend.script
/** @internal */
export const holder = Operations.holder.script
/** @internal */
export const readSlices = Operations.readSlices.script
/** @internal */
export const claimSocket = Operations.claimSocket.script
/** @internal */
export const deleteSocketIfOwner = Operations.deleteSocketIfOwner.script
/** @internal */
export const refreshSocket = Operations.refreshSocket.script
/** @internal */
export const takeOverSocket = Operations.takeOverSocket.script
/** @internal */
export const refreshPresence = Operations.refreshPresence.script
/** @internal */
export const mailboxAppend = Operations.mailboxAppend.script
/** @internal */
export const mailboxAppendToOwner = MailboxAppendToOwner.script
/** @internal */
export const describeKeys = DescribeKeys.script
/** @internal */
export const acquireQueued = Operations.acquireQueued.script
/** @internal */
export const releaseQueued = Operations.releaseQueued.script
/** @internal */
export const commitAndReleaseQueued = Operations.commitAndReleaseQueued.script
/** @internal */
export const commitIfUnchanged = CommitIfUnchanged.script
/** @internal */
export const leaveQueue = Operations.leaveQueue.script
/** @internal */
export const queueLength = Operations.queueLength.script
/** @internal */
export const queue = Operations.queue.script

/** @internal */
export const all: ReadonlyArray<AnyScript> = [
  tryAcquire,
  release,
  writeIfHolder,
  commitAndRelease,
  extend,
  holder,
  readSlices,
  claimSocket,
  deleteSocketIfOwner,
  refreshSocket,
  mailboxAppend,
  mailboxAppendToOwner,
  describeKeys,
  acquireQueued,
  releaseQueued,
  commitAndReleaseQueued,
  commitIfUnchanged,
  leaveQueue,
  queueLength,
  queue,
  takeOverSocket,
  refreshPresence
]
