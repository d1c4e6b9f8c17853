/**
 * What a claim of one of this worker's socket records found, applied to the local table:
 * stored again, unchanged, or another socket's record there, which the entry adopts. A
 * socket linked while the store failed never had its record written: another socket's
 * record found in its place may be a dead worker's (its tab reconnected here during the
 * outage), so its owner is judged first, as `link` judges it (`presence.ts`), and the
 * record is taken over when that owner is gone (`settle`).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as FiberMap from "effect/FiberMap"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type * as Schedule from "effect/Schedule"
import type { ClaimResult, SocketRecord } from "../../Store.js"
import type { CorruptValue, InvalidInstanceId, InvalidToken, StoreError, StoreRefused } from "../../StoreError.js"
import { type Claim, claim, takeOver, takeovers } from "./link.js"
import type { Verdict } from "./presence.js"
import { adopt, type Entry, type LinkTable, sameRecord, storeFailed, storeWorked } from "./table.js"

/**
 * Records of live sockets written back (after a deletion, an expiry, or a store restart).
 *
 * @internal
 */
export const recordsRestored = Metric.counter("leasehold_socket_records_restored_total", {
  description: "records of live sockets written back after they were deleted, expired or lost",
  incremental: true
})

/**
 * What settling a record never stored needs: part of the `sockets` loop's state (`RecordKeeper`).
 *
 * @internal
 */
export interface Settler {
  readonly table: LinkTable
  /** What became of the owner of a record found in place of one of ours never stored (`presence.ts`). */
  readonly judge: (
    token: string,
    owner: SocketRecord
  ) => Effect.Effect<Verdict, StoreError | InvalidToken | InvalidInstanceId>
  /** The fibers that settle such records, one per socket (`<token> <connectionId>`), closed with the token manager. */
  readonly settles: FiberMap.FiberMap<string>
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
export const applyClaim = (
  table: LinkTable,
  token: string,
  entry: Entry,
  result: Result.Result<ClaimResult, CorruptValue | StoreRefused>,
  stored: Metric.Counter<number> = recordsRestored
): Effect.Effect<Option.Option<SocketRecord>> =>
  Effect.suspend(() => {
    const current = table.entries.get(token)
    if (current !== entry) {
      const written = Result.isSuccess(result) && result.success._tag === "Claimed"
      if (!written || (current !== undefined && sameRecord(current.record, entry.record))) return none
      return table.store.deleteSocketIfOwner(token, entry.record).pipe(
        Effect.asVoid,
        Effect.catchTag(["InvalidToken", "InvalidInstanceId"], () => Effect.void),
        Effect.catch((error) => storeFailed(table, `deleting the record of disconnected token ${token}`, error)),
        Effect.as(Option.none())
      )
    }
    if (Result.isFailure(result)) {
      return Effect.as(
        Effect.logWarning(`socket records: cannot restore token ${token}: ${result.failure.message}`),
        Option.none()
      )
    }
    const claim = result.success
    if (claim._tag === "Claimed" || sameRecord(claim.record, entry.record)) {
      table.unstored.delete(entry)
      return claim._tag === "Claimed" ? Effect.as(Metric.update(stored, 1), Option.none()) : none
    }
    if (table.unstored.has(entry)) return Effect.succeed(Option.some(claim.record))
    return Effect.as(adopt(table, token, entry, claim.record), Option.none())
  })

const none = Effect.succeed(Option.none<SocketRecord>())

/**
 * A record another socket holds in place of one of ours never stored, to be judged.
 *
 * @internal
 */
export type Contested = readonly [token: string, entry: Entry, holder: SocketRecord]

/** Verdicts (and take-overs that found yet another record) before a record never stored adopts the one found. */
const settleRounds = 3

/** Whether `entry` still holds `token` here with a record never stored. */
const unsettled = (table: LinkTable, token: string, entry: Entry) =>
  table.entries.get(token) === entry && table.unstored.has(entry)

/**
 * Compare-and-set `holder`'s record to `entry`'s, for a record of ours never stored (the
 * take-over and the claim of `link.ts`): what holds the token after it (`None` once it is
 * ours, or nothing is left to settle). A store failure fails it, for the settle to try again.
 */
const takeOverFrom = (table: LinkTable, token: string, entry: Entry, holder: SocketRecord) =>
  Effect.suspend((): Effect.Effect<Option.Option<SocketRecord>, StoreError> => {
    if (!unsettled(table, token, entry)) return none
    return takeOver(table, token, holder, entry.record).pipe(
      Effect.flatMap((found) =>
        found._tag === "absent"
          ? // vanished meanwhile: an ordinary claim
            Effect.flatMap(claim(table, token, entry.record), (again) =>
              applyFound(table, token, entry, again, recordsRestored)
            )
          : applyFound(table, token, entry, found, takeovers)
      ),
      Effect.tap(storeWorked(table)),
      Effect.tapError((error) => storeFailed(table, `taking the record of token ${token} over`, error))
    )
  })

/** `applyClaim` for what a take-over or a claim found (a record that does not decode: left for the next restore). */
const applyFound = (table: LinkTable, token: string, entry: Entry, found: Claim, stored: Metric.Counter<number>) =>
  found._tag === "ours"
    ? applyClaim(table, token, entry, Result.succeed(claimed), stored)
    : found._tag === "taken"
      ? applyClaim(table, token, entry, Result.succeed({ _tag: "Taken", record: found.record }))
      : none

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
const settle = (keeper: Settler, [token, entry, found]: Contested) => {
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
    Effect.catchTag(["InvalidToken", "InvalidInstanceId"], (error) =>
      Effect.logError(`socket records: ${error.message}`)
    ),
    Effect.tapError((error) =>
      Effect.logDebug(`socket records: settling token ${token} failed, trying again: ${error.message}`)
    ),
    Effect.retry(keeper.retry),
    Effect.catch((error) => Effect.logError(`socket records: settling token ${token} gave up: ${error.message}`))
  )
}

/**
 * Settle each of `contested` in a fiber of the keeper's own (it lives as long as the token
 * manager, not as the loop attempt that found it): one at a time per socket, a settle
 * already under way for it is left to finish.
 */
export const settleLater = (keeper: Settler, contested: ReadonlyArray<Contested>) =>
  Effect.forEach(
    contested,
    (one) =>
      FiberMap.run(keeper.settles, `${one[0]} ${one[1].connectionId}`, settle(keeper, one), { onlyIfMissing: true }),
    { discard: true }
  )
