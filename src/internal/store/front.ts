/**
 * The checked front of every store: turns a backend's `Driver` into the `Store` service.
 * Everything a backend would otherwise repeat lives here, once:
 *
 * - validation, before any I/O: tokens, slice names, instance ids (also those inside a
 *   socket record or a `Contended` signal), so user input never becomes part of a key;
 * - encoding: signals, notices and socket records to their wire strings, and back, with
 *   messages that are not signals (or not notices about the token) ignored and corrupt
 *   records reported as `CorruptValue`;
 * - a lost lock as `LockLost`, naming the holder found;
 * - normalized numbers (whole milliseconds; a read's count whole; `maxLen` as given);
 * - the scan's warnings for records it skips, and the filter on socket events.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Filter from "effect/Filter"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import type {
  ClaimResult,
  PresenceMessage,
  Signal,
  SocketEvent,
  SocketRecord,
  Store,
  TakeOverResult
} from "../../Store.js"
import {
  type AcknowledgedError,
  CorruptValue,
  type InvalidInput,
  type InvalidInstanceId,
  type InvalidToken,
  LockLost,
  type StoreRefused
} from "../../StoreError.js"
import {
  decodeNotice,
  decodePresenceMessage,
  decodeSignal,
  decodeSocketRecord,
  decodeTokenNotice,
  encodeNotice,
  encodePresenceMessage,
  encodeSignal
} from "../codec.js"
import * as Operations from "../operations/index.js"
import type { Operation } from "../operations/operation.js"
import {
  claimError,
  instanceIdError,
  instanceIdsError,
  isValidToken,
  lockIdError,
  signalInstance,
  sliceNamesError,
  tokenAndInstanceError,
  tokenError
} from "../validate.js"
import type { Driver, Guarded, NoticeMessages, RawClaim, RawSocketEvent, ScannedRecord } from "./driver.js"

/** The keyspace events a socket record can see that a caller needs; `expire` (a TTL set) is not one. */
const socketEventNames: ReadonlySet<string> = new Set(["set", "del", "expired", "evicted"])

/**
 * The step `run` builds, or the input's error when it has one: validation before any I/O,
 * and no effect built for a step that is refused.
 */
const checked = <A, E, R, V extends InvalidInput = never>(
  error: V | undefined,
  run: () => Effect.Effect<A, E, R>
): Effect.Effect<A, E | V, R> => (error === undefined ? run() : Effect.fail(error))

/**
 * A described operation as the front runs it: its arguments checked by its `check` before
 * any I/O, then the driver's `call`.
 */
const stepOf =
  (driver: Driver) =>
  <Args, Out, E extends AcknowledgedError, I extends InvalidInput>(
    operation: Operation<Args, any, Out, E, I, any, any>,
    args: Args
  ): Effect.Effect<Out, E | I> => {
    const error = operation.check(args)
    return error === undefined ? driver.call(operation, args) : Effect.fail(error)
  }

/** Whole milliseconds, at least one (as PX and PEXPIRE take them). */
const wholeMs = (ms: number): number => Math.max(1, Math.ceil(ms))

/** The message of a release: it names the lock released, so a subscriber can tell whose release it was. */
const released = (lockId: string) => encodeSignal({ _tag: "Released", lockId })

const guarded = <A>(token: string, lockId: string, outcome: Guarded<A>): Effect.Effect<A, LockLost> =>
  outcome._tag === "Done"
    ? Effect.succeed(outcome.value)
    : Effect.fail(new LockLost({ token, lockId, holder: outcome.holder }))

/** The lock and the slices written under it. */
const lockPart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    tryAcquire: (token, lockId, slices) => step(Operations.tryAcquire, { token, lockId, slices }),
    release: (token, lockId) => step(Operations.release, { token, lockId, released: released(lockId) }),
    commitAndRelease: (token, lockId, entries) =>
      Effect.flatMap(
        step(Operations.commitAndRelease, { token, lockId, entries, released: released(lockId) }),
        (outcome) => guarded(token, lockId, outcome)
      ),
    extend: (token, lockId, slices = [], options) =>
      step(Operations.extend, { token, lockId, slices, claim: options?.claim }),
    holder: (token) => step(Operations.holder, { token }),

    readSlices: (token, names) => step(Operations.readSlices, { token, names }),
    writeIfHolder: (token, lockId, entries, options) =>
      Effect.flatMap(step(Operations.writeIfHolder, { token, lockId, entries, claim: options?.claim }), (outcome) =>
        guarded(token, lockId, outcome)
      )
  } satisfies Partial<Store.Service>
}

/** The notices the queue steps of `token` publish, in their wire form. */
const noticeMessages = (token: string): NoticeMessages => ({
  granted: encodeNotice(token, { _tag: "Granted" }),
  contended: encodeNotice(token, { _tag: "Contended" })
})

