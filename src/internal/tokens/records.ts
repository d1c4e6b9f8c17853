/**
 * Keeping the records of this worker's live sockets in the store: the supervised
 * `sockets` loop, which turns on the store's socket events (or, where the store refuses,
 * refreshes every record's TTL) and re-claims a record as soon as it is deleted or
 * expires, and the passes that write every record of ours back after a subscription or a
 * reconnection. What each claim found is applied by `claims.ts` (stored again, unchanged,
 * another socket's record adopted, or one in place of a record never stored settled).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Latch from "effect/Latch"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type { InvalidInstanceId, InvalidToken, StoreError } from "../../StoreError.js"
import type { KeepAlive } from "../../TokenManager.js"
import { applyClaim, type Contested, type Settler, settleLater } from "./claims.js"
import { concurrentWrites, type Entry, isOurs, type LinkTable, storeFailed, storeWorked } from "./table.js"

export { recordsRestored } from "./claims.js"

/**
 * The name of the supervised loop that keeps socket records.
 *
 * @internal
 */
export const loopName = "sockets"

/** Records claimed again per round trip: bounds one pipeline, not the number of records. */
const restoreBatch = 1_000

/**
 * The state of the `sockets` loop, built once by `TokenManager.make`; what it needs to
 * settle records never stored (`claims.ts`) with it.
 *
 * @internal
 */
export interface RecordKeeper extends Settler {
  readonly refreshEvery: Duration.Duration
  /** Open once the loop's first attempt is over. */
  readonly started: Latch.Latch
  mode: Option.Option<KeepAlive>
  refusalLogged: boolean
}

const ownEntries = (table: LinkTable) => [...table.entries].filter(([, entry]) => isOurs(table, entry))

/**
 * Claim records again (SET NX, read back in the same round trip) and apply each outcome:
 * the records never stored that found another socket's in their place.
 */
const reclaim = (table: LinkTable, lost: ReadonlyArray<readonly [string, Entry]>) =>
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
const maintain = <A>(
  table: LinkTable,
  what: string,
  pass: Effect.Effect<A, StoreError | InvalidToken | InvalidInstanceId>,
  orElse: A
) =>
  table.maintenance.withPermits(1)(
    Effect.tap(pass, storeWorked(table)).pipe(
      Effect.catchTag(["InvalidToken", "InvalidInstanceId"], (error) =>
        Effect.as(Effect.logError(`socket records: ${error.message}`), orElse)
      ),
      Effect.catch((error) => Effect.as(storeFailed(table, what, error), orElse))
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
export const restore = (keeper: RecordKeeper) => {
  const { table } = keeper
  return table.maintenance
    .withPermits(1)(
      Effect.suspend(() => reclaim(table, ownEntries(table))).pipe(
        Effect.tap(storeWorked(table)),
        Effect.catchTag(["InvalidToken", "InvalidInstanceId"], (error) =>
          Effect.as(Effect.logError(`socket records: ${error.message}`), [] as ReadonlyArray<Contested>)
        ),
        Effect.tapError((error) => storeFailed(table, "restoring records", error))
      )
    )
    .pipe(Effect.flatMap((contested) => settleLater(keeper, contested)))
}

/** Refresh mode: reset the TTL of every record of ours; one missing or replaced is re-claimed. */
const refresh = (keeper: RecordKeeper) => {
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
const removed = (keeper: RecordKeeper, token: string) => {
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
          Effect.map(Result.succeed),
          Effect.catchTag("CorruptValue", (error) => Effect.succeed(Result.fail(error))),
          Effect.flatMap((result) => applyClaim(table, token, entry, result)),
          Effect.map(Option.map((holder): Contested => [token, entry, holder])),
          Effect.catchTag(["InvalidToken", "InvalidInstanceId"], (error) =>
            Effect.as(Effect.logError(`socket records: ${error.message}`), Option.none())
          ),
          Effect.catch((error) => Effect.as(storeFailed(table, `claiming token ${token} again`, error), Option.none()))
        )
      })
    )
    .pipe(Effect.flatMap((contested) => settleLater(keeper, Option.toArray(contested))))
}

/** One attempt of the `sockets` loop, run by the supervisor. */
export const watch = (keeper: RecordKeeper, recovered: Effect.Effect<void>) => {
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
