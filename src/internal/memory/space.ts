/**
 * The embedded store's key space as the operations' `memory` steps see it (`Space`: the key
 * space, the key layout, the store's expirations, its outlets), and the parts those steps
 * share (the fence as INCR reads it, GETEX of slices, the holder check, …). The steps
 * themselves are in the operations' descriptions (`../operations/`); the queue's shared
 * steps are in `./queue.ts`. What is left here of its own is `describeKeys`, the token's
 * keys as `tokenKeys` reads them (the Redis driver scans, then runs a script of its own).
 *
 * Each step is synchronous and runs inside one step of the memory driver, which makes it
 * atomic. Like Redis, a step reads before it writes where a wrong-typed key would refuse
 * it (the typed accessors throw `WrongTypeError`), so a refusal leaves nothing half done.
 *
 * @internal
 */

import * as Option from "effect/Option"
import type { KeyInfo } from "../../Store.js"
import type { Keys } from "../keys.js"
import type { HolderCheck } from "../operations/holderCheck.js"
import { notAnInteger, parseInteger } from "../store/replies.js"
import { isExpired, type Keyspace, type SetEntry, type StreamEntry, type StringEntry } from "./keyspace.js"

/** What a step works on: the key space, the key layout, the store's expirations, and its outlets. */
export interface Space {
  readonly ks: Keyspace
  readonly keys: Keys
  readonly lockMs: number
  readonly tokenMs: number
  /** How long a grant stays pending for the worker it was handed to (the queue's steps). */
  readonly handoffMs: number
  /** PUBLISH: deliver a message to the channel's subscribers. */
  readonly publish: (channel: string, message: string) => void
  /** The keyspace event Redis would publish for a change of `key`. */
  readonly keyEvent: (key: string, event: string) => void
  /** A stream got an entry: wake its blocked readers. */
  readonly appended: (key: string) => void
}

// --- shared parts ---------------------------------------------------------------------

/** The fence as INCR reads it: 0 when absent, `undefined` when not an integer. @internal */
export const readFence = (s: Space, token: string, now: number): number | undefined => {
  const entry = s.ks.getString(s.keys.fence(token), now)
  return entry === undefined ? 0 : parseInteger(entry.value)
}

/** PEXPIRE key tokenExpiration, on a key of any kind; nothing when it is absent. @internal */
export const refreshTokenKey = (s: Space, key: string, now: number): void => {
  const entry = s.ks.get(key, now)
  if (entry !== undefined) s.ks.expire(key, entry, now + s.tokenMs, now)
}

/** GETEX … PX tokenExpiration over every name, in order; reads all before touching any TTL. @internal */
export const readAndRefresh = (s: Space, token: string, names: ReadonlyArray<string>, now: number) => {
  const found = names.map((name) => {
    const key = s.keys.slice(token, name)
    return [key, s.ks.getString(key, now)] as const
  })
  return found.map(([key, entry]) => {
    if (entry === undefined) return null
    s.ks.expire(key, entry, now + s.tokenMs, now)
    return entry.value
  })
}

/** SET each slice PX tokenExpiration, then PEXPIRE the fence: it lives as long as the slices. @internal */
export const writeSlices = (
  s: Space,
  token: string,
  entries: ReadonlyArray<readonly [string, string]>,
  now: number
) => {
  for (const [name, value] of entries) s.ks.setString(s.keys.slice(token, name), value, now + s.tokenMs)
  refreshTokenKey(s, s.keys.fence(token), now)
}

/** PTTL of a lock; -1 (no TTL) exists only through a raw write. @internal */
export const pttl = (lock: StringEntry, now: number): number =>
  lock.deadline === undefined ? -1 : Math.max(0, lock.deadline - now)

/** The reply of a holder check that failed: the holder found, `null` for none. @internal */
export const lost = (lock: StringEntry | undefined): Lost => ({ _tag: "Lost", holder: lock?.value ?? null })

/** A holder check that failed: the holder found (`null`: none). @internal */
export type Lost = Extract<HolderCheck, { readonly _tag: "Lost" }>

/** The lock id `worker` is recorded under in a queue's `ids` set (`<worker> <lock id>`), if any. @internal */
export const recordedId = (ids: SetEntry | undefined, worker: string): string | undefined => {
  const head = `${worker} `
  for (const member of ids?.members.keys() ?? []) if (member.startsWith(head)) return member.slice(head.length)
  return undefined
}

/**
 * The holder check of the steps that write or extend under a lock (as the scripts'
 * `holderOrClaim`): `"held"` when `lockId` holds the lock; `"reclaimed"` when `claim` is
 * the fence of the grant that handed `lockId` over and nobody was granted the lock since
 * that grant expired unused (the lock free, the fence still at the claim, the worker of
 * `lockId` recorded under it and no longer queued); else `Lost`.
 *
 * @internal
 */
export const holderOrClaim = (
  s: Space,
  now: number,
  token: string,
  lockId: string,
  claim: number | undefined
): "held" | "reclaimed" | Lost => {
  const lock = s.ks.getString(s.keys.lock(token), now)
  if (lock?.value === lockId) return "held"
  const worker = lockId.slice(0, Math.max(0, lockId.lastIndexOf(":")))
  const free =
    lock === undefined &&
    claim !== undefined &&
    worker !== "" &&
    s.ks.getString(s.keys.fence(token), now)?.value === String(claim) &&
    s.ks.getSet(s.keys.queue(token), now)?.members.has(worker) !== true &&
    recordedId(s.ks.getSet(s.keys.queueIds(token), now), worker) === lockId
  return free ? "reclaimed" : lost(lock)
}

/** Thrown when INCR meets a fence that is not an integer: the step is refused. */
export class NotAnInteger extends Error {
  constructor() {
    super(notAnInteger)
  }
}

/** XTRIM MAXLEN ~: keep the newest `maxLen` entries. @internal */
export const trimStream = (stream: StreamEntry, maxLen: number): void => {
  if (!Number.isFinite(maxLen)) return
  const keep = Math.max(0, Math.floor(maxLen))
  if (stream.items.length > keep) stream.items.splice(0, stream.items.length - keep)
}

/** Every live key of the token (the SCAN the Redis driver makes first, then the script's description). @internal */
export const describeKeys = (s: Space, now: number, token: string): ReadonlyArray<KeyInfo> => {
  const head = s.keys.tokenHead(token)
  const found: Array<KeyInfo> = []
  for (const [key, entry] of s.ks.entries) {
    if (!key.startsWith(head) || isExpired(entry, now)) continue
    found.push({
      name: key.slice(head.length),
      kind: entry._tag === "stream" ? "other" : entry._tag,
      size:
        entry._tag === "string"
          ? Buffer.byteLength(entry.value, "utf8")
          : entry._tag === "set"
            ? entry.members.size
            : 0,
      ttlMs: entry.deadline === undefined ? Option.none() : Option.some(entry.deadline - now)
    })
  }
  found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  return found
}
