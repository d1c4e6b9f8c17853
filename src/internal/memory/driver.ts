/**
 * The memory backend's `Driver`: each operation is one step (`op`): the availability check,
 * a read of `Clock` and a described operation's `memory` (`call`) or a plain command, in one
 * synchronous block, atomic on a single-threaded runtime. Also here: the channels of
 * pub/sub (one `PubSub` per channel, reference-counted through `RcMap`: a token's signals,
 * a worker's notices), blocked mailbox reads, and the connection status that the control
 * layer (`./control.ts`) moves.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as RcMap from "effect/RcMap"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { LeaseholdConfig } from "../../LeaseholdConfig.js"
import type { ConnectionStatus, MailboxEntry } from "../../Store.js"
import { StoreRefused, StoreUnavailable } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import * as Operations from "../operations/index.js"
import type { Driver, RawSocketEvent, ScannedRecord } from "../store/driver.js"
import { firstAfter, isExpired, type Keyspace, parseStreamId, WrongTypeError } from "./keyspace.js"
import * as Scripts from "./space.js"
import * as Step from "./step.js"

/** The driver's mutable state, which the control layer also moves. @internal */
export interface State {
  readonly ks: Keyspace
  readonly status: SubscriptionRef.SubscriptionRef<ConnectionStatus>
  available: boolean
  /** One deferred per subscriber "connection": failing it fails every stream opened on it. */
  subscriberLost: Deferred.Deferred<never, StoreUnavailable>
  /** `true`: behave like a managed Redis that refuses `CONFIG` (no socket events). */
  socketEventsRefused: boolean
  /** Operations that reached the key space (past the front's validation). */
  operations: number
  /** Notices to workers still to lose (`MemoryStoreControl.loseNotices`). */
  noticesToLose: number
  /** Notices to workers still to hold back (`MemoryStoreControl.holdNotices`). */
  noticesToHold: number
  /** The notices held back, each delivering itself (to whoever listens then) when run. */
  readonly heldNotices: Array<() => void>
  /** Replies still to lose, by operation (`MemoryStoreControl.loseReplies`). */
  readonly repliesToLose: Map<string, number>
  /** Emits the keyspace event Redis would publish for a change of a socket key. */
  readonly keyEvent: (key: string, event: string) => void
  /** Makes the channels of the lost connection unreachable, and (`failReaders`) fails blocked mailbox reads. */
  readonly dropConnection: (reason: string, failReaders: boolean) => Effect.Effect<void>
}

/** @internal */
export const unavailable = (operation: string) =>
  new StoreUnavailable({ operation, reason: "the memory store is set unavailable" })

/**
 * The channels of the subscriber "connection": one PubSub per channel, made by its first
 * subscriber and shut down after its last. Keyed in the map by `<connection>:<name>`: a
 * channel of a dropped connection is never handed out again, nor replaced under its own key.
 */
interface Channels {
  /** The channel each name's subscribers share now: published to while anyone holds it. */
  readonly delivered: Map<string, PubSub.PubSub<string>>
  readonly map: RcMap.RcMap<string, PubSub.PubSub<string>>
  /** Counts the connection's drops: the first part of the map's keys. */
  connection: number
}

const makeChannels = (): Effect.Effect<Channels, never, Scope.Scope> =>
  Effect.gen(function* () {
    const delivered = new Map<string, PubSub.PubSub<string>>()
    const map = yield* RcMap.make({
      lookup: (key: string) => {
        const name = key.slice(key.indexOf(":") + 1)
        return Effect.acquireRelease(
          Effect.tap(PubSub.unbounded<string>(), (pubsub) => Effect.sync(() => delivered.set(name, pubsub))),
          (pubsub) =>
            Effect.suspend(() => {
              if (delivered.get(name) === pubsub) delivered.delete(name)
              return PubSub.shutdown(pubsub)
            })
        )
      }
    })
    return { delivered, map, connection: 0 }
  })

/** Settle the reads blocked on a mailbox: woken by an append, or failed by a lost connection. */
const wakeReaders = (readers: Readers, key: string, outcome: Effect.Effect<void, StoreUnavailable>): void => {
  const waiting = readers.get(key)
  if (waiting === undefined) return
  readers.delete(key)
  for (const deferred of waiting) Deferred.doneUnsafe(deferred, outcome)
}

