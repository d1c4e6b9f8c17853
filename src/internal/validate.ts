/**
 * Validation of what becomes part of a key: tokens, slice names and instance ids
 * (docs/design.md#vocabulary). The store's front runs it before any I/O; nothing that passes is
 * special in a Redis glob, a hash tag or a channel name.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import { InvalidClaim, InvalidInstanceId, InvalidLockId, InvalidSliceName, InvalidToken } from "../StoreError.js"

/**
 * docs/design.md#vocabulary: 1–128 characters of `[A-Za-z0-9_.:-]`. Nothing here is special in a
 * Redis glob or a hash tag.
 */
const tokenPattern = /^[A-Za-z0-9_.:-]{1,128}$/

/**
 * Strings that passed, looked up before the pattern runs: a modification checks its token,
 * the worker's instance id, its lock id and its slice names at every step, most of them
 * the same strings each time. A valid string stays valid, so the set only saves work; it
 * is emptied when full, so it holds at most `knownValidMax` strings of at most 128
 * characters (a string cut out of a larger one may keep that one alive while remembered).
 */
const knownValid = new Set<string>()
const knownValidMax = 1024

/** @internal */
export const tokenProblem = (token: unknown): string | undefined => {
  if (typeof token !== "string") return "not a string"
  if (knownValid.has(token)) return undefined
  if (token.length === 0) return "empty"
  if (token.length > 128) return `longer than 128 characters (${token.length})`
  if (!tokenPattern.test(token)) return "characters outside [A-Za-z0-9_.:-]"
  if (knownValid.size >= knownValidMax) knownValid.clear()
  knownValid.add(token)
  return undefined
}

/** @internal */
export const isValidToken = (token: unknown): token is string => tokenProblem(token) === undefined

/** What is wrong with a token, as the error to fail with; `undefined` when nothing. @internal */
export const tokenError = (token: string): InvalidToken | undefined => {
  const reason = tokenProblem(token)
  return reason === undefined ? undefined : new InvalidToken({ token: String(token), reason })
}

/** What is wrong with an instance id (the token charset: it names keys too), as the error to fail with. @internal */
export const instanceIdError = (instanceId: string): InvalidInstanceId | undefined => {
  const reason = tokenProblem(instanceId)
  return reason === undefined ? undefined : new InvalidInstanceId({ instanceId: String(instanceId), reason })
}

/** The first of `instanceIds` that is not valid, as the error to fail with. @internal */
export const instanceIdsError = (...instanceIds: ReadonlyArray<string>): InvalidInstanceId | undefined => {
  for (const instanceId of instanceIds) {
    const error = instanceIdError(instanceId)
    if (error !== undefined) return error
  }
  return undefined
}

/** Slice names become part of a key: the same charset as tokens. @internal */
export const sliceNamesError = (names: ReadonlyArray<string>): InvalidSliceName | undefined => {
  for (const name of names) {
    const reason = tokenProblem(name)
    if (reason !== undefined) return new InvalidSliceName({ slice: String(name), reason })
  }
  return undefined
}

/** A token together with the instance id a record or signal carries (it names a mailbox key). @internal */
export const tokenAndInstanceError = (
  token: string,
  instanceId: string | undefined
): InvalidToken | InvalidInstanceId | undefined =>
  tokenError(token) ?? (instanceId === undefined ? undefined : instanceIdError(instanceId))

/** @internal */
export const validateToken = (token: string): Effect.Effect<string, InvalidToken> => {
  const error = tokenError(token)
  return error === undefined ? Effect.succeed(token) : Effect.fail(error)
}

/** @internal */
export const validateInstanceId = (instanceId: string): Effect.Effect<string, InvalidInstanceId> => {
  const error = instanceIdError(instanceId)
  return error === undefined ? Effect.succeed(instanceId) : Effect.fail(error)
}

/** The instance id a signal carries, if any. @internal */
export const signalInstance = (signal: { readonly _tag: string; readonly instanceId?: string }): string | undefined =>
  signal._tag === "Contended" ? signal.instanceId : undefined

/**
 * A lock id of the queue steps: never one that starts with `?`, which marks a grant pending
 * for a worker (docs/design.md#the-lock-value-names-its-worker), so a lock id can never pass for
 * one. @internal
 */
export const lockIdError = (lockId: string): InvalidLockId | undefined =>
  typeof lockId === "string" && !lockId.startsWith("?")
    ? undefined
    : new InvalidLockId({ lockId: String(lockId), reason: "a lock id must not start with ?" })

/** The `claim` of `acquireQueued`: a `Granted` notice's fence, a whole number, at least 0. @internal */
export const claimError = (claim: number | undefined): InvalidClaim | undefined =>
  claim === undefined || (Number.isSafeInteger(claim) && claim >= 0)
    ? undefined
    : new InvalidClaim({ claim: String(claim), reason: "a claim is a fence: a whole number, at least 0" })
