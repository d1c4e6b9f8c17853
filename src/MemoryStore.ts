/**
 * The embedded default `Store`: every operation of the Redis scripts (DESIGN §3) on an
 * in-process key space, with TTLs on Effect's `Clock` so that `TestClock` drives expiry.
 *
 * Keys are the full Redis key names, so raw values written by tests through
 * `MemoryStoreControl.setRaw` land exactly where the Redis store would find them. Each
 * operation is one synchronous block, which makes it atomic on a single-threaded runtime.
 *
 * With `dataDir` set, each token's slices and fencing counter are also kept in files there
 * (written a short interval after they change, loaded when the store is built), so a
 * restarted process keeps its tokens' state; see `docs/configuration.md`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import type * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import { decodeSocketRecord, encodeSocketRecord } from "./internal/codec.js"
import { makeKeys } from "./internal/keys.js"
import * as MemoryDisk from "./internal/memory/disk.js"
import {
  firstAfter,
  isExpired,
  Keyspace,
  nextStreamId,
  parseStreamId,
  type SetEntry,
  type StreamEntry,
  type StringEntry,
  WrongTypeError
} from "./internal/memory/keyspace.js"
import {
  isValidToken,
  signalInstance,
  validateSliceNames,
  validateToken,
  validateTokenAndInstance,
  validateTokens
} from "./internal/validate.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import {
  type AcquireResult,
  type ClaimResult,
  type ConnectionStatus,
  type KeyInfo,
  type MailboxEntry,
  type Signal,
  type SliceEntry,
  type SocketEvent,
  type SocketEventsSetting,
  type SocketRecord,
  Store
} from "./Store.js"
import { type CorruptValue, type DataDirError, LockLost, StoreRefused, StoreUnavailable } from "./StoreError.js"

/**
 * What one flush of the data directory did, by token: files written, files removed (the
 * token expired), and writes that failed (retried by a later flush).
 *
 * @since 0.1.0
 * @category models
 */
export type FlushReport = MemoryDisk.FlushReport

/**
 * Fault injection and inspection for the embedded store, used by tests. Its own
 * operations work whatever the availability: a test can plant data during an outage.
 *
 * @since 0.1.0
 * @category models
 */
export declare namespace MemoryStoreControl {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * `false`: every operation fails with `StoreUnavailable`, open subscription streams
     * fail with `StoreUnavailable`, new subscribes fail, status `{ready: false}`.
     * `true`: works again and status `{ready: true, epoch: epoch + 1}`.
     */
    readonly setAvailable: (available: boolean) => Effect.Effect<void>
    /**
     * Like a killed subscriber connection that reconnects at once: every open
     * subscription stream fails with `StoreUnavailable`; status goes `{ready: false}`
     * then `{ready: true, epoch + 1}`. New subscribes work.
     */
    readonly dropSubscriptions: Effect.Effect<void>
    /** Write a raw string under a full key name (as `makeKeys` builds it), optional TTL in ms; for corrupt-data tests. */
    readonly setRaw: (key: string, value: string, ttlMs?: number) => Effect.Effect<void>
    /** The raw string under a full key name; `None` when absent, expired, or not a string. */
    readonly getRaw: (key: string) => Effect.Effect<Option.Option<string>>
    /** Number of live keys of every kind (locks, fences, waiter sets, slices, records, mailboxes). */
    readonly keyCount: Effect.Effect<number>
    /**
     * How many operations have reached the key space so far (past their validation), as
     * Redis counts the commands it processed: a test proves with it that a call did no work.
     */
    readonly operations: Effect.Effect<number>
    /**
     * Reports of the flushes to `dataDir` made from now on while the scope is open, each
     * published once its files are written or removed. Nothing arrives without `dataDir`.
     */
    readonly flushReports: Effect.Effect<Queue.Dequeue<FlushReport>, never, Scope.Scope>
    /**
     * `true`: behave like a managed Redis that refuses `CONFIG`: `enableSocketEvents`
     * answers `Refused` and no socket events are published. `false` (the default): events.
     */
    readonly refuseSocketEvents: (refused: boolean) => Effect.Effect<void>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class MemoryStoreControl extends Context.Tag("leasehold/MemoryStoreControl")<
  MemoryStoreControl,
  MemoryStoreControl.Service
>() {}

/**
 * A built memory store: the `Store` service, its control, and a view of its memory.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryStore extends Store.Service {
  readonly kind: "memory"
  readonly control: MemoryStoreControl.Service
  /**
   * Keys held in memory right now, including expired ones that nothing has removed yet
   * (unlike `keyCount`, reading it removes nothing): shows that the sweeper frees memory.
   */
  readonly residentKeys: Effect.Effect<number>
}

