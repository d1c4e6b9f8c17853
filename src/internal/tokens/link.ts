/**
 * Linking and unlinking the sockets of a token manager: claiming a token's record
 * atomically and linking it locally in the same step; when another socket's record is
 * there, asking its owner (`presence.ts`) and taking the record over by compare-and-set
 * when that socket is gone, or a fresh token for a duplicate tab; and unlinking (the local entry first, then our record, deleted whatever happens to the
 * caller), one socket at a time or all of them on shutdown.
 *
 * @internal
 */
import { randomUUID } from "node:crypto"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type { SocketRecord } from "../../Store.js"
import { type CorruptValue, RecordNotStored, type StoreError } from "../../StoreError.js"
import type { Linked } from "../../TokenManager.js"
import { withSpan } from "../tracing.js"
import { validateToken } from "../validate.js"
import { judge, type Presence } from "./presence.js"
import {
  concurrentWrites,
  type Entry,
  isOurs,
  type LinkTable,
  sameRecord,
  storeFailed,
  storeWorked,
  whileLinking
} from "./table.js"

/**
 * Sockets linked with a record of their own (fresh tokens included).
 *
 * @internal
 */
export const links = Metric.counter("leasehold_socket_links_total", {
  description: "sockets linked with a new socket record",
  incremental: true
})

/**
 * Links of a token already held by another socket, answered with a fresh token.
 *
 * @internal
 */
export const duplicates = Metric.counter("leasehold_socket_duplicates_total", {
  description: "links of a token already linked elsewhere, given a fresh token",
  incremental: true
})

/**
 * Records taken over from a worker that was gone (dead, or its socket closed), instead of
 * a fresh token: by a link, or by the restore of a link the store failed.
 *
 * @internal
 */
export const takeovers = Metric.counter("leasehold_socket_takeovers_total", {
  description: "records of a gone socket taken over by a link of its token (or its restore), which kept its token",
  incremental: true
})

/** Rounds of claim, question and take-over before a link settles for a fresh token. */
const takeOverRounds = 3

/** Tries at a fresh token: a random UUID is never taken, a store that says otherwise is broken. */
const freshAttempts = 3

/**
 * Delete our record of `token` whatever happens to the caller (a record left behind
 * would make the tab's next connect a duplicate). It runs in a fiber of its own that
 * stays interruptible, because the store's timeouts work by interruption: in an
 * uninterruptible region a store that is down would never time out.
 */
const forget = (table: LinkTable, token: string, record: SocketRecord, what: string): Effect.Effect<void> =>
  table.store.deleteSocketIfOwner(token, record).pipe(
    Effect.andThen(storeWorked(table)),
    Effect.catchTag(["InvalidToken", "InvalidInstanceId"], () => Effect.void),
    Effect.catch((error) => storeFailed(table, what, error)),
    Effect.interruptible,
    Effect.forkChild,
    Effect.flatMap(Fiber.join)
  )

/** Unlink an entry: the map first, so our own deletion event finds nothing to re-claim. */
const unlink = (table: LinkTable, token: string, entry: Entry): Effect.Effect<void> =>
  Effect.uninterruptible(
    Effect.suspend(() => {
      if (table.entries.get(token) !== entry) return Effect.void
      table.entries.delete(token)
      if (!isOurs(table, entry)) return Effect.void
      return forget(table, token, entry.record, `deleting the record of token ${token}`)
    })
  )

/**
 * Ours; or another socket's record there; or none any more (a take-over found the record
 * gone); or one that does not decode, which still names some other socket.
 *
 * @internal
 */
export type Claim =
  | { readonly _tag: "ours" }
  | { readonly _tag: "taken"; readonly record: SocketRecord }
  | { readonly _tag: "absent" }
  | { readonly _tag: "corrupt" }

const ours: Claim = { _tag: "ours" }
const corrupt = (token: string) => (error: CorruptValue) =>
  Effect.as(Effect.logWarning(`socket records: token ${token} treated as taken: ${error.message}`), {
    _tag: "corrupt"
  } satisfies Claim)

