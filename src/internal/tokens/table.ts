/**
 * The local socket table of a token manager: which connection of this worker holds each
 * token, under which record (ours, or another socket's that it adopted), and the state
 * every reader and writer of the table shares: the store, the maintenance permit and the
 * current store-failure episode, the links in flight, and the sockets that lost their token
 * to another worker. Also the lookup of a token's owner, which answers from the table
 * first and adopts a record the store shows another socket won.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import type * as Semaphore from "effect/Semaphore"
import type { SocketRecord, Store } from "../../Store.js"
import type { StoreError } from "../../StoreError.js"
import { withSpan } from "../tracing.js"
import { validateToken } from "../validate.js"

/**
 * Tokens of local sockets found held by another socket, whose record was adopted.
 *
 * @internal
 */
export const recordsAdopted = Metric.counter("leasehold_socket_records_adopted_total", {
  description: "tokens of local sockets found held by another socket, whose record was adopted",
  incremental: true
})

/** A socket of this worker: its connection and the record it stands for (ours, or adopted). */
export interface Entry {
  readonly connectionId: string
  readonly record: SocketRecord
}

export const sameRecord = (a: SocketRecord, b: SocketRecord): boolean =>
  a.instanceId === b.instanceId && a.connectionId === b.connectionId

/**
 * A socket of this worker whose token another worker's socket holds now (it took the
 * record over, or won it while ours was not written): the app closes it, and its tab
 * reconnects to the worker that holds the token.
 *
 * @internal
 */
export interface LostSocket {
  readonly token: string
  readonly connectionId: string
  /** The record there now. */
  readonly holder: SocketRecord
}

/** How many lost tokens the table remembers (for the mailbox, which drops their old updates). */
const lostRemembered = 10_000

/** How many record deletions or refreshes are in flight at once. */
export const concurrentWrites = 16

/**
 * The table and what goes with it, built once by `TokenManager.make`.
 *
 * @internal
 */
export interface LinkTable {
  readonly store: Store.Service
  readonly instanceId: string
  readonly entries: Map<string, Entry>
  /** Restores, refreshes and re-claims run one at a time: each reads the map, then applies what the store said. */
  readonly maintenance: Semaphore.Semaphore
  /** One warning per failure episode: a store that is down fails every write until it returns. */
  failing: boolean
  /** Links whose claim or take-over is in flight, as `<token> <connectionId>` (a token has no space). */
  readonly linking: Set<string>
  /** Tokens a socket of ours lost to another worker, oldest first, until linked here again. */
  readonly lostTokens: Set<string>
  /** Every socket that lost its token, as it happens. */
  readonly lost: PubSub.PubSub<LostSocket>
  /**
   * Entries linked while the store failed, whose record has not been written yet. Another
   * socket's record found in their place when the store returns may be a dead worker's: its
   * owner is judged before the entry adopts it (`claims.ts`).
   */
  readonly unstored: WeakSet<Entry>
}

const linkKey = (token: string, connectionId: string) => `${token} ${connectionId}`

/** Mark a link of `token` to `connectionId` as in flight until `effect` ends. */
export const whileLinking = <A, E, R>(
  table: LinkTable,
  token: string,
  connectionId: string,
  effect: Effect.Effect<A, E, R>
) =>
  Effect.acquireUseRelease(
    Effect.sync(() => table.linking.add(linkKey(token, connectionId))),
    () => effect,
    () => Effect.sync(() => table.linking.delete(linkKey(token, connectionId)))
  )

export const isLinking = (table: LinkTable, token: string, connectionId: string): boolean =>
  table.linking.has(linkKey(token, connectionId))

/** Record that a socket of ours lost `token`, and tell the app. */
const markLost = (table: LinkTable, token: string, connectionId: string, holder: SocketRecord) => {
  const { lostTokens } = table
  lostTokens.delete(token)
  lostTokens.add(token)
  if (lostTokens.size > lostRemembered) {
    const oldest = lostTokens.values().next()
    if (oldest.done !== true) lostTokens.delete(oldest.value)
  }
  return PubSub.publish(table.lost, { token, connectionId, holder })
}

export const isOurs = (table: LinkTable, entry: Entry): boolean =>
  entry.record.instanceId === table.instanceId && entry.record.connectionId === entry.connectionId

export const storeFailed = (table: LinkTable, what: string, error: StoreError) =>
  Effect.suspend(() => {
    if (table.failing) return Effect.void
    table.failing = true
    return Effect.logWarning(
      `socket records: ${what} failed, kept locally and written when the store returns: ${error.message}`
    )
  })

export const storeWorked = (table: LinkTable) =>
  Effect.suspend(() => {
    if (!table.failing) return Effect.void
    table.failing = false
    return Effect.logInfo("socket records: the store answers again")
  })

/** Another socket holds the token now: keep our connection's entry, with that socket's record. */
export const adopt = (table: LinkTable, token: string, entry: Entry, record: SocketRecord) =>
  Effect.suspend(() => {
    const { entries } = table
    // The socket disconnected (or linked again) since the record was read: nothing to adopt for it.
    if (entries.get(token) !== entry) return Effect.void
    entries.set(token, { connectionId: entry.connectionId, record })
    return Effect.andThen(
      Effect.andThen(
        Metric.update(recordsAdopted, 1),
        Effect.logInfo(`socket records: token ${token} is held by ${record.instanceId} now; adopted its record`)
      ),
      // Only a socket that held the token under its own record lost it; one that had adopted already was told.
      isOurs(table, entry) ? markLost(table, token, entry.connectionId, record) : Effect.void
    )
  })

/** `TokenManager.owner`. */
export const owner = (table: LinkTable, token: string, options?: { readonly refresh?: boolean }) => {
  const { store, entries } = table
  return Effect.gen(function* () {
    yield* validateToken(token)
    const entry = entries.get(token)
    if (entry !== undefined && options?.refresh !== true) return Option.some(entry.record)
    const stored = yield* store
      .readSocket(token)
      .pipe(
        Effect.catchTag("CorruptValue", (error) =>
          Effect.as(Effect.logWarning(`socket records: ${error.message}`), Option.none<SocketRecord>())
        )
      )
    if (entry === undefined || entries.get(token) !== entry) return stored
    if (Option.isNone(stored)) {
      // Our socket is live and its record is being claimed again: we still hold it.
      return isOurs(table, entry) ? Option.some(entry.record) : stored
    }
    // A record never stored: the restore judges the owner of the one found, and settles it.
    if (table.unstored.has(entry)) return Option.some(entry.record)
    if (!sameRecord(stored.value, entry.record)) yield* adopt(table, token, entry, stored.value)
    return stored
  }).pipe(withSpan("TokenManager.owner"))
}
