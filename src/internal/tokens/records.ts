/**
 * Keeping the records of this worker's live sockets in the store: the supervised
 * `sockets` loop, which turns on the store's socket events (or, where the store refuses,
 * refreshes every record's TTL) and re-claims a record as soon as it is deleted or
 * expires, and the passes that write every record of ours back after a subscription or a
 * reconnection, adopting a record another socket won meanwhile. A socket linked while the
 * store failed never had its record written: another socket's record found in its place
 * may be a dead worker's, so its owner is judged first (`settle`), as `link` judges it.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberSet from "effect/FiberSet"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type { ClaimResult, SocketRecord } from "../../Store.js"
import type { CorruptValue, InvalidToken, StoreError, StoreRefused } from "../../StoreError.js"
import type { KeepAlive } from "../../TokenManager.js"
import { takeovers } from "./link.js"
import type { Verdict } from "./presence.js"
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
  /** What became of the owner of a record found in place of one of ours never stored (`presence.ts`). */
  readonly judge: (token: string, owner: SocketRecord) => Effect.Effect<Verdict, StoreError | InvalidToken>
  /** The fibers that settle such records, closed with the token manager. */
  readonly settles: FiberSet.FiberSet
  /** The entries being settled: one settle at a time each. */
  readonly settling: WeakSet<Entry>
  /** When a settle the store failed starts over (the retry delays, capped at the presence expiration). */
  readonly retry: Schedule.Schedule<unknown, StoreError>
}

/**
 * Apply the outcome of re-claiming `entry`'s record. Runs right after the claim, with no
 * yield before the map is checked: a socket that disconnected meanwhile is never
 * brought back, and a record written back for it is deleted again. Another socket's
 * record found in place of one never stored is not adopted here: it is returned, for its
 * owner to be judged (`settle`).
 */
const applyClaim = (
  table: Table,
  token: string,
  entry: Entry,
  result: Either.Either<ClaimResult, CorruptValue | StoreRefused>,
  stored: Metric.Metric.Counter<number> = recordsRestored
): Effect.Effect<Option.Option<SocketRecord>> =>
  Effect.suspend(() => {
    const current = table.entries.get(token)
    if (current !== entry) {
      const written = Either.isRight(result) && result.right._tag === "Claimed"
      if (!written || (current !== undefined && sameRecord(current.record, entry.record))) return none
      return table.store.deleteSocketIfOwner(token, entry.record).pipe(
        Effect.asVoid,
        Effect.catchTag("InvalidToken", () => Effect.void),
        Effect.catchAll((error) => storeFailed(table, `deleting the record of disconnected token ${token}`, error)),
        Effect.as(Option.none())
      )
    }
    if (Either.isLeft(result)) {
      return Effect.as(
        Effect.logWarning(`socket records: cannot restore token ${token}: ${result.left.message}`),
        Option.none()
      )
    }
    const claim = result.right
    if (claim._tag === "Claimed" || sameRecord(claim.record, entry.record)) {
      table.unstored.delete(entry)
      return claim._tag === "Claimed" ? Effect.as(Metric.increment(stored), Option.none()) : none
    }
    if (table.unstored.has(entry)) return Effect.succeed(Option.some(claim.record))
    return Effect.as(adopt(table, token, entry, claim.record), Option.none())
  })

const none = Effect.succeed(Option.none<SocketRecord>())

/** A record another socket holds in place of one of ours never stored, to be judged. */
type Contested = readonly [token: string, entry: Entry, holder: SocketRecord]

/** Verdicts (and take-overs that found yet another record) before a record never stored adopts the one found. */
const settleRounds = 3

/** Whether `entry` still holds `token` here with a record never stored. */
const unsettled = (table: Table, token: string, entry: Entry) =>
  table.entries.get(token) === entry && table.unstored.has(entry)

/**
 * Compare-and-set `holder`'s record to `entry`'s, for a record of ours never stored: what
 * holds the token after it (`None` once it is ours, or nothing is left to settle). A store
 * failure fails it, for the settle to try again.
 */
