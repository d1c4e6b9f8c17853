/**
 * Every store operation described once (`operation.ts`): both drivers run them
 * (`Driver.call`), the front checks their arguments.
 *
 * @internal
 */
import * as CommitAndRelease from "./commitAndRelease.js"
import * as Extend from "./extend.js"
import * as Holder from "./holder.js"
import * as ReadSlices from "./readSlices.js"
import * as Release from "./release.js"
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
export type ReadSlicesArgs = ReadSlices.Args
/** @internal */
export type WriteIfHolderArgs = WriteIfHolder.Args
