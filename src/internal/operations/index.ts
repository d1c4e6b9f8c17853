/**
 * Every store operation described once (`operation.ts`): both drivers run them
 * (`Driver.call`), the front checks their arguments.
 *
 * @internal
 */
import * as AcquireQueued from "./acquireQueued.js"
import * as CommitAndRelease from "./commitAndRelease.js"
import * as Extend from "./extend.js"
import * as Holder from "./holder.js"
import * as MailboxAppend from "./mailboxAppend.js"
import * as Presence from "./presence.js"
import * as Queue from "./queue.js"
import * as ReadSlices from "./readSlices.js"
import * as Release from "./release.js"
import * as ReleaseQueued from "./releaseQueued.js"
import * as Sockets from "./sockets.js"
import * as TryAcquire from "./tryAcquire.js"
import * as WriteIfHolder from "./writeIfHolder.js"

/** @internal */
export const tryAcquire = TryAcquire.operation
/** @internal */
export const release = Release.operation
/** @internal */
export const writeIfHolder = WriteIfHolder.operation
/** @internal */
export const commitAndRelease = CommitAndRelease.operation
/** @internal */
export const extend = Extend.operation
/** @internal */
export const holder = Holder.operation
/** @internal */
export const readSlices = ReadSlices.operation

/** @internal */
export const acquireQueued = AcquireQueued.operation
/** @internal */
export const releaseQueued = ReleaseQueued.releaseQueued
/** @internal */
export const commitAndReleaseQueued = ReleaseQueued.commitAndReleaseQueued
/** @internal */
export const leaveQueue = Queue.leave
/** @internal */
export const queueLength = Queue.length
/** @internal */
export const queue = Queue.live
/** @internal */
export const claimSocket = Sockets.claim
/** @internal */
export const deleteSocketIfOwner = Sockets.deleteIfOwner
/** @internal */
export const refreshSocket = Sockets.refresh
/** @internal */
export const takeOverSocket = Sockets.takeOver
/** @internal */
export const refreshPresence = Presence.refresh
/** @internal */
export const mailboxAppend = MailboxAppend.operation

/** @internal */
export type ReadSlicesArgs = ReadSlices.Args
/** @internal */
export type WriteIfHolderArgs = WriteIfHolder.Args
/** @internal */
export type AcquireQueuedArgs = AcquireQueued.Args
/** @internal */
export type ReleaseQueuedArgs = ReleaseQueued.Args
/** @internal */
export type CommitAndReleaseQueuedArgs = ReleaseQueued.CommitArgs
