/**
 * What both drivers make of a lock script's reply (the Lua's, or its `memory` step's): the
 * time left on a lock, the holder with its fence, and a fence as a grant's notice names it.
 * One reading for both backends, so they cannot drift apart.
 *
 * @internal
 */

import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type { AcquireResult, LockHolder, QueuedAcquireResult } from "../../Store.js"
import { StoreRefused } from "../../StoreError.js"
import type * as AcquireQueued from "../operations/acquireQueued.js"
import type * as Holder from "../operations/holder.js"
import type * as TryAcquire from "../operations/tryAcquire.js"

/**
 * Milliseconds left from a PTTL reply. -1 is a lock without TTL (written by someone else):
 * waiters re-check within a lock expiration.
 *
 * @internal
 */
export const remainingMs = (pttl: number, lockMs: number): number => (pttl >= 0 ? pttl : pttl === -1 ? lockMs : 0)

const integerPattern = /^-?\d+$/

/** A stored counter as INCR reads it: a safe integer, or `undefined` (INCR would refuse it). @internal */
export const parseInteger = (raw: string): number | undefined => {
  if (!integerPattern.test(raw)) return undefined
  const n = Number(raw)
  return Number.isSafeInteger(n) ? n : undefined
}

const fencePattern = /^(0|[1-9]\d{0,15})$/

/**
 * A fence as a grant's notice names it: a whole number in canonical form, as INCR writes it
 * (at most 16 digits, as the scripts check before they name it), or `undefined`.
 *
 * @internal
 */
export const parseFence = (raw: string): number | undefined => {
  if (!fencePattern.test(raw)) return undefined
  const n = Number(raw)
  return Number.isSafeInteger(n) ? n : undefined
}

/** The reply INCR would give to a fence that is not an integer. @internal */
export const notAnInteger = "ERR value is not an integer or out of range"

/** @internal */
export const acquireResult = (reply: TryAcquire.Reply, lockMs: number): AcquireResult =>
  reply._tag === "Held"
    ? { _tag: "Held", remainingMs: remainingMs(reply.pttl, lockMs) }
    : { _tag: "Acquired", fence: reply.fence, values: reply.values.map(Option.fromNullishOr) }

/** @internal */
export const queuedAcquireResult = (reply: AcquireQueued.Reply, lockMs: number): QueuedAcquireResult =>
  reply._tag === "Queued"
    ? { _tag: "Queued", remainingMs: remainingMs(reply.pttl, lockMs) }
    : { _tag: "Acquired", fence: reply.fence, values: reply.values.map(Option.fromNullishOr), queued: reply.queued }

/**
 * The holder named by a reply. The fence lives as long as the slices; a lock outliving it
 * reports 0. A fence that is not an integer is refused, as INCR would refuse it.
 *
 * @internal
 */
export const lockHolder = (
  reply: Holder.Reply,
  lockMs: number
): Result.Result<Option.Option<LockHolder>, StoreRefused> => {
  if (reply._tag === "Free") return Result.succeed(Option.none())
  const fence = reply.fence === null ? 0 : parseInteger(reply.fence)
  if (fence === undefined) return Result.fail(new StoreRefused({ operation: "holder", reply: notAnInteger }))
  return Result.succeed(Option.some({ lockId: reply.lockId, fence, remainingMs: remainingMs(reply.pttl, lockMs) }))
}