/** A release's arguments. */
const releaseArgs = (
  token: string,
  lockId: string,
  options: {
    readonly instanceId: string
    readonly requeue?: boolean
    readonly queueAs?: string
    readonly carry?: ReadonlyArray<string>
  }
): Operations.ReleaseQueuedArgs => ({
  token,
  lockId,
  instanceId: options.instanceId,
  requeue: options.requeue === true,
  queueAs: options.queueAs,
  carry: options.carry ?? [],
  notices: noticeMessages(token)
})

/** The queue of waiting workers and the hand-off of the lock (docs/protocol.md#the-queue-hand-off). */
const queuePart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    acquireQueued: (token, lockId, slices, options) =>
      step(Operations.acquireQueued, {
        token,
        lockId,
        slices,
        instanceId: options.instanceId,
        claim: options.claim,
        notices: noticeMessages(token)
      }),
    releaseQueued: (token, lockId, options) => step(Operations.releaseQueued, releaseArgs(token, lockId, options)),
    commitAndReleaseQueued: (token, lockId, entries, options) =>
      Effect.flatMap(
        step(Operations.commitAndReleaseQueued, {
          ...releaseArgs(token, lockId, options),
          entries,
          claim: options.claim
        }),
        (outcome) => guarded(token, lockId, outcome)
      ),
    leaveQueue: (token, instanceId, lockId) =>
      step(Operations.leaveQueue, { token, instanceId, lockId, notices: noticeMessages(token) }),
    queueLength: (token, instanceId) => step(Operations.queueLength, { token, instanceId }),
    queue: (token) => step(Operations.queue, { token }),
    notices: (token, instanceId) =>
      checked(tokenError(token) ?? instanceIdError(instanceId), () =>
        Effect.map(driver.notices(token, instanceId), (messages) =>
          // The channel may carry other tokens' notices (one channel per worker on a single server).
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodeNotice(token, message)))
          )
        )
      ),
    noticeChannel: (token, instanceId) => driver.noticeChannel(token, instanceId),
    channelNotices: (token, instanceId) =>
      checked(tokenError(token) ?? instanceIdError(instanceId), () =>
        Effect.map(driver.notices(token, instanceId), (messages) =>
          // what is not a notice (published by someone else) is ignored
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodeTokenNotice(message)))
          )
        )
      )
  } satisfies Partial<Store.Service>
}

/** Signals on a token's channel, and the connection status. */
const signalPart = (driver: Driver) =>
  ({
    publish: (token, signal: Signal) =>
      checked(tokenAndInstanceError(token, signalInstance(signal)), () => driver.publish(token, encodeSignal(signal))),
    subscribe: (token) =>
      checked(tokenError(token), () =>
        Effect.map(driver.subscribe(token), (messages) =>
          // A message that is not a signal (published by someone else) is ignored.
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodeSignal(message)))
          )
        )
      ),
    status: driver.status,
    statusChanges: driver.statusChanges
  }) satisfies Partial<Store.Service>

/** Socket records: claims, reads, compare-and-delete, the scan and the change events. */
const socketPart = (driver: Driver) => {
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

/** What is wrong with the instance ids a presence message names (its token too, for a question). */
const presenceMessageError = (instanceId: string, message: PresenceMessage) =>
  message._tag === "Ask"
    ? (instanceIdsError(instanceId, message.from) ?? tokenError(message.token))
    : instanceIdError(instanceId)

/** Presence: the entry with its TTL, and the worker's channel of questions and answers. */
const presencePart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    refreshPresence: (instanceId, ttlMs) => step(Operations.refreshPresence, { instanceId, ttlMs: wholeMs(ttlMs) }),
    isPresent: (instanceId) => checked(instanceIdError(instanceId), () => driver.isPresent(instanceId)),
    removePresence: (instanceId) => checked(instanceIdError(instanceId), () => driver.removePresence(instanceId)),
    sendPresence: (instanceId, message) =>
      checked(presenceMessageError(instanceId, message), () =>
        driver.presencePublish(instanceId, encodePresenceMessage(message))
      ),
    presenceMessages: (instanceId) =>
      checked(instanceIdError(instanceId), () =>
        Effect.map(driver.presenceMessages(instanceId), (messages) =>
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodePresenceMessage(message)))
          )
        )
      )
  } satisfies Partial<Store.Service>
}

/**
 * `mailboxAppendToOwner`: the driver's one step where it has one, else the record read,
 * then the append to the instance it names. Either way a record that does not decode, or
 * names an invalid instance, fails the same and appends nothing.
 */