/** The state the driver and its control layer share, each fault injection off. */
const makeState = (
  ks: Keyspace,
  keys: Keys,
  channels: Channels,
  readers: Readers,
  socketChanges: PubSub.PubSub<RawSocketEvent>
): Effect.Effect<State> =>
  Effect.gen(function* () {
    const state: State = {
      ks,
      status: yield* SubscriptionRef.make<ConnectionStatus>({ ready: true, epoch: 1 }),
      available: true,
      subscriberLost: Deferred.makeUnsafe<never, StoreUnavailable>(),
      socketEventsRefused: false,
      operations: 0,
      noticesToLose: 0,
      noticesToHold: 0,
      heldNotices: [],
      repliesToLose: new Map(),
      keyEvent: (key, event) => {
        if (!state.socketEventsRefused && keys.socketToken(key) !== undefined)
          PubSub.publishUnsafe(socketChanges, { key, event })
      },
      dropConnection: (reason, failReaders) =>
        Effect.sync(() => {
          const lost = state.subscriberLost
          state.subscriberLost = Deferred.makeUnsafe<never, StoreUnavailable>()
          // Old channels stop receiving: a reconnected subscriber starts from fresh channels.
          channels.connection++
          channels.delivered.clear()
          Deferred.doneUnsafe(lost, Effect.fail(new StoreUnavailable({ operation: "subscribe", reason })))
          if (failReaders) {
            for (const key of [...readers.keys()]) wakeReaders(readers, key, Effect.fail(unavailable("mailboxRead")))
          }
        })
    }
    return state
  })

/** Publish to a channel's subscribers now; a notice to a worker may be lost or held back instead. */
const publish =
  (state: State, keys: Keys, channels: Channels) =>
  (channel: string, message: string): void => {
    if (state.noticesToLose > 0 && channel.startsWith(keys.workerNotices(""))) {
      state.noticesToLose--
      return
    }
    if (state.noticesToHold > 0 && channel.startsWith(keys.workerNotices(""))) {
      state.noticesToHold--
      state.heldNotices.push(() => {
        const pubsub = channels.delivered.get(channel)
        if (pubsub !== undefined) PubSub.publishUnsafe(pubsub, message)
      })
      return
    }
    const pubsub = channels.delivered.get(channel)
    if (pubsub !== undefined) PubSub.publishUnsafe(pubsub, message)
  }

/** A channel's messages from now on; the stream fails when the subscriber "connection" is dropped. */
const listenOn =
  (state: State, op: Op, channels: Channels): Listen =>
  (operation, name) =>
    Effect.gen(function* () {
      const lost = yield* op(operation, () => state.subscriberLost)
      const pubsub = yield* RcMap.get(channels.map, `${channels.connection}:${name}`)
      const dequeue = yield* PubSub.subscribe(pubsub)
      return Stream.fromSubscription(dequeue).pipe(Stream.interruptWhen(Deferred.await(lost)))
    })

/**
 * Build the driver over a key space, and the state its control layer needs. The channels
 * live in the current scope.
 *
 * @internal
 */
export const make = (
  ks: Keyspace,
  keys: Keys,
  settings: LeaseholdConfig["Service"]
): Effect.Effect<{ readonly driver: Driver; readonly state: State }, never, Scope.Scope> =>
  Effect.gen(function* () {
    const socketChanges = yield* PubSub.unbounded<RawSocketEvent>()
    const mailboxReaders: Readers = new Map()
    const channels = yield* makeChannels()
    const state = yield* makeState(ks, keys, channels, mailboxReaders, socketChanges)
    ks.onExpired = (key) => state.keyEvent(key, "expired")

    const space: Scripts.Space = {
      ks,
      keys,
      lockMs: Duration.toMillis(settings.lockExpiration),
      tokenMs: Duration.toMillis(settings.tokenExpiration),
      handoffMs: Duration.toMillis(settings.handoffTimeout),
      publish: publish(state, keys, channels),
      keyEvent: state.keyEvent,
      appended: (key) => wakeReaders(mailboxReaders, key, Effect.void)
    }

    const op = makeOp(state)
    const listen = listenOn(state, op, channels)
    const driver: Driver = {
      kind: "memory",
      name: "MemoryStore",
      keys,
      call: makeCall(space, op),
      ...queuePart(space, listen),
      ...signalPart(state, space, op, listen),
      ...socketPart(state, space, op, socketChanges),
      ...presencePart(space, op, listen),
      ...mailboxPart(space, op, mailboxReaders),
      tokenKeys: (token) => op("tokenKeys", (now) => Scripts.describeKeys(space, now, token)),
      modifyInStep: (token, slices, decide, options) =>
        op("modifyInStep", (now) => Step.modifyInStep(space, now, token, slices, decide, options))
    }
    return { driver, state }
  })

type Op = <A>(operation: string, body: (now: number) => A) => Effect.Effect<A, StoreUnavailable | StoreRefused>