const takeOverFrom = (table: Table, token: string, entry: Entry, holder: SocketRecord) =>
  Effect.suspend((): Effect.Effect<Option.Option<SocketRecord>, StoreError> => {
    if (!unsettled(table, token, entry)) return none
    return table.store.takeOverSocket(token, holder, entry.record).pipe(
      Effect.flatMap((result) => {
        if (result._tag === "TakenOver") return applyClaim(table, token, entry, Either.right(claimed), takeovers)
        return Option.match(result.record, {
          // vanished meanwhile: an ordinary claim
          onNone: () =>
            table.store.claimSocket(token, entry.record).pipe(
              Effect.map(Either.right),
              Effect.catchTag("CorruptValue", (error) => Effect.succeed(Either.left(error))),
              Effect.flatMap((claim) => applyClaim(table, token, entry, claim))
            ),
          onSome: (record) => applyClaim(table, token, entry, Either.right({ _tag: "Taken", record }))
        })
      }),
      Effect.zipLeft(storeWorked(table)),
      Effect.catchTag("CorruptValue", (error) =>
        Effect.as(Effect.logWarning(`socket records: cannot restore token ${token}: ${error.message}`), Option.none())
      ),
      Effect.catchTag("InvalidToken", (error) =>
        Effect.as(Effect.logError(`socket records: ${error.message}`), Option.none())
      ),
      Effect.tapError((error) => storeFailed(table, `taking the record of token ${token} over`, error))
    )
  })

const claimed: ClaimResult = { _tag: "Claimed" }

/**
 * A socket linked while the store failed found another socket's record when the store
 * returned. Its owner may have died meanwhile (its tab reconnected here during the
 * outage): it is asked, as a link asks (`presence.ts`); gone, the record is taken over by
 * compare-and-set and the socket keeps its token; linked, or not to be judged in
 * `settleRounds`, the record is adopted and the socket reported lost, as before. The
 * question may wait a presence expiration: it runs outside the maintenance permit, and
 * each step on the store takes it. A store failure starts the settle over after the
 * keeper's retry schedule, until the entry is settled or gone.
 */
const settle = (keeper: Keeper, [token, entry, found]: Contested) => {
  const { table } = keeper
  return Effect.gen(function* () {
    let holder = found
    for (let round = 0; round < settleRounds; round++) {
      if (!unsettled(table, token, entry)) return
      const verdict = yield* keeper.judge(token, holder)
      // the socket may have gone (or been stored) while its owner was asked
      if (!unsettled(table, token, entry)) return
      if (verdict === "linked") break
      if (verdict === "unsure") continue
      yield* Effect.logInfo(
        `socket records: token ${token}: the socket of ${holder.instanceId} is gone; taking its record over`
      )
      const next = yield* table.maintenance.withPermits(1)(takeOverFrom(table, token, entry, holder))
      if (Option.isNone(next)) return
      holder = next.value
    }
    yield* table.maintenance.withPermits(1)(
      Effect.suspend(() => {
        if (!unsettled(table, token, entry)) return Effect.void
        table.unstored.delete(entry)
        return adopt(table, token, entry, holder)
      })
    )
  }).pipe(
    Effect.catchTag("InvalidToken", (error) => Effect.logError(`socket records: ${error.message}`)),
    Effect.tapError((error) =>
      Effect.logDebug(`socket records: settling token ${token} failed, trying again: ${error.message}`)
    ),
    Effect.retry(keeper.retry),
    Effect.catchAll((error) => Effect.logError(`socket records: settling token ${token} gave up: ${error.message}`))
  )
}

/**
 * Settle each of `contested` in a fiber of the keeper's own (it lives as long as the token
 * manager, not as the loop attempt that found it): one at a time per entry.
 */
const settleLater = (keeper: Keeper, contested: ReadonlyArray<Contested>) =>
  Effect.forEach(
    contested,
    (one) =>
      FiberSet.run(
        keeper.settles,
        // marked and unmarked in the settle's own fiber: no interruption can come between
        Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            const entry = one[1]
            if (keeper.settling.has(entry)) return Effect.void
            keeper.settling.add(entry)
            return Effect.ensuring(
              restore(settle(keeper, one)),
              Effect.sync(() => keeper.settling.delete(entry))
            )
          })
        )
      ),
    { discard: true }
  )

const ownEntries = (table: Table) => [...table.entries].filter(([, entry]) => isOurs(table, entry))

/**
 * Claim records again (SET NX, read back in the same round trip) and apply each outcome:
 * the records never stored that found another socket's in their place.
 */
const reclaim = (table: Table, lost: ReadonlyArray<readonly [string, Entry]>) =>
  Effect.gen(function* () {
    const contested: Array<Contested> = []
    for (let start = 0; start < lost.length; start += restoreBatch) {
      const batch = lost.slice(start, start + restoreBatch)
      const results = yield* table.store.claimSockets(batch.map(([token, entry]) => [token, entry.record] as const))
      for (let i = 0; i < batch.length; i++) {
        const [token, entry] = batch[i]!
        const holder = yield* applyClaim(table, token, entry, results[i]!)
        if (Option.isSome(holder)) contested.push([token, entry, holder.value])
      }
    }
    return contested
  })