const appendToOwner = (
  driver: Driver,
  token: string,
  payload: string,
  maxLen: number,
  ttlMs: number
): Effect.Effect<Option.Option<SocketRecord>, InvalidToken | InvalidInstanceId | CorruptValue | AcknowledgedError> => {
  const key = driver.keys.socket(token)
  const recordOf = (raw: string) =>
    Effect.flatMap(Effect.fromResult(decodeSocketRecord(key, raw)), (record) => {
      const invalid = instanceIdError(record.instanceId)
      return invalid === undefined ? Effect.succeed(record) : Effect.fail(invalid)
    })
  const inOneStep = driver.mailboxAppendToOwner
  if (inOneStep === undefined) {
    return Effect.flatMap(driver.readSocket(token), (raw) =>
      Option.isNone(raw)
        ? Effect.succeed(Option.none<SocketRecord>())
        : Effect.flatMap(recordOf(raw.value), (record) =>
            Effect.as(
              driver.call(Operations.mailboxAppend, { instanceId: record.instanceId, payload, maxLen, ttlMs }),
              Option.some(record)
            )
          )
    )
  }
  return Effect.flatMap(inOneStep(token, payload, maxLen, ttlMs), ({ id, record }) => {
    if (record === undefined) return Effect.succeed(Option.none<SocketRecord>())
    const decoded = recordOf(record)
    // The step appended only for a record naming a valid instance: it and the check here agree.
    return id === undefined
      ? Effect.flatMap(decoded, () =>
          Effect.fail(new CorruptValue({ key, raw: record, reason: "names no instance the store accepts" }))
        )
      : Effect.map(decoded, Option.some)
  })
}

/** Mailboxes: append, read (blocking or not), trim, expire, and the reader's cursor. */
const mailboxPart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    mailboxAppend: (instanceId, payload, options) =>
      step(Operations.mailboxAppend, {
        instanceId,
        payload,
        maxLen: options.maxLen,
        ttlMs: wholeMs(options.ttlMs)
      }),
    mailboxAppendToOwner: (token, payload, options) =>
      checked(tokenError(token), () => appendToOwner(driver, token, payload, options.maxLen, wholeMs(options.ttlMs))),
    mailboxRead: (instanceId, afterId, options) =>
      checked(instanceIdError(instanceId), () =>
        Effect.suspend(() => {
          const count = Math.floor(options.count)
          if (!(count >= 1)) return Effect.succeed([])
          // Whole milliseconds, as XREAD BLOCK takes them; under 1 ms means no wait.
          const blockMs = options.blockMs === undefined ? 0 : Math.ceil(options.blockMs)
          return driver.mailboxRead(instanceId, afterId, count, blockMs >= 1 ? blockMs : 0)
        })
      ),
    mailboxTrim: (instanceId, maxLen) =>
      checked(instanceIdError(instanceId), () => driver.mailboxTrim(instanceId, maxLen)),
    mailboxExpire: (instanceId, ttlMs) =>
      checked(instanceIdError(instanceId), () => driver.mailboxExpire(instanceId, wholeMs(ttlMs))),
    mailboxLength: (instanceId) => checked(instanceIdError(instanceId), () => driver.mailboxLength(instanceId)),
    mailboxSetCursor: (instanceId, id, ttlMs) =>
      checked(instanceIdError(instanceId), () => driver.mailboxSetCursor(instanceId, id, wholeMs(ttlMs))),
    mailboxCursor: (instanceId) => checked(instanceIdError(instanceId), () => driver.mailboxCursor(instanceId))
  } satisfies Partial<Store.Service>
}

/**
 * The whole modification in one step, where the backend runs it: the slices checked, and
 * what `decide` writes refused (a defect, nothing written) unless it is among them.
 */
const stepPart = (driver: Driver): Store.Stepping => {
  const step = driver.modifyInStep
  if (step === undefined) return {}
  return {
    modifyInStep: (token, slices, decide, options) =>
      checked(tokenError(token) ?? sliceNamesError(slices), () => {
        const when = options?.when
        return step(
          token,
          slices,
          (values, fence) => {
            const entries = decide(values, fence)
            for (const [name] of entries) {
              if (!slices.includes(name)) throw new Error(`modifyInStep: slice ${name} was not read by the step`)
            }
            return entries
          },
          {
            when:
              when === undefined
                ? undefined
                : () => {
                    const asked = when()
                    const holder = asked?.holder
                    const invalid =
                      holder === undefined ? undefined : (lockIdError(holder.lockId) ?? claimError(holder.claim))
                    if (invalid !== undefined) throw new Error(`modifyInStep: ${invalid.message}`)
                    return asked
                  },
            written: options?.written,
            notices: noticeMessages(token)
          }
        )
      })
  }
}

/**
 * The `Store` service over `driver`.
 *
 * @internal
 */
export const make = (driver: Driver): Store.Service => ({
  kind: driver.kind,
  ...stepPart(driver),
  ...lockPart(driver),
  ...queuePart(driver),
  ...signalPart(driver),
  ...socketPart(driver),
  ...presencePart(driver),
  ...mailboxPart(driver),
  tokenKeys: (token) => checked(tokenError(token), () => driver.tokenKeys(token))
})