/**
 * Claim `token`'s record for `record` (SET NX, read back): ours when it is there now.
 *
 * @internal
 */
export const claim = (table: LinkTable, token: string, record: SocketRecord): Effect.Effect<Claim, StoreError> =>
  table.store.claimSocket(token, record).pipe(
    Effect.map(
      (result): Claim =>
        result._tag === "Claimed" || sameRecord(result.record, record) ? ours : { _tag: "taken", record: result.record }
    ),
    Effect.catchTags({
      // A record nobody can read still names some other socket: the token is not free.
      CorruptValue: corrupt(token),
      InvalidToken: (error) => Effect.die(error),
      InvalidInstanceId: (error) => Effect.die(error)
    })
  )

/**
 * Compare-and-set of the record as read; what is there instead when it changed.
 *
 * @internal
 */
export const takeOver = (table: LinkTable, token: string, expected: SocketRecord, record: SocketRecord) =>
  table.store.takeOverSocket(token, expected, record).pipe(
    Effect.map(
      (result): Claim =>
        result._tag === "TakenOver"
          ? ours
          : Option.match(result.record, {
              onNone: () => ({ _tag: "absent" }),
              onSome: (found) => ({ _tag: "taken", record: found })
            })
    ),
    Effect.catchTags({
      CorruptValue: corrupt(token),
      InvalidToken: (error) => Effect.die(error),
      InvalidInstanceId: (error) => Effect.die(error)
    })
  )

const linkAs = (
  table: LinkTable,
  token: string,
  connectionId: string,
  fresh: boolean,
  how: { readonly takenOver?: boolean; readonly stored?: boolean } = {}
) =>
  Effect.sync((): Linked => {
    const entry: Entry = { connectionId, record: { instanceId: table.instanceId, connectionId } }
    table.entries.set(token, entry)
    if (how.stored === false) table.unstored.add(entry)
    table.lostTokens.delete(token)
    return { token, fresh, takenOver: how.takenOver === true }
  })

const notStored = (table: LinkTable, token: string, connectionId: string, fresh: boolean) => (cause: StoreError) =>
  Effect.andThen(
    Effect.andThen(
      linkAs(table, token, connectionId, fresh, { stored: false }),
      storeFailed(table, `linking token ${token}`, cause)
    ),
    Effect.fail(
      fresh
        ? new RecordNotStored({ token, connectionId, cause, fresh: true })
        : new RecordNotStored({ token, connectionId, cause })
    )
  )

/** A link made, or what was found in its way. */
type Outcome = { readonly _tag: "Linked"; readonly linked: Linked } | Exclude<Claim, { readonly _tag: "ours" }>

/**
 * Claim `token` (or, with `expected`, take its record over from `expected`) and, when it is
 * ours, link it locally in the same step; otherwise the record found there. While the step
 * is in flight the link counts as made for the owner's questions, so a worker asking about
 * a record just written is told it is linked. A step interrupted in flight may have been
 * applied all the same, so its record is deleted again; once it answered, the local link
 * is made without a gap.
 */
const claimAndLink = (
  table: LinkTable,
  token: string,
  connectionId: string,
  fresh: boolean,
  expected?: SocketRecord
): Effect.Effect<Outcome, RecordNotStored> => {
  const record: SocketRecord = { instanceId: table.instanceId, connectionId }
  const step = expected === undefined ? claim(table, token, record) : takeOver(table, token, expected, record)
  return Effect.uninterruptibleMask((restore) =>
    whileLinking(
      table,
      token,
      connectionId,
      restore(step).pipe(
        Effect.onInterrupt(() => forget(table, token, record, `deleting the record of interrupted link ${token}`)),
        Effect.catch(notStored(table, token, connectionId, fresh)),
        Effect.flatMap((outcome) =>
          outcome._tag !== "ours"
            ? Effect.succeed<Outcome>(outcome)
            : Effect.andThen(
                Effect.andThen(Metric.update(expected === undefined ? links : takeovers, 1), storeWorked(table)),
                linkAs(table, token, connectionId, fresh, { takenOver: expected !== undefined })
              ).pipe(Effect.map((linked): Outcome => ({ _tag: "Linked", linked })))
        )
      )
    )
  )
}

