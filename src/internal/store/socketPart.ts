/**
 * The front's socket records (`Store.Sockets`): claims, reads, compare-and-delete and
 * compare-and-set, the scan (records that are no valid token or do not decode skipped
 * with a warning) and the change events (only those a caller needs, of valid tokens).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Filter from "effect/Filter"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import type { ClaimResult, SocketEvent, SocketRecord, Store, TakeOverResult } from "../../Store.js"
import type { CorruptValue, StoreRefused } from "../../StoreError.js"
import { decodeSocketRecord } from "../codec.js"
import * as Operations from "../operations/index.js"
import { isValidToken, tokenAndInstanceError, tokenError } from "../validate.js"
import { checked, stepOf } from "./checked.js"
import type { Driver, RawClaim, RawSocketEvent, ScannedRecord } from "./driver.js"

/** The keyspace events a socket record can see that a caller needs; `expire` (a TTL set) is not one. */
const socketEventNames: ReadonlySet<string> = new Set(["set", "del", "expired", "evicted"])

/** Socket records: claims, reads, compare-and-delete, the scan and the change events. @internal */
export const socketPart = (driver: Driver) => {
  const { keys } = driver
  const step = stepOf(driver)
  const claimResult = (token: string, claim: RawClaim): Result.Result<ClaimResult, CorruptValue> =>
    claim._tag === "Claimed"
      ? Result.succeed(claim)
      : Result.map(
          decodeSocketRecord(keys.socket(token), claim.raw),
          (record): ClaimResult => ({ _tag: "Taken", record })
        )

  const decodeRecords = (found: ReadonlyArray<ScannedRecord>) =>
    Effect.gen(function* () {
      const records: Array<readonly [token: string, record: SocketRecord]> = []
      for (const { key, raw, token } of found) {
        if (!isValidToken(token)) {
          yield* Effect.logWarning(`${driver.name}.scanSockets: skipping ${key}: not a valid token`)
          continue
        }
        const decoded = decodeSocketRecord(key, raw)
        if (Result.isFailure(decoded)) {
          yield* Effect.logWarning(`${driver.name}.scanSockets: skipping ${decoded.failure.message}`)
          continue
        }
        records.push([token, decoded.success])
      }
      return records
    })

  const toSocketEvent = (raw: RawSocketEvent): Option.Option<SocketEvent> => {
    if (!socketEventNames.has(raw.event)) return Option.none()
    const token = keys.socketToken(raw.key)
    return token !== undefined && isValidToken(token)
      ? Option.some({ token, event: raw.event as SocketEvent["event"] })
      : Option.none()
  }

  return {
    claimSocket: (token, record) =>
      Effect.flatMap(step(Operations.claimSocket, { token, record }), (claim) =>
        Effect.fromResult(claimResult(token, claim))
      ),
    readSocket: (token) =>
      checked(tokenError(token), () =>
        Effect.flatMap(driver.readSocket(token), (raw) =>
          Option.isNone(raw)
            ? Effect.succeed(Option.none<SocketRecord>())
            : Effect.map(Effect.fromResult(decodeSocketRecord(keys.socket(token), raw.value)), Option.some)
        )
      ),
    deleteSocketIfOwner: (token, record) =>
      step(Operations.deleteSocketIfOwner, {
        token,
        instanceId: record.instanceId,
        connectionId: record.connectionId
      }),
    refreshSocket: (token, record) =>
      step(Operations.refreshSocket, { token, instanceId: record.instanceId, connectionId: record.connectionId }),
    scanSockets: driver.scanSockets.pipe(
      Stream.chunks,
      Stream.mapEffect((chunk) => decodeRecords([...chunk])),
      Stream.flattenIterable
    ),
    claimSockets: (claims) =>
      Effect.gen(function* () {
        for (const [token, record] of claims) {
          const error = tokenAndInstanceError(token, record.instanceId)
          if (error !== undefined) return yield* Effect.fail(error)
        }
        if (claims.length === 0) return []
        const outcomes = yield* driver.claimSockets(claims)
        return outcomes.map(
          (outcome, i): Result.Result<ClaimResult, CorruptValue | StoreRefused> =>
            Result.flatMap(outcome, (claim) => claimResult(claims[i]![0], claim))
        )
      }),
    takeOverSocket: (token, expected, record) =>
      Effect.flatMap(
        step(Operations.takeOverSocket, {
          token,
          expectedInstance: expected.instanceId,
          expectedConnection: expected.connectionId,
          record
        }),
        (outcome): Effect.Effect<TakeOverResult, CorruptValue> =>
          outcome._tag === "TakenOver"
            ? Effect.succeed(outcome)
            : outcome.raw === undefined
              ? Effect.succeed({ _tag: "Changed", record: Option.none() })
              : Effect.map(Effect.fromResult(decodeSocketRecord(keys.socket(token), outcome.raw)), (found) => ({
                  _tag: "Changed",
                  record: Option.some(found)
                }))
      ),
    enableSocketEvents: driver.enableSocketEvents,
    socketEvents: Effect.map(driver.socketEvents, (events) =>
      Stream.filterMap(events, Filter.fromPredicateOption(toSocketEvent))
    )
  } satisfies Partial<Store.Service>
}
