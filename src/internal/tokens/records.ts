/**
 * Keeping the records of this worker's live sockets in the store: the supervised
 * `sockets` loop, which turns on the store's socket events (or, where the store refuses,
 * refreshes every record's TTL) and re-claims a record as soon as it is deleted or
 * expires, and the passes that write every record of ours back after a subscription or a
 * reconnection, adopting a record another socket won meanwhile.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type { ClaimResult } from "../../Store.js"
import type { CorruptValue, InvalidToken, StoreError, StoreRefused } from "../../StoreError.js"
import type { KeepAlive } from "../../TokenManager.js"
import {
  adopt,
  concurrentWrites,
  type Entry,
  isOurs,
  sameRecord,
  storeFailed,
  storeWorked,
  type Table
} from "./table.js"

/**
 * The name of the supervised loop that keeps socket records.
 *
 * @internal
 */
export const loopName = "sockets"

/**
 * Records of live sockets written back (after a deletion, an expiry, or a store restart).
 *
 * @internal
 */
export const recordsRestored = Metric.counter("leasehold_socket_records_restored_total", {
  description: "records of live sockets written back after they were deleted, expired or lost",
  incremental: true
})

/** Records claimed again per round trip: bounds one pipeline, not the number of records. */
const restoreBatch = 1_000

/**
 * The state of the `sockets` loop, built once by `TokenManager.make`.
 *
 * @internal
 */
export interface Keeper {
  readonly table: Table
  readonly refreshEvery: Duration.Duration
  /** Open once the loop's first attempt is over. */
  readonly started: Effect.Latch
  mode: Option.Option<KeepAlive>
  refusalLogged: boolean
}

/**
 * Apply the outcome of re-claiming `entry`'s record. Runs right after the claim, with no
 * yield before the map is checked: a socket that disconnected meanwhile is never
 * brought back, and a record written back for it is deleted again.
 */
const applyClaim = (
  table: Table,
  token: string,
  entry: Entry,
  result: Either.Either<ClaimResult, CorruptValue | StoreRefused>
) =>
  Effect.suspend(() => {
    const current = table.entries.get(token)
    if (current !== entry) {
      const written = Either.isRight(result) && result.right._tag === "Claimed"
      if (!written || (current !== undefined && sameRecord(current.record, entry.record))) return Effect.void
      return table.store.deleteSocketIfOwner(token, entry.record).pipe(
        Effect.asVoid,
        Effect.catchTag("InvalidToken", () => Effect.void),
        Effect.catchAll((error) => storeFailed(table, `deleting the record of disconnected token ${token}`, error))
      )
    }
    if (Either.isLeft(result)) {
      return Effect.logWarning(`socket records: cannot restore token ${token}: ${result.left.message}`)
    }
    const claim = result.right
    if (claim._tag === "Claimed") return Metric.increment(recordsRestored)
    return sameRecord(claim.record, entry.record) ? Effect.void : adopt(table, token, entry, claim.record)
  })

const ownEntries = (table: Table) => [...table.entries].filter(([, entry]) => isOurs(table, entry))

/** Claim records again (SET NX, read back in the same round trip) and apply each outcome. */
const reclaim = (table: Table, lost: ReadonlyArray<readonly [string, Entry]>) =>
  Effect.gen(function* () {
    for (let start = 0; start < lost.length; start += restoreBatch) {
      const batch = lost.slice(start, start + restoreBatch)
      const results = yield* table.store.claimSockets(batch.map(([token, entry]) => [token, entry.record] as const))
      for (let i = 0; i < batch.length; i++) yield* applyClaim(table, batch[i]![0], batch[i]![1], results[i]!)
    }
  })

/** One maintenance pass over the map: alone, and its store failure logged once per episode. */
const maintain = (table: Table, what: string, pass: Effect.Effect<void, StoreError | InvalidToken>) =>
  table.maintenance.withPermits(1)(
    Effect.zipRight(pass, storeWorked(table)).pipe(
      Effect.catchTag("InvalidToken", (error) => Effect.logError(`socket records: ${error.message}`)),
      Effect.catchAll((error) => storeFailed(table, what, error))
    )
  )