/** At most one full sweep per second: expired keys are unreachable at once, the sweep only frees memory. */
const minSweepMs = 1_000

const integerPattern = /^-?\d+$/

const parseInteger = (raw: string): number | undefined => {
  if (!integerPattern.test(raw)) return undefined
  const n = Number(raw)
  return Number.isSafeInteger(n) ? n : undefined
}

const notAnInteger = "ERR value is not an integer or out of range"

interface Channel {
  readonly pubsub: PubSub.PubSub<Signal>
  subscribers: number
}

/**
 * Token files written to `dataDir`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const filesWritten = MemoryDisk.filesWritten

/**
 * Token files removed from `dataDir` because their token expired.
 *
 * @since 0.1.0
 * @category metrics
 */
export const filesRemoved = MemoryDisk.filesRemoved

/**
 * Token file writes or removals that failed (each is retried by a later flush).
 *
 * @since 0.1.0
 * @category metrics
 */
export const fileWriteFailures = MemoryDisk.fileWriteFailures

/**
 * Build a memory store whose sweeper runs in the current scope. With `dataDir` set, the
 * store first loads the tokens kept there, then writes every change of a token's slices
 * and fencing counter back to it; closing the scope writes what is still pending. A
 * directory that cannot be created, listed or written fails the build with
 * `DataDirError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<MemoryStore, DataDirError, LeaseholdConfig | Scope.Scope> = Effect.gen(function* () {
  const settings = yield* LeaseholdConfig
  const keys = makeKeys(settings.keyPrefix)
  const lockMs = Duration.toMillis(settings.lockExpiration)
  const tokenMs = Duration.toMillis(settings.tokenExpiration)
  const ks = new Keyspace(
    minSweepMs,
    yield* Effect.clockWith((clock) => Effect.sync(() => clock.unsafeCurrentTimeMillis()))
  )
  const status = yield* SubscriptionRef.make<ConnectionStatus>({ ready: true, epoch: 1 })
  const flushReports = yield* PubSub.unbounded<FlushReport>()
  if (Option.isSome(settings.dataDir)) {
    yield* MemoryDisk.attach(ks, {
      dir: settings.dataDir.value,
      keys,
      flushInterval: settings.dataFlushInterval,
      reports: flushReports
    })
  }

  let available = true
  // One deferred per subscriber "connection": failing it fails every stream opened on it.
  let subscriberLost = Deferred.unsafeMake<never, StoreUnavailable>(FiberId.none)
  const channels = new Map<string, Channel>()
  const socketChanges = yield* PubSub.unbounded<SocketEvent>()
  let socketEventsRefused = false
  const mailboxWaiters = new Map<string, Set<Deferred.Deferred<void, StoreUnavailable>>>()

  const unavailable = (operation: string) =>
    new StoreUnavailable({ operation, reason: "the memory store is set unavailable" })

  /** How many operations have reached the key space (`MemoryStoreControl.operations`). */
  let operations = 0
  /** One atomic step: availability check, clock read and state change in one synchronous block. */
  const op = <A, E>(
    operation: string,
    body: (now: number) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | StoreUnavailable | StoreRefused> =>
    Effect.clockWith((clock) =>
      Effect.suspend((): Effect.Effect<A, E | StoreUnavailable | StoreRefused> => {
        operations++
        if (!available) return Effect.fail(unavailable(operation))
        try {
          return body(clock.unsafeCurrentTimeMillis())
        } catch (error) {
          if (error instanceof WrongTypeError) return Effect.fail(new StoreRefused({ operation, reply: error.message }))
          throw error
        }
      })
    )

  const publishNow = (token: string, signal: Signal): void => {
    channels.get(keys.signal(token))?.pubsub.unsafeOffer(signal)
  }

  /** The keyspace event Redis would publish for a socket key; other keys have no listener. */
  const socketEvent = (key: string, event: SocketEvent["event"]): void => {
    if (socketEventsRefused) return
    const token = keys.socketToken(key)
    if (token !== undefined && isValidToken(token)) socketChanges.unsafeOffer({ token, event })
  }
  ks.onExpired = (key) => socketEvent(key, "expired")

  /** `SET NX` of a record; the record there when it is taken. */
  const claimNow = (token: string, record: SocketRecord, now: number): Either.Either<ClaimResult, CorruptValue> => {
    const key = keys.socket(token)
    const existing = ks.getString(key, now)
    if (existing === undefined) {
      ks.setString(key, encodeSocketRecord(record), now + tokenMs)
      socketEvent(key, "set")
      return Either.right({ _tag: "Claimed" })
    }
    return Either.map(decodeSocketRecord(key, existing.value), (found) => ({ _tag: "Taken", record: found }))
  }

  const dropSubscriberConnection = (reason: string): void => {
    const lost = subscriberLost
    subscriberLost = Deferred.unsafeMake<never, StoreUnavailable>(FiberId.none)
    // Old channels stop receiving: a reconnected subscriber starts from a fresh channel.
    channels.clear()
    Deferred.unsafeDone(lost, Effect.fail(new StoreUnavailable({ operation: "subscribe", reason })))
  }

  const wakeMailboxReaders = (key: string, outcome: Effect.Effect<void, StoreUnavailable>): void => {
    const waiting = mailboxWaiters.get(key)
    if (waiting === undefined) return
    mailboxWaiters.delete(key)
    for (const deferred of waiting) Deferred.unsafeDone(deferred, outcome)
  }

  const remainingMs = (lock: StringEntry, now: number): number =>
    // A lock without TTL exists only through `setRaw`; a full expiration is the honest re-check bound.
    lock.deadline === undefined ? lockMs : Math.max(0, lock.deadline - now)

  const readFence = (token: string, now: number): number | undefined => {
    const entry = ks.getString(keys.fence(token), now)
    return entry === undefined ? 0 : parseInteger(entry.value)
  }

  /** PEXPIRE key tokenExpiration, on a key of any kind; nothing when it is absent. */
  const refreshTokenKey = (key: string, now: number): void => {
    const entry = ks.get(key, now)
    if (entry !== undefined) ks.expire(key, entry, now + tokenMs, now)
  }

  /**
   * The fence lives as long as the slices it protects, so every step that gives a slice a
   * new TTL gives the fence the same (a fence that expired before its slices would start
   * again at 1 under a newer holder).
   */
  const refreshFence = (token: string, now: number): void => refreshTokenKey(keys.fence(token), now)

  /** GETEX … EX tokenExpiration over every name, in order. Reads all before touching any TTL. */
  const readAndRefresh = (token: string, names: ReadonlyArray<string>, now: number) => {
    refreshFence(token, now)
    const found = names.map((name) => {
      const key = keys.slice(token, name)
      return [key, ks.getString(key, now)] as const
    })
    return found.map(([key, entry]) => {
      if (entry === undefined) return Option.none<string>()
      ks.expire(key, entry, now + tokenMs, now)
      return Option.some(entry.value)
    })
  }

  const lockLost = (token: string, lockId: string, lock: StringEntry | undefined) =>
    new LockLost({ token, lockId, holder: Option.map(Option.fromNullable(lock), (entry) => entry.value) })

  const writeSlices = (token: string, entries: ReadonlyArray<SliceEntry>, now: number): void => {
    refreshFence(token, now)
    for (const [name, value] of entries) ks.setString(keys.slice(token, name), value, now + tokenMs)
  }

  /** ZREMRANGEBYSCORE -inf now: the members whose deadline has passed. */
  const dropExpired = (set: SetEntry, now: number): void => {
    for (const [member, deadline] of set.members) if (deadline <= now) set.members.delete(member)
  }

  /**
   * ZREMRANGEBYSCORE (the expired members) + ZADD with the instance's own deadline, one
   * lock expiration from now + PEXPIRE of the set to that deadline, then publish
   * `Contended`: also when already a member, so no re-registration is silent.
   */
  const registerNow = (token: string, instanceId: string, now: number): void => {
    const key = keys.waiters(token)
    let set = ks.getSet(key, now)
    if (set === undefined) {
      set = { _tag: "set", members: new Map(), deadline: undefined }
      ks.insert(key, set)
    }
    dropExpired(set, now)
    set.members.set(instanceId, now + lockMs)
    ks.expire(key, set, now + lockMs, now)
    publishNow(token, { _tag: "Contended", instanceId })
  }

  /** ZREMRANGEBYSCORE (the expired members) + ZREM. */
  const deregisterNow = (token: string, instanceId: string, now: number): void => {
    const key = keys.waiters(token)
    const set = ks.getSet(key, now)
    if (set === undefined) return
    dropExpired(set, now)
    set.members.delete(instanceId)
    // Redis deletes a sorted set when its last member goes.
    if (set.members.size === 0) ks.delete(key)
  }

  /** The members whose deadline has not passed (ZRANGEBYSCORE (now +inf). */
  const liveWaiters = (token: string, now: number): Array<string> => {
    const set = ks.getSet(keys.waiters(token), now)
    if (set === undefined) return []
    return [...set.members].filter(([, deadline]) => deadline > now).map(([member]) => member)
  }

  /** ZCOUNT (now +inf, less the caller if it counts: on the path of every attempt, so a count, not a list. */
  const otherWaiters = (token: string, instanceId: string, now: number): number => {
    const set = ks.getSet(keys.waiters(token), now)
    if (set === undefined) return 0
    let others = 0
    for (const [member, deadline] of set.members) if (deadline > now && member !== instanceId) others++
    return others
  }

  /** Read the record under `key` for a compare: a corrupt record matches nothing. */
  const isRecord = (key: string, record: SocketRecord, now: number): StringEntry | undefined => {
    const entry = ks.getString(key, now)
    if (entry === undefined) return undefined
    const decoded = decodeSocketRecord(key, entry.value)
    return Either.isRight(decoded) &&
      decoded.right.instanceId === record.instanceId &&
      decoded.right.connectionId === record.connectionId
      ? entry
      : undefined
  }

  const readMailbox = (key: string, afterMs: number, afterSeq: number, count: number, now: number) => {
    const stream = ks.getStream(key, now)
    if (stream === undefined) return []
    const start = firstAfter(stream.items, afterMs, afterSeq)
    const end = Math.min(stream.items.length, start + count)
    return stream.items.slice(start, end).map(({ id, payload }): MailboxEntry => ({ id, payload }))
  }

  const trimStream = (stream: StreamEntry, maxLen: number): void => {
    if (!Number.isFinite(maxLen)) return
    const keep = Math.max(0, Math.floor(maxLen))
    if (stream.items.length > keep) stream.items.splice(0, stream.items.length - keep)
  }

  const store: Store.Service = {
    kind: "memory",

    tryAcquire: (token, lockId, slices, options) =>
      Effect.zipRight(
        Effect.zipRight(validateTokenAndInstance(token, options?.instanceId), validateSliceNames(slices)),
        op("tryAcquire", (now): Effect.Effect<AcquireResult, StoreRefused> => {
          const lockKey = keys.lock(token)
          const lock = ks.getString(lockKey, now)
          // Read before anything is written: a waiter key of the wrong type refuses the whole step.
          const contenders = options === undefined ? 0 : otherWaiters(token, options.instanceId, now)
          if (lock !== undefined) {
            if (options?.register === true) registerNow(token, options.instanceId, now)
            return Effect.succeed({ _tag: "Held", remainingMs: remainingMs(lock, now) })
          }
          const fence = readFence(token, now)
          if (fence === undefined)
            return Effect.fail(new StoreRefused({ operation: "tryAcquire", reply: notAnInteger }))
          const values = readAndRefresh(token, slices, now)
          ks.setString(lockKey, lockId, now + lockMs)
          ks.setString(keys.fence(token), String(fence + 1), now + tokenMs)
          // The new holder no longer waits; the others counted above are still in the set.
          if (options !== undefined) deregisterNow(token, options.instanceId, now)
          return Effect.succeed({ _tag: "Acquired", fence: fence + 1, values, contenders })
        })
      ),

    release: (token, lockId, options) =>
      Effect.zipRight(
        validateTokenAndInstance(token, options?.instanceId),
        op("release", (now) => {
          const lockKey = keys.lock(token)
          const contenders = options === undefined ? 0 : otherWaiters(token, options.instanceId, now)
          const released = ks.getString(lockKey, now)?.value === lockId
          if (released) {
            ks.delete(lockKey)
            publishNow(token, { _tag: "Released", lockId })
          }
          if (options?.register === true) registerNow(token, options.instanceId, now)
          return Effect.succeed({ released, contenders })
        })
      ),

    commitAndRelease: (token, lockId, entries, options) =>
      Effect.zipRight(
        Effect.zipRight(
          validateTokenAndInstance(token, options?.instanceId),
          validateSliceNames(entries.map(([name]) => name))
        ),
        op("commitAndRelease", (now) => {
          const lockKey = keys.lock(token)
          const lock = ks.getString(lockKey, now)
          if (lock?.value !== lockId) return Effect.fail(lockLost(token, lockId, lock))
          const contenders = options === undefined ? 0 : otherWaiters(token, options.instanceId, now)
          writeSlices(token, entries, now)
          ks.delete(lockKey)
          publishNow(token, { _tag: "Released", lockId })
          if (options?.register === true) registerNow(token, options.instanceId, now)
          return Effect.succeed(contenders)
        })
      ),

    extend: (token, lockId, slices = []) =>
      Effect.zipRight(
        Effect.zipRight(validateToken(token), validateSliceNames(slices)),
        op("extend", (now) => {
          const lockKey = keys.lock(token)
          const lock = ks.getString(lockKey, now)
          if (lock?.value !== lockId) return Effect.succeed(false)
          ks.expire(lockKey, lock, now + lockMs, now)
          refreshFence(token, now)
          for (const name of slices) refreshTokenKey(keys.slice(token, name), now)
          return Effect.succeed(true)
        })
      ),

    holder: (token) =>
      Effect.zipRight(
        validateToken(token),
        op("holder", (now) => {
          const lock = ks.getString(keys.lock(token), now)
          if (lock === undefined) return Effect.succeed(Option.none())
          const fence = readFence(token, now)
          if (fence === undefined) return Effect.fail(new StoreRefused({ operation: "holder", reply: notAnInteger }))
          return Effect.succeed(Option.some({ lockId: lock.value, fence, remainingMs: remainingMs(lock, now) }))
        })
      ),

    registerWaiter: (token, instanceId) =>
      Effect.zipRight(
        validateTokens(token, instanceId),
        op("registerWaiter", (now) => {
          registerNow(token, instanceId, now)
          return Effect.void
        })
      ),

    deregisterWaiter: (token, instanceId) =>
      Effect.zipRight(
        validateTokens(token, instanceId),
        op("deregisterWaiter", (now) => {
          deregisterNow(token, instanceId, now)
          return Effect.void
        })
      ),

    otherContenders: (token, instanceId) =>
      Effect.zipRight(
        validateTokens(token, instanceId),
        op("otherContenders", (now) => Effect.succeed(otherWaiters(token, instanceId, now)))
      ),

    waiters: (token) =>
      Effect.zipRight(
        validateToken(token),
        op("waiters", (now) => Effect.succeed(liveWaiters(token, now)))
      ),

    readSlices: (token, names) =>
      Effect.zipRight(
        Effect.zipRight(validateToken(token), validateSliceNames(names)),
        op("readSlices", (now) => Effect.succeed(readAndRefresh(token, names, now)))
      ),

    writeIfHolder: (token, lockId, entries) =>
      Effect.zipRight(
        Effect.zipRight(validateToken(token), validateSliceNames(entries.map(([name]) => name))),
        op("writeIfHolder", (now) => {
          const lock = ks.getString(keys.lock(token), now)
          if (lock?.value !== lockId) return Effect.fail(lockLost(token, lockId, lock))
          writeSlices(token, entries, now)
          return Effect.void
        })
      ),

    publish: (token, signal) =>
      Effect.zipRight(
        validateTokenAndInstance(token, signalInstance(signal)),
        op("publish", () => {
          publishNow(token, signal)
          return Effect.void
        })
      ),

    subscribe: (token) =>
      Effect.gen(function* () {
        yield* validateToken(token)
        const key = keys.signal(token)
        // Made up front so that joining or creating the channel below is one synchronous step.
        const fresh = yield* PubSub.unbounded<Signal>()
        const [channel, lost] = yield* Effect.acquireRelease(
          op("subscribe", () => {
            let channel = channels.get(key)
            if (channel === undefined) {
              channel = { pubsub: fresh, subscribers: 0 }
              channels.set(key, channel)
            }
            channel.subscribers++
            return Effect.succeed([channel, subscriberLost] as const)
          }),
          ([channel]) =>
            Effect.suspend(() => {
              channel.subscribers--
              if (channel.subscribers > 0) return Effect.void
              // The last subscriber drops the channel: memory does not grow with tokens ever watched.
              if (channels.get(key) === channel) channels.delete(key)
              return PubSub.shutdown(channel.pubsub)
            })
        )
        const dequeue = yield* PubSub.subscribe(channel.pubsub)
        return Stream.fromQueue(dequeue).pipe(Stream.interruptWhenDeferred(lost))
      }),

    status: SubscriptionRef.get(status),
    statusChanges: status.changes,

    claimSocket: (token, record) =>
      Effect.zipRight(
        validateTokenAndInstance(token, record.instanceId),
        op(
          "claimSocket",
          (now): Effect.Effect<ClaimResult, CorruptValue> =>
            Either.match(claimNow(token, record, now), { onLeft: Effect.fail, onRight: Effect.succeed })
        )
      ),

    readSocket: (token) =>
      Effect.zipRight(
        validateToken(token),
        op("readSocket", (now): Effect.Effect<Option.Option<SocketRecord>, CorruptValue> => {
          const key = keys.socket(token)
          const entry = ks.getString(key, now)
          if (entry === undefined) return Effect.succeed(Option.none())
          return Either.match(decodeSocketRecord(key, entry.value), {
            onLeft: (error) => Effect.fail(error),
            onRight: (found) => Effect.succeed(Option.some(found))
          })
        })
      ),

    deleteSocketIfOwner: (token, record) =>
      Effect.zipRight(
        validateTokenAndInstance(token, record.instanceId),
        op("deleteSocketIfOwner", (now) => {
          const key = keys.socket(token)
          if (isRecord(key, record, now) === undefined) return Effect.succeed(false)
          ks.delete(key)
          socketEvent(key, "del")
          return Effect.succeed(true)
        })
      ),

    refreshSocket: (token, record) =>
      Effect.zipRight(
        validateTokenAndInstance(token, record.instanceId),
        op("refreshSocket", (now) => {
          const key = keys.socket(token)
          const entry = isRecord(key, record, now)
          if (entry === undefined) return Effect.succeed(false)
          ks.expire(key, entry, now + tokenMs, now)
          return Effect.succeed(true)
        })
      ),

    scanSockets: Stream.unwrap(
      Effect.gen(function* () {
        const raws = yield* op("scanSockets", (now) => {
          const found: Array<readonly [key: string, token: string, raw: string]> = []
          for (const [key, entry] of ks.entries) {
            const token = keys.socketToken(key)
            if (token === undefined || entry._tag !== "string") continue
            if (isExpired(entry, now)) ks.removeExpired(key)
            else found.push([key, token, entry.value])
          }
          return Effect.succeed(found)
        })
        const records: Array<readonly [token: string, record: SocketRecord]> = []
        for (const [key, token, raw] of raws) {
          if (!isValidToken(token)) {
            yield* Effect.logWarning(`MemoryStore.scanSockets: skipping ${key}: not a valid token`)
            continue
          }
          const decoded = decodeSocketRecord(key, raw)
          if (Either.isLeft(decoded))
            yield* Effect.logWarning(`MemoryStore.scanSockets: skipping ${decoded.left.message}`)
          else records.push([token, decoded.right])
        }
        return Stream.fromIterable(records)
      })
    ),

    claimSockets: (claims) =>
      Effect.gen(function* () {
        for (const [token, record] of claims) yield* validateTokenAndInstance(token, record.instanceId)
        return yield* op("claimSockets", (now) =>
          Effect.succeed(
            claims.map(([token, record]): Either.Either<ClaimResult, CorruptValue | StoreRefused> => {
              try {
                return claimNow(token, record, now)
              } catch (error) {
                // One record's refusal is its own, as each claim is its own script on Redis.
                if (error instanceof WrongTypeError) {
                  return Either.left(new StoreRefused({ operation: "claimSockets", reply: error.message }))
                }
                throw error
              }
            })
          )
        )
      }),

    enableSocketEvents: Effect.suspend(() => {
      if (!available) return Effect.fail(unavailable("enableSocketEvents"))
      return Effect.succeed<SocketEventsSetting>(
        socketEventsRefused
          ? { _tag: "Refused", reply: "ERR unknown command 'CONFIG'" }
          : { _tag: "Enabled", flags: "Kg$xe" }
      )
    }),

    socketEvents: Effect.gen(function* () {
      const lost = yield* op("socketEvents", () => Effect.succeed(subscriberLost))
      const dequeue = yield* PubSub.subscribe(socketChanges)
      return Stream.fromQueue(dequeue).pipe(Stream.interruptWhenDeferred(lost))
    }),

    mailboxAppend: (instanceId, payload, { maxLen, ttlMs }) =>
      Effect.zipRight(
        validateToken(instanceId),
        op("mailboxAppend", (now) => {
          const key = keys.mailbox(instanceId)
          let stream = ks.getStream(key, now)
          if (stream === undefined) {
            stream = { _tag: "stream", items: [], lastMs: 0, lastSeq: 0, deadline: undefined }
            ks.insert(key, stream)
          }
          if (stream.deadline === undefined) ks.expire(key, stream, now + Math.max(1, Math.ceil(ttlMs)), now)
          const { ms, seq } = nextStreamId(stream, now)
          const id = `${ms}-${seq}`
          stream.items.push({ ms, seq, id, payload })
          stream.lastMs = ms
          stream.lastSeq = seq
          trimStream(stream, maxLen)
          wakeMailboxReaders(key, Effect.void)
          return Effect.succeed(id)
        })
      ),

    mailboxRead: (instanceId, afterId, options) =>
      Effect.gen(function* () {
        yield* validateToken(instanceId)
        const count = Math.floor(options.count)
        if (!(count >= 1)) return []
        const after = parseStreamId(afterId)
        if (after === undefined) {
          return yield* new StoreRefused({
            operation: "mailboxRead",
            reply: "ERR Invalid stream ID specified as stream command argument"
          })
        }
        const key = keys.mailbox(instanceId)
        const read = op("mailboxRead", (now) => Effect.succeed(readMailbox(key, after.ms, after.seq, count, now)))
        // Whole milliseconds, as XREAD BLOCK takes them; under 1 ms means no wait.
        const blockMs = options.blockMs === undefined ? 0 : Math.ceil(options.blockMs)
        if (!(blockMs >= 1)) return yield* read

        const wake = yield* Deferred.make<void, StoreUnavailable>()
        // Reading and registering for the wake-up in one step: an append in between cannot
        // be missed. The registration is undone however the wait ends.
        return yield* Effect.acquireUseRelease(
          op("mailboxRead", (now) => {
            const entries = readMailbox(key, after.ms, after.seq, count, now)
            if (entries.length > 0) return Effect.succeed(entries)
            let waiting = mailboxWaiters.get(key)
            if (waiting === undefined) {
              waiting = new Set()
              mailboxWaiters.set(key, waiting)
            }
            waiting.add(wake)
            return Effect.succeed(undefined)
          }),
          (ready) =>
            ready !== undefined
              ? Effect.succeed(ready)
              : Effect.zipRight(Effect.timeoutOption(Deferred.await(wake), Duration.millis(blockMs)), read),
          () =>
            Effect.sync(() => {
              const waiting = mailboxWaiters.get(key)
              if (waiting === undefined) return
              waiting.delete(wake)
              if (waiting.size === 0) mailboxWaiters.delete(key)
            })
        )
      }),

    mailboxTrim: (instanceId, maxLen) =>
      Effect.zipRight(
        validateToken(instanceId),
        op("mailboxTrim", (now) => {
          const stream = ks.getStream(keys.mailbox(instanceId), now)
          if (stream !== undefined) trimStream(stream, maxLen)
          return Effect.void
        })
      ),

    mailboxExpire: (instanceId, ttlMs) =>
      Effect.zipRight(
        validateToken(instanceId),
        op("mailboxExpire", (now) => {
          const key = keys.mailbox(instanceId)
          const stream = ks.getStream(key, now)
          // As the Redis store sends it: whole milliseconds, at least one.
          if (stream !== undefined) ks.expire(key, stream, now + Math.max(1, Math.ceil(ttlMs)), now)
          return Effect.void
        })
      ),

    mailboxLength: (instanceId) =>
      Effect.zipRight(
        validateToken(instanceId),
        op("mailboxLength", (now) => Effect.succeed(ks.getStream(keys.mailbox(instanceId), now)?.items.length ?? 0))
      ),

    mailboxSetCursor: (instanceId, id, ttlMs) =>
      Effect.zipRight(
        validateToken(instanceId),
        op("mailboxSetCursor", (now) => {
          ks.setString(keys.mailboxCursor(instanceId), id, now + Math.max(1, Math.ceil(ttlMs)))
          return Effect.void
        })
      ),

    mailboxCursor: (instanceId) =>
      Effect.zipRight(
        validateToken(instanceId),
        op("mailboxCursor", (now) =>
          Effect.succeed(
            Option.map(Option.fromNullable(ks.getString(keys.mailboxCursor(instanceId), now)), (e) => e.value)
          )
        )
      ),

    tokenKeys: (token) =>
      Effect.zipRight(
        validateToken(token),
        op("tokenKeys", (now) => {
          const head = keys.tokenHead(token)
          const found: Array<KeyInfo> = []
          for (const [key, entry] of ks.entries) {
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
          return Effect.succeed(found)
        })
      )
  }

  const now = Effect.clockWith((clock) => Effect.sync(() => clock.unsafeCurrentTimeMillis()))

  const control: MemoryStoreControl.Service = {
    operations: Effect.sync(() => operations),
    setAvailable: (next) =>
      Effect.uninterruptible(
        Effect.suspend(() => {
          if (next === available) return Effect.void
          available = next
          if (next) return SubscriptionRef.update(status, (s) => ({ ready: true, epoch: s.epoch + 1 }))
          dropSubscriberConnection("the memory store is set unavailable")
          for (const key of Array.from(mailboxWaiters.keys())) {
            wakeMailboxReaders(key, Effect.fail(unavailable("mailboxRead")))
          }
          return SubscriptionRef.update(status, (s) => ({ ready: false, epoch: s.epoch }))
        })
      ),

    dropSubscriptions: Effect.uninterruptible(
      Effect.suspend(() => {
        dropSubscriberConnection("the subscriber connection was dropped")
        // While the whole store is down the subscriber cannot reconnect: status stays not ready.
        if (!available) return Effect.void
        return Effect.zipRight(
          SubscriptionRef.update(status, (s) => ({ ready: false, epoch: s.epoch })),
          SubscriptionRef.update(status, (s) => ({ ready: true, epoch: s.epoch + 1 }))
        )
      })
    ),

    setRaw: (key, value, ttlMs) =>
      Effect.map(now, (at) => {
        if (ttlMs !== undefined && ttlMs <= 0) {
          if (ks.get(key, at) !== undefined && ks.delete(key)) socketEvent(key, "del")
        } else {
          ks.setString(key, value, ttlMs === undefined ? undefined : at + ttlMs)
          socketEvent(key, "set")
        }
      }),

    getRaw: (key) =>
      Effect.map(now, (at) => {
        const entry = ks.get(key, at)
        return entry?._tag === "string" ? Option.some(entry.value) : Option.none()
      }),

    keyCount: Effect.map(now, (at) => ks.sweep(at)),

    flushReports: PubSub.subscribe(flushReports),
    refuseSocketEvents: (refused) =>
      Effect.sync(() => {
        socketEventsRefused = refused
      })
  }

  // The sweeper sleeps until the earliest deadline (re-planned when an earlier one is
  // set), so an idle store does not wake and a store full of dead keys is emptied.
  const sweepStep = Effect.gen(function* () {
    const poke = yield* Deferred.make<void>()
    const delay = yield* Effect.map(now, (at) => {
      if (at >= ks.wakeAt) ks.sweep(at)
      ks.onWakeAtLowered = () => Deferred.unsafeDone(poke, Effect.void)
      return ks.wakeAt - at
    })
    if (delay === Number.POSITIVE_INFINITY) yield* Deferred.await(poke)
    else yield* Effect.race(Effect.sleep(Duration.millis(delay)), Deferred.await(poke))
  })
  yield* Effect.forkScoped(Effect.interruptible(Effect.forever(sweepStep)))

  return {
    ...store,
    kind: "memory",
    control,
    residentKeys: Effect.sync(() => ks.entries.size)
  } satisfies MemoryStore
})

/**
 * The embedded store and its control. Each build is a separate store: empty, or loaded
 * from `dataDir` when it is set.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Store | MemoryStoreControl, DataDirError, LeaseholdConfig> = Layer.scopedContext(
  Effect.map(make, (memory) => Context.make(Store, memory).pipe(Context.add(MemoryStoreControl, memory.control)))
)