/**
 * One atomic step: availability check, clock read and state change in one synchronous
 * block. The block runs in `clockWith`'s callback, when the step runs (each run anew): the
 * step is two instructions of the runtime, the clock's read and its reply.
 */
const makeOp =
  (state: State): Op =>
  (operation, body) =>
    Effect.clockWith((clock): Effect.Effect<ReturnType<typeof body>, StoreUnavailable | StoreRefused> => {
      state.operations++
      if (!state.available) return Effect.fail(unavailable(operation))
      try {
        const reply = body(clock.currentTimeMillisUnsafe())
        const toLose = state.repliesToLose.get(operation) ?? 0
        if (toLose === 0) return Effect.succeed(reply)
        if (toLose === 1) state.repliesToLose.delete(operation)
        else state.repliesToLose.set(operation, toLose - 1)
        return Effect.fail(new StoreUnavailable({ operation, reason: "the reply was lost" }))
      } catch (error) {
        if (error instanceof WrongTypeError || error instanceof Scripts.NotAnInteger) {
          return Effect.fail(new StoreRefused({ operation, reply: error.message }))
        }
        if (error instanceof StoreRefused) return Effect.fail(error)
        throw error
      }
    })

/**
 * A described operation in one step: its `memory` on the key space, its reply read as on
 * Redis; a reply the reading refuses is `StoreRefused`.
 */
const makeCall =
  (space: Scripts.Space, op: Op): Driver["call"] =>
  (operation, args) =>
    op(operation.name, (now) => {
      const out = operation.read(operation.memory(space, now, args), args, space.lockMs)
      if (out instanceof StoreRefused) throw out
      return out
    }) as Effect.Effect<any, any>

/** Subscribing to a channel by name (one PubSub per channel, shared through an `RcMap`). */
type Listen = (
  operation: string,
  name: string
) => Effect.Effect<Stream.Stream<string, StoreUnavailable>, StoreUnavailable | StoreRefused, Scope.Scope>

/** A worker's notices on its one channel, shared by every token (the queue's steps are `call`'s). */
const queuePart = (space: Scripts.Space, listen: Listen) =>
  ({
    noticeChannel: (_token, instanceId) => space.keys.workerNotices(instanceId),
    notices: (_token, instanceId) => listen("notices", space.keys.workerNotices(instanceId))
  }) satisfies Partial<Driver>

/** Publishing, subscribing to a token's channel and the status. */
const signalPart = (state: State, space: Scripts.Space, op: Op, listen: Listen) => {
  const { keys } = space
  return {
    publish: (token, message) => op("publish", () => space.publish(keys.signal(token), message)),
    subscribe: (token) => listen("subscribe", keys.signal(token)),
    status: SubscriptionRef.get(state.status),
    statusChanges: SubscriptionRef.changes(state.status)
  } satisfies Partial<Driver>
}

/** Socket records: plain reads, the scan (claims through the claim's description) and the keyspace events. */
const socketPart = (state: State, space: Scripts.Space, op: Op, socketChanges: PubSub.PubSub<RawSocketEvent>) => {
  const { keys, ks } = space
  return {
    readSocket: (token) =>
      op("readSocket", (now) =>
        Option.map(Option.fromNullishOr(ks.getString(keys.socket(token), now)), (e) => e.value)
      ),
    scanSockets: Stream.unwrap(
      Effect.map(
        op("scanSockets", (now) => {
          const found: Array<ScannedRecord> = []
          for (const [key, entry] of ks.entries) {
            const token = keys.socketToken(key)
            if (token === undefined || entry._tag !== "string") continue
            if (isExpired(entry, now)) ks.removeExpired(key)
            else found.push({ key, token, raw: entry.value })
          }
          return found
        }),
        Stream.fromIterable
      )
    ),
    claimSockets: (claims) =>
      op("claimSockets", (now) =>
        claims.map(([token, record]) => {
          try {
            return Result.succeed(Operations.claimSocket.memory(space, now, { token, record }))
          } catch (error) {
            // One record's refusal is its own, as each claim is its own script on Redis.
            if (error instanceof WrongTypeError) {
              return Result.fail(new StoreRefused({ operation: "claimSockets", reply: error.message }))
            }
            throw error
          }
        })
      ),
    enableSocketEvents: Effect.suspend(() => {
      if (!state.available) return Effect.fail(unavailable("enableSocketEvents"))
      return Effect.succeed(
        state.socketEventsRefused
          ? ({ _tag: "Refused", reply: "ERR unknown command 'CONFIG'" } as const)
          : ({ _tag: "Enabled", flags: "Kg$xe" } as const)
      )
    }),
    socketEvents: Effect.gen(function* () {
      const lost = yield* op("socketEvents", () => state.subscriberLost)
      const dequeue = yield* PubSub.subscribe(socketChanges)
      return Stream.fromSubscription(dequeue).pipe(Stream.interruptWhen(Deferred.await(lost)))
    })
  } satisfies Partial<Driver>
}

