/**
 * Linking and unlinking the sockets of a token manager: claiming a token's record
 * atomically and linking it locally in the same step, a fresh token for a duplicate tab,
 * and unlinking (the local entry first, then our record, deleted whatever happens to the
 * caller), one socket at a time or all of them on shutdown.
 *
 * @internal
 */
import { randomUUID } from "node:crypto"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type { SocketRecord } from "../../Store.js"
import type { StoreError } from "../../StoreError.js"
import type { Linked } from "../../TokenManager.js"
import { validateToken } from "../validate.js"
import { concurrentWrites, type Entry, isOurs, sameRecord, storeFailed, storeWorked, type Table } from "./table.js"

/**
 * `link` made the local link but could not write the socket record: the store failed.
 * The record is written when the store returns (by the restore after resubscription or
 * the periodic refresh), so the socket is reachable again without another `link`.
 *
 * @internal
 */
export class RecordNotStored extends Data.TaggedError("RecordNotStored")<{
  /**
   * The token linked locally: the one asked for, or (with `fresh`) the token minted for a
   * duplicate tab, whose claim is the one that failed.
   */
  readonly token: string
  readonly connectionId: string
  readonly cause: StoreError
  /** Present when `token` is a fresh token: the one asked for was linked elsewhere. */
  readonly fresh?: true
}> {
  override get message(): string {
    return `socket record of ${this.fresh === true ? "fresh token" : "token"} ${this.token} not stored (linked locally): ${this.cause.message}`
  }
}

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

/** Tries at a fresh token: a random UUID is never taken, a store that says otherwise is broken. */
const freshAttempts = 3

/**
 * Delete our record of `token` whatever happens to the caller (a record left behind
 * would make the tab's next connect a duplicate). It runs in a fiber of its own that
 * stays interruptible, because the store's timeouts work by interruption: in an
 * uninterruptible region a store that is down would never time out.
 */
const forget = (table: Table, token: string, record: SocketRecord, what: string): Effect.Effect<void> =>
  table.store.deleteSocketIfOwner(token, record).pipe(
    Effect.zipRight(storeWorked(table)),
    Effect.catchTag("InvalidToken", () => Effect.void),
    Effect.catchAll((error) => storeFailed(table, what, error)),
    Effect.interruptible,
    Effect.fork,
    Effect.flatMap(Fiber.join)
  )

/** Unlink an entry: the map first, so our own deletion event finds nothing to re-claim. */
const unlink = (table: Table, token: string, entry: Entry): Effect.Effect<void> =>
  Effect.uninterruptible(
    Effect.suspend(() => {
      if (table.entries.get(token) !== entry) return Effect.void
      table.entries.delete(token)
      if (!isOurs(table, entry)) return Effect.void
      return forget(table, token, entry.record, `deleting the record of token ${token}`)
    })
  )

type Claim = "ours" | "taken"

const claim = (table: Table, token: string, record: SocketRecord): Effect.Effect<Claim, StoreError> =>
  table.store.claimSocket(token, record).pipe(
    Effect.map((result): Claim => (result._tag === "Claimed" || sameRecord(result.record, record) ? "ours" : "taken")),
    Effect.catchTags({
      // A record nobody can read still names some other socket: the token is not free.
      CorruptValue: (error) =>
        Effect.as(
          Effect.logWarning(`socket records: token ${token} treated as taken: ${error.message}`),
          "taken" as const
        ),
      InvalidToken: (error) => Effect.die(error)
    })
  )

const linkAs = (table: Table, token: string, connectionId: string, fresh: boolean) =>
  Effect.sync((): Linked => {
    table.entries.set(token, { connectionId, record: { instanceId: table.instanceId, connectionId } })
    return { token, fresh }
  })

const notStored = (table: Table, token: string, connectionId: string, fresh: boolean) => (cause: StoreError) =>
  Effect.zipRight(
    Effect.zipRight(linkAs(table, token, connectionId, fresh), storeFailed(table, `linking token ${token}`, cause)),
    Effect.fail(
      fresh
        ? new RecordNotStored({ token, connectionId, cause, fresh: true })
        : new RecordNotStored({ token, connectionId, cause })
    )
  )

/**
 * Claim `token` and, when it is ours, link it locally in the same step: `None` when it is
 * taken. A claim interrupted in flight may have been applied all the same, so its record
 * is deleted again; once the claim answered, the local link is made without a gap.
 */
const claimAndLink = (table: Table, token: string, connectionId: string, fresh: boolean) => {
  const record: SocketRecord = { instanceId: table.instanceId, connectionId }
  return Effect.uninterruptibleMask((restore) =>
    restore(claim(table, token, record)).pipe(
      Effect.onInterrupt(() => forget(table, token, record, `deleting the record of interrupted link ${token}`)),
      Effect.catchAll(notStored(table, token, connectionId, fresh)),
      Effect.flatMap((outcome) =>
        outcome === "taken"
          ? Effect.succeedNone
          : Effect.zipRight(
              Effect.zipRight(Metric.increment(links), storeWorked(table)),
              linkAs(table, token, connectionId, fresh)
            ).pipe(Effect.map(Option.some))
      )
    )
  )
}

const linkFresh = (table: Table, connectionId: string) =>
  Effect.gen(function* () {
    yield* Metric.increment(duplicates)
    for (let attempt = 0; attempt < freshAttempts; attempt++) {
      const linked = yield* claimAndLink(table, randomUUID(), connectionId, true)
      if (Option.isSome(linked)) return linked.value
    }
    return yield* Effect.dieMessage(`socket records: ${freshAttempts} fresh tokens in a row were taken`)
  })

/** `TokenManager.link`. */
export const link = (table: Table, token: string, connectionId: string) =>
  Effect.gen(function* () {
    yield* validateToken(token)
    const current = table.entries.get(token)
    if (current !== undefined && current.connectionId === connectionId && isOurs(table, current)) {
      return { token, fresh: false } satisfies Linked
    }
    // Another live socket of ours holds the token: a duplicate, known without asking the store.
    if (current !== undefined && isOurs(table, current)) return yield* linkFresh(table, connectionId)
    const linked = yield* claimAndLink(table, token, connectionId, false)
    return Option.isSome(linked) ? linked.value : yield* linkFresh(table, connectionId)
  }).pipe(Effect.withSpan("TokenManager.link"), Effect.annotateLogs({ instanceId: table.instanceId, token }))

/** `TokenManager.disconnect`. */
export const disconnect = (table: Table, token: string, connectionId: string) =>
  Effect.gen(function* () {
    yield* validateToken(token)
    const entry = table.entries.get(token)
    if (entry === undefined || entry.connectionId !== connectionId) return
    yield* unlink(table, token, entry)
  }).pipe(Effect.withSpan("TokenManager.disconnect"), Effect.annotateLogs({ instanceId: table.instanceId, token }))

/** `TokenManager.disconnectAll`. */
export const disconnectAll = (table: Table) =>
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
  ).pipe(Effect.withSpan("TokenManager.disconnectAll"))