const linkFresh = (table: LinkTable, connectionId: string) =>
  Effect.gen(function* () {
    yield* Metric.update(duplicates, 1)
    for (let attempt = 0; attempt < freshAttempts; attempt++) {
      const linked = yield* claimAndLink(table, randomUUID(), connectionId, true)
      if (linked._tag === "Linked") return linked.linked
    }
    return yield* Effect.die(new Error(`socket records: ${freshAttempts} fresh tokens in a row were taken`))
  })

/**
 * Claim the token; while another socket's record is there, ask its owner, and take the
 * record over (as read) when that socket is gone. `None`: the tab is a duplicate.
 */
const claimOrTakeOver = (presence: Presence, token: string, connectionId: string) =>
  Effect.gen(function* () {
    const { table } = presence
    let found = yield* claimAndLink(table, token, connectionId, false)
    for (let round = 0; round < takeOverRounds; round++) {
      if (found._tag === "Linked") return Option.some(found.linked)
      // The record vanished meanwhile: an ordinary claim again.
      if (found._tag === "absent") {
        found = yield* claimAndLink(table, token, connectionId, false)
        continue
      }
      // A record that does not decode names nobody to ask.
      if (found._tag === "corrupt") return Option.none()
      const holder = found.record
      const verdict = yield* judge(presence, token, holder).pipe(
        Effect.catch((error) =>
          Effect.as(
            Effect.logWarning(`socket records: the owner of token ${token} could not be asked: ${error.message}`),
            "unsure" as const
          )
        )
      )
      if (verdict !== "gone") {
        if (verdict === "unsure") {
          yield* Effect.logInfo(
            `socket records: token ${token} is held by ${holder.instanceId}, whose presence this worker cannot judge yet; a fresh token instead`
          )
        }
        return Option.none()
      }
      yield* Effect.logInfo(
        `socket records: token ${token}: the socket of ${holder.instanceId} is gone; taking its record over`
      )
      found = yield* claimAndLink(table, token, connectionId, false, holder)
    }
    return found._tag === "Linked" ? Option.some(found.linked) : Option.none()
  })

/** `TokenManager.link`. */
export const link = (presence: Presence, token: string, connectionId: string) => {
  const { table } = presence
  return Effect.gen(function* () {
    yield* validateToken(token)
    const current = table.entries.get(token)
    if (current !== undefined && current.connectionId === connectionId && isOurs(table, current)) {
      return { token, fresh: false, takenOver: false } satisfies Linked
    }
    // Another live socket of ours holds the token: a duplicate, known without asking the store.
    if (current !== undefined && isOurs(table, current)) return yield* linkFresh(table, connectionId)
    const linked = yield* claimOrTakeOver(presence, token, connectionId)
    return Option.isSome(linked) ? linked.value : yield* linkFresh(table, connectionId)
  }).pipe(withSpan("TokenManager.link"), Effect.annotateLogs({ instanceId: table.instanceId, token }))
}

/** `TokenManager.disconnect`. */
export const disconnect = (table: LinkTable, token: string, connectionId: string) =>
  Effect.gen(function* () {
    yield* validateToken(token)
    const entry = table.entries.get(token)
    if (entry === undefined || entry.connectionId !== connectionId) return
    yield* unlink(table, token, entry)
  }).pipe(withSpan("TokenManager.disconnect"), Effect.annotateLogs({ instanceId: table.instanceId, token }))

/** `TokenManager.disconnectAll`. */
export const disconnectAll = (table: LinkTable) =>
  Effect.suspend(() =>
    Effect.forEach(
      [...table.entries],
      ([token, entry]) =>
        // Once the store failed, the rest are only unlinked locally: shutdown does not wait
        // a command timeout per socket. Their records expire.
        table.failing
          ? Effect.sync(() => table.entries.get(token) === entry && table.entries.delete(token))
          : unlink(table, token, entry),
      { concurrency: concurrentWrites, discard: true }
    )
  ).pipe(withSpan("TokenManager.disconnectAll"))