/**
 * Write every record of ours back with SET NX and read it in the same round trip. A store
 * failure fails the pass (warned once per episode): the `sockets` loop's attempt ends with
 * it and the supervisor tries again, since nothing else would write those records back
 * while the store stays up (a cluster answering before every slot is served again).
 */
export const restore = (table: Table) =>
  table.maintenance.withPermits(1)(
    Effect.suspend(() => reclaim(table, ownEntries(table))).pipe(
      Effect.zipRight(storeWorked(table)),
      Effect.catchTag("InvalidToken", (error) => Effect.logError(`socket records: ${error.message}`)),
      Effect.tapError((error) => storeFailed(table, "restoring records", error))
    )
  )

/** Refresh mode: reset the TTL of every record of ours; one missing or replaced is re-claimed. */
const refresh = (table: Table) =>
  maintain(
    table,
    "refreshing records",
    Effect.gen(function* () {
      const ours = ownEntries(table)
      const refreshed = yield* Effect.forEach(
        ours,
        ([token, entry]) => table.store.refreshSocket(token, entry.record),
        {
          concurrency: concurrentWrites
        }
      )
      yield* reclaim(
        table,
        ours.filter((_, i) => !refreshed[i])
      )
    })
  )

/** A record was deleted, expired or evicted: claim it again while its socket lives here. */
const removed = (table: Table, token: string) =>
  table.maintenance.withPermits(1)(
    Effect.suspend(() => {
      const entry = table.entries.get(token)
      if (entry === undefined) return Effect.void
      // Another instance's record is gone: nothing left to adopt; a later lookup reads the store.
      if (!isOurs(table, entry)) return Effect.sync(() => table.entries.delete(token))
      return table.store.claimSocket(token, entry.record).pipe(
        Effect.map(Either.right),
        Effect.catchTag("CorruptValue", (error) => Effect.succeed(Either.left(error))),
        Effect.flatMap((result) => applyClaim(table, token, entry, result)),
        Effect.catchTag("InvalidToken", (error) => Effect.logError(`socket records: ${error.message}`)),
        Effect.catchAll((error) => storeFailed(table, `claiming token ${token} again`, error))
      )
    })
  )

/** One attempt of the `sockets` loop, run by the supervisor. */
export const watch = (keeper: Keeper, recovered: Effect.Effect<void>) => {
  const { table, refreshEvery, started } = keeper
  const { store, instanceId } = table
  return Effect.scoped(
    Effect.gen(function* () {
      const { epoch } = yield* store.status
      const setting = yield* store.enableSocketEvents
      if (setting._tag === "Refused" && !keeper.refusalLogged) {
        keeper.refusalLogged = true
        yield* Effect.logWarning(
          `${loopName}: the store refused to enable keyspace notifications (${setting.reply}); ` +
            `socket records are kept alive by a refresh every ${Duration.format(refreshEvery)} instead`
        )
      }
      const events = yield* store.socketEvents
      keeper.mode = Option.some(setting._tag === "Enabled" ? "events" : "refresh")
      yield* recovered
      yield* restore(table)
      yield* started.open
      // A reconnection may follow a server restart that lost records, without the
      // subscription noticing (the command connection alone dropped): restore again.
      // A restore that fails ends this attempt (below), and the next attempt restores.
      const restores = store.statusChanges.pipe(
        Stream.filter((status) => status.ready && status.epoch > epoch),
        Stream.changesWith((a, b) => a.epoch === b.epoch),
        Stream.mapEffect(() => restore(table))
      )
      if (setting._tag === "Refused") {
        // every `refreshEvery`, the first one `refreshEvery` from now
        yield* refresh(table).pipe(
          Effect.schedule(Schedule.spaced(refreshEvery)),
          Effect.interruptible,
          Effect.forkScoped
        )
      }
      const changes = Stream.mapEffect(events, (change) =>
        change.event === "set" ? Effect.void : removed(table, change.token)
      )
      return yield* Stream.runDrain(Stream.merge(changes, restores, { haltStrategy: "left" }))
    })
  ).pipe(
    // The layer is ready once the first attempt is over, whatever its outcome: a store
    // that is down must not block the worker, its links are restored later.
    Effect.ensuring(started.open),
    Effect.annotateLogs({ instanceId })
  )
}