/** Presence: plain reads and deletes, and the worker's channel. */
const presencePart = (space: Scripts.Space, op: Op, listen: Listen) => {
  const { keys, ks } = space
  return {
    isPresent: (instanceId) => op("isPresent", (now) => ks.get(keys.presence(instanceId), now) !== undefined),
    removePresence: (instanceId) =>
      op("removePresence", () => {
        ks.delete(keys.presence(instanceId))
      }),
    presencePublish: (instanceId, message) =>
      op("presencePublish", () => space.publish(keys.presenceChannel(instanceId), message)),
    presenceMessages: (instanceId) => listen("presenceMessages", keys.presenceChannel(instanceId))
  } satisfies Partial<Driver>
}

type Readers = Map<string, Set<Deferred.Deferred<void, StoreUnavailable>>>

/** Mailboxes: reads (a blocked read waits for the next append), trim, expiry, the cursor. */
const mailboxPart = (space: Scripts.Space, op: Op, mailboxReaders: Readers) => {
  const { keys, ks } = space
  const readMailbox = (
    key: string,
    after: { readonly ms: number; readonly seq: number },
    count: number,
    now: number
  ) => {
    const stream = ks.getStream(key, now)
    if (stream === undefined) return []
    const start = firstAfter(stream.items, after.ms, after.seq)
    const end = Math.min(stream.items.length, start + count)
    return stream.items.slice(start, end).map(({ id, payload }): MailboxEntry => ({ id, payload }))
  }

  /** Read, or register for the next append in the same step (an append in between cannot be missed), then wait. */
  const readBlocking = (
    key: string,
    after: { readonly ms: number; readonly seq: number },
    count: number,
    blockMs: number
  ) =>
    Effect.flatMap(Deferred.make<void, StoreUnavailable>(), (wake) =>
      Effect.acquireUseRelease(
        op("mailboxRead", (now) => {
          const entries = readMailbox(key, after, count, now)
          if (entries.length > 0) return entries
          let waiting = mailboxReaders.get(key)
          if (waiting === undefined) {
            waiting = new Set()
            mailboxReaders.set(key, waiting)
          }
          waiting.add(wake)
          return undefined
        }),
        (ready) =>
          ready !== undefined
            ? Effect.succeed(ready)
            : Effect.andThen(
                Effect.timeoutOption(Deferred.await(wake), Duration.millis(blockMs)),
                op("mailboxRead", (now) => readMailbox(key, after, count, now))
              ),
        () =>
          Effect.sync(() => {
            const waiting = mailboxReaders.get(key)
            if (waiting === undefined) return
            waiting.delete(wake)
            if (waiting.size === 0) mailboxReaders.delete(key)
          })
      )
    )

  return {
    mailboxRead: (instanceId, afterId, count, blockMs) =>
      Effect.suspend(() => {
        const after = parseStreamId(afterId)
        if (after === undefined) {
          return Effect.fail(
            new StoreRefused({
              operation: "mailboxRead",
              reply: "ERR Invalid stream ID specified as stream command argument"
            })
          )
        }
        const key = keys.mailbox(instanceId)
        if (blockMs === 0) return op("mailboxRead", (now) => readMailbox(key, after, count, now))
        return readBlocking(key, after, count, blockMs)
      }),
    mailboxTrim: (instanceId, maxLen) =>
      op("mailboxTrim", (now) => {
        const stream = ks.getStream(keys.mailbox(instanceId), now)
        if (stream !== undefined) Scripts.trimStream(stream, maxLen)
      }),
    mailboxExpire: (instanceId, ttlMs) =>
      op("mailboxExpire", (now) => {
        const key = keys.mailbox(instanceId)
        const stream = ks.getStream(key, now)
        if (stream !== undefined) ks.expire(key, stream, now + ttlMs, now)
      }),
    mailboxLength: (instanceId) =>
      op("mailboxLength", (now) => ks.getStream(keys.mailbox(instanceId), now)?.items.length ?? 0),
    mailboxSetCursor: (instanceId, id, ttlMs) =>
      op("mailboxSetCursor", (now) => {
        ks.setString(keys.mailboxCursor(instanceId), id, now + ttlMs)
      }),
    mailboxCursor: (instanceId) =>
      op("mailboxCursor", (now) =>
        Option.map(Option.fromNullishOr(ks.getString(keys.mailboxCursor(instanceId), now)), (e) => e.value)
      )
  } satisfies Partial<Driver>
}