/** One maintenance pass over the map: alone, and its store failure logged once per episode (then `orElse`). */
const maintain = <A>(table: Table, what: string, pass: Effect.Effect<A, StoreError | InvalidToken>, orElse: A) =>
  table.maintenance.withPermits(1)(
    Effect.zipLeft(pass, storeWorked(table)).pipe(
      Effect.catchTag("InvalidToken", (error) =>
        Effect.as(Effect.logError(`socket records: ${error.message}`), orElse)
      ),
      Effect.catchAll((error) => Effect.as(storeFailed(table, what, error), orElse))
    )
  )

/**
 * Write every record of ours back with SET NX and read it in the same round trip. A store
 * failure fails the pass (warned once per episode): the `sockets` loop's attempt ends with
 * it and the supervisor tries again, since nothing else would write those records back
 * while the store stays up (a cluster answering before every slot is served again).
 * Records never stored that found another socket's are settled in fibers of their own
 * (`settleLater`): the question waits for answers that the `presence` loop receives.
 */
export const restore = (keeper: Keeper) => {
  const { table } = keeper
  return table.maintenance
    .withPermits(1)(
      Effect.suspend(() => reclaim(table, ownEntries(table))).pipe(
        Effect.zipLeft(storeWorked(table)),
        Effect.catchTag("InvalidToken", (error) =>
          Effect.as(Effect.logError(`socket records: ${error.message}`), [] as ReadonlyArray<Contested>)
        ),
        Effect.tapError((error) => storeFailed(table, "restoring records", error))
      )
    )
    .pipe(Effect.flatMap((contested) => settleLater(keeper, contested)))
}

/** Refresh mode: reset the TTL of every record of ours; one missing or replaced is re-claimed. */
const refresh = (keeper: Keeper) => {
  const { table } = keeper
  return maintain(
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
      // refreshed: the record there is ours (a link whose reply was lost had stored it)
      for (const [i, [, entry]] of ours.entries()) if (refreshed[i] === true) table.unstored.delete(entry)
      return yield* reclaim(
        table,
        ours.filter((_, i) => !refreshed[i])
      )
    }),
    []
  ).pipe(Effect.flatMap((contested) => settleLater(keeper, contested)))
}

/** A record was deleted, expired or evicted: claim it again while its socket lives here. */
const removed = (keeper: Keeper, token: string) => {
  const { table } = keeper
  return table.maintenance
    .withPermits(1)(
      Effect.suspend(() => {
        const entry = table.entries.get(token)
        if (entry === undefined) return Effect.succeed(Option.none<Contested>())
        // Another instance's record is gone: nothing left to adopt; a later lookup reads the store.
        if (!isOurs(table, entry))
          return Effect.as(
            Effect.sync(() => table.entries.delete(token)),
            Option.none<Contested>()
          )
        return table.store.claimSocket(token, entry.record).pipe(
          Effect.map(Either.right),
          Effect.catchTag("CorruptValue", (error) => Effect.succeed(Either.left(error))),
          Effect.flatMap((result) => applyClaim(table, token, entry, result)),
          Effect.map(Option.map((holder): Contested => [token, entry, holder])),
          Effect.catchTag("InvalidToken", (error) =>
            Effect.as(Effect.logError(`socket records: ${error.message}`), Option.none())
          ),
          Effect.catchAll((error) =>
            Effect.as(storeFailed(table, `claiming token ${token} again`, error), Option.none())
          )
        )
      })
    )
    .pipe(Effect.flatMap((contested) => settleLater(keeper, Option.toArray(contested))))
}

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
      yield* restore(keeper)
      yield* started.open
      // A reconnection may follow a server restart that lost records, without the
      // subscription noticing (the command connection alone dropped): restore again.
      // A restore that fails ends this attempt (below), and the next attempt restores.
      const restores = store.statusChanges.pipe(
        Stream.filter((status) => status.ready && status.epoch > epoch),
        Stream.changesWith((a, b) => a.epoch === b.epoch),
        Stream.mapEffect(() => restore(keeper))
      )
      if (setting._tag === "Refused") {
        // every `refreshEvery`, the first one `refreshEvery` from now
        yield* refresh(keeper).pipe(
          Effect.schedule(Schedule.spaced(refreshEvery)),
          Effect.interruptible,
          Effect.forkScoped
        )
      }
      const changes = Stream.mapEffect(events, (change) =>
        change.event === "set" ? Effect.void : removed(keeper, change.token)
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
