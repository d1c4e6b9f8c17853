/**
 * Pub/sub of a Redis store: the subscriber connections (one on a single server, one per
 * master on a Cluster), the token channels, and the pattern subscription to socket-record
 * changes.
 *
 * A channel is one confirmed subscription shared by every local listener of it: an entry of
 * an `RcMap` keyed by channel name, whose first `get` sends SUBSCRIBE (SSUBSCRIBE on a
 * Cluster) and whose last release sends UNSUBSCRIBE. A listener's stream starts once the
 * server confirmed it. When the subscriber connection drops, the server forgets its
 * subscriptions, and so do we: every channel on it fails its listeners with
 * `StoreUnavailable` and is replaced at the next subscribe. On a Cluster, a channel whose
 * slot moved to another master fails the same way, as does the socket watch when the
 * masters change.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Mailbox from "effect/Mailbox"
import * as RcMap from "effect/RcMap"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type { Redis } from "ioredis"
import { type StoreError, StoreUnavailable } from "../../StoreError.js"
import type { RawSocketEvent } from "../store/driver.js"
import {
  awaitReady,
  closeConnection,
  connectionOptions,
  type Endpoint,
  openConnection,
  toStoreError,
  withLiveClock
} from "./connection.js"
import type { Health } from "./health.js"
import type { Settings, Topology } from "./topology.js"

/** A subscriber connection: the only one on a single server, one per master on a cluster. */
interface Subscriber {
  /** The node's `host:port` on a cluster; "" on a single server. */
  readonly node: string
  readonly connection: Redis
  /** Counts the connection's drops: a channel subscribed in an earlier one is forgotten by the server. */
  generation: number
}

/** One channel, shared by every local listener of one token. */
interface Channel {
  readonly name: string
  readonly slot: number
  readonly subscriber: Subscriber
  /** The subscriber's generation when SUBSCRIBE was sent; a later one means the server forgot it. */
  readonly generation: number
  readonly confirmed: Deferred.Deferred<void, StoreError>
  readonly listeners: Set<Mailbox.Mailbox<string, StoreUnavailable>>
}

/** The pattern subscription to socket-record changes (on every master), shared by every local listener. */
interface SocketWatch {
  readonly parts: ReadonlyArray<{ readonly subscriber: Subscriber; readonly generation: number }>
  readonly confirmed: Deferred.Deferred<void, StoreError>
  readonly listeners: Set<Mailbox.Mailbox<RawSocketEvent, StoreUnavailable>>
}

/** @internal */
export interface PubSub {
  /** Subscribe to a channel: raw messages from the confirmation on; the stream fails when the subscription is lost. */
  readonly subscribe: (name: string) => Effect.Effect<Stream.Stream<string, StoreUnavailable>, StoreError, Scope.Scope>
  /** Subscribe to socket-record changes on every master. */
  readonly socketEvents: Effect.Effect<Stream.Stream<RawSocketEvent, StoreUnavailable>, StoreError, Scope.Scope>
  /** Open a subscriber for every master and wait until each is ready. */
  readonly connected: (timeoutMs: number, onTimeout: () => StoreUnavailable) => Effect.Effect<void, StoreUnavailable>
}

/** @internal */
export interface Keyspace {
  /** The pattern of the keyspace channels of socket keys. */
  readonly pattern: string
  /** The key a keyspace channel is about, when it is one of ours. */
  readonly key: (channel: string) => string | undefined
}

/** @internal */
export const make = (
  endpoint: Endpoint,
  topology: Topology,
  health: Health,
  settings: Settings,
  keyspace: Keyspace
): Effect.Effect<PubSub, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { commandTimeoutMs } = settings
    const subscribers = new Map<string, Subscriber>()
    /** The channel now in force for each name (an `RcMap` entry may be a failed one, until released). */
    const live = new Map<string, Channel>()
    let socketWatch: SocketWatch | undefined
    let closed = false
    const mapError = (operation: string) => toStoreError(endpoint, operation)
    /**
     * The `RcMap` key of each name's channel now. A channel that failed (connection lost,
     * slot moved, SUBSCRIBE refused) is never handed out again, even while a listener still
     * holds it: the next subscribe gets a new entry under a new key.
     */
    const keyOf = new Map<string, string>()
    let incarnation = 0
    const retire = (name: string) => keyOf.delete(name)

    /** A channel's listeners are told it is lost; the next subscribe starts a new one. */
    const failChannel = (channel: Channel, error: StoreUnavailable) => {
      Deferred.unsafeDone(channel.confirmed, Effect.fail(error))
      for (const mailbox of channel.listeners) mailbox.unsafeDone(Exit.fail(error))
      if (live.get(channel.name) === channel) {
        live.delete(channel.name)
        retire(channel.name)
      }
    }
    const failSocketWatch = (watch: SocketWatch, error: StoreUnavailable) => {
      Deferred.unsafeDone(watch.confirmed, Effect.fail(error))
      for (const mailbox of watch.listeners) mailbox.unsafeDone(Exit.fail(error))
      if (socketWatch === watch) socketWatch = undefined
    }

    /** The server forgets a lost connection's subscriptions: so do we. */
    const dropSubscriptions = (subscriber: Subscriber) => {
      subscriber.generation++
      const error = new StoreUnavailable({
        operation: "subscribe",
        reason: `subscriber connection to ${subscriber.node === "" ? endpoint.safeUrl : subscriber.node} lost`
      })
      for (const channel of [...live.values()]) if (channel.subscriber === subscriber) failChannel(channel, error)
      if (socketWatch?.parts.some((part) => part.subscriber === subscriber)) failSocketWatch(socketWatch, error)
    }

    const onSocketEvent = (pattern: string, channel: string, message: string) => {
      if (pattern !== keyspace.pattern || socketWatch === undefined) return
      const key = keyspace.key(channel)
      if (key === undefined) return
      for (const mailbox of socketWatch.listeners) mailbox.unsafeOffer({ key, event: message })
    }
    const onMessage = (name: string, message: string) => {
      const channel = live.get(name)
      if (channel === undefined) return
      for (const mailbox of channel.listeners) mailbox.unsafeOffer(message)
    }

    const openSubscriber = (node: string): Subscriber => {
      const connection = openConnection(
        topology.endpointOf(node),
        connectionOptions("subscriber", settings),
        health.onError
      )
      const subscriber: Subscriber = { node, connection, generation: 0 }
      health.track(connection, "subscriber", (ready) => {
        if (!ready) dropSubscriptions(subscriber)
      })
      connection.on("pmessage", onSocketEvent)
      connection.on(topology.channels.message, onMessage)
      subscribers.set(node, subscriber)
      return subscriber
    }
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        return Effect.forEach(subscribers.values(), (s) => closeConnection(s.connection, commandTimeoutMs), {
          concurrency: "unbounded",
          discard: true
        })
      })
    )

    /** The subscriber connection of a node, opened on first use. */
    const nodeSubscriber = (node: string): Effect.Effect<Subscriber, StoreUnavailable> =>
      Effect.suspend(() => {
        const existing = subscribers.get(node)
        if (existing !== undefined) return Effect.succeed(existing)
        if (closed) return Effect.fail(new StoreUnavailable({ operation: "subscribe", reason: "the store is closed" }))
        return Effect.succeed(openSubscriber(node))
      })
    const subscriberFor = (name: string) => Effect.flatMap(topology.nodeOf("subscribe", name), nodeSubscriber)
    const allSubscribers = Effect.suspend(() => Effect.forEach(topology.masters(), nodeSubscriber))

    /**
     * After the cluster client re-read its slot table. A shard channel whose slot moved to
     * another master is lost: the server unsubscribes it when the slot leaves, and what is
     * published now goes to the new master. The socket watch must cover the masters as
     * they are now. A subscriber to a node that is no longer a master is closed: it would
     * try to reconnect for ever, and the store would never be ready again. Whatever was
     * lost fails its listeners with `StoreUnavailable` and counts as a new epoch, so that
     * their loops subscribe again at once, on the right nodes.
     */
    topology.onRefresh = () => {
      if (closed) return
      const current = new Set(topology.masters())
      // a table being rebuilt (no master known) says nothing yet
      if (current.size === 0) return
      const error = new StoreUnavailable({ operation: "subscribe", reason: `the cluster's slots moved` })
      let changed = false
      // Nodes that serve a live channel's slot keep their subscriber, even when the table
      // does not list them as masters (ioredis keeps the last owner of a slot nobody serves).
      const owners = new Set<string>()
      for (const channel of [...live.values()]) {
        const owner = topology.slotOwner(channel.slot)
        if (owner === undefined) continue
        owners.add(owner)
        // an owner that is not a master of the table is no better than the one we have
        if (owner === channel.subscriber.node || !current.has(owner)) continue
        failChannel(channel, error)
        changed = true
      }
      const watch = socketWatch
      if (
        watch !== undefined &&
        (watch.parts.length !== current.size || watch.parts.some((part) => !current.has(part.subscriber.node)))
      ) {
        failSocketWatch(watch, error)
        changed = true
      }
      for (const [node, subscriber] of [...subscribers]) {
        if (current.has(node) || owners.has(node)) continue
        subscribers.delete(node)
        health.forget(subscriber.connection)
        dropSubscriptions(subscriber)
        subscriber.connection.disconnect()
        changed = true
      }
      if (!changed) return
      // as at the start, every master has its subscriber: the store is ready once they are
      for (const node of current) if (!subscribers.has(node)) openSubscriber(node)
      health.newEpoch()
    }

    // --- channels -------------------------------------------------------------------
    /** The first listener of a name sends SUBSCRIBE; ioredis resolves it once the server confirmed it. */
    const openChannel = (name: string): Effect.Effect<Channel, StoreUnavailable> =>
      Effect.map(subscriberFor(name), (subscriber) => {
        const channel: Channel = {
          name,
          slot: topology.slotOf(name),
          subscriber,
          generation: subscriber.generation,
          confirmed: Deferred.unsafeMake<void, StoreError>(FiberId.none),
          listeners: new Set()
        }
        live.set(name, channel)
        topology.channels.subscribe(subscriber.connection, name).then(
          () => Deferred.unsafeDone(channel.confirmed, Effect.void),
          (cause) => {
            topology.onReplyError(cause)
            Deferred.unsafeDone(channel.confirmed, Effect.fail(mapError("subscribe")(cause)))
            // A refused SUBSCRIBE must not stay in force: the next subscriber tries again.
            if (live.get(name) === channel) {
              live.delete(name)
              retire(name)
            }
          }
        )
        return channel
      })

    /** The last listener out sends UNSUBSCRIBE, unless the server already forgot the channel. */
    const closeChannel = (channel: Channel): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (live.get(channel.name) === channel) {
          live.delete(channel.name)
          retire(channel.name)
        }
        // A newer channel (this one's SUBSCRIBE failed) owns the server's subscription now.
        else if (live.has(channel.name)) return Effect.void
        const { connection } = channel.subscriber
        if (channel.generation !== channel.subscriber.generation || connection.status !== "ready") return Effect.void
        return Effect.promise(() =>
          topology.channels.unsubscribe(connection, channel.name).catch(() => undefined)
        ).pipe(Effect.timeoutOption(commandTimeoutMs), withLiveClock, Effect.asVoid)
      })

    // Keyed by `<incarnation>:<name>`: an entry is never replaced under its own key.
    const channels = yield* RcMap.make({
      lookup: (key: string) => Effect.acquireRelease(openChannel(key.slice(key.indexOf(":") + 1)), closeChannel)
    })
    const channelFor = (name: string): Effect.Effect<Channel, StoreUnavailable, Scope.Scope> =>
      Effect.suspend(() => {
        let key = keyOf.get(name)
        if (key === undefined) {
          key = `${incarnation++}:${name}`
          keyOf.set(name, key)
        }
        return RcMap.get(channels, key)
      })

    const awaitConfirmed = (confirmed: Deferred.Deferred<void, StoreError>, operation: string) =>
      Deferred.await(confirmed).pipe(
        Effect.timeoutFail({
          duration: commandTimeoutMs,
          onTimeout: () => new StoreUnavailable({ operation, reason: "no confirmation within the command timeout" })
        }),
        withLiveClock
      )

    const subscribe = (name: string) =>
      Effect.gen(function* () {
        const subscriber = yield* subscriberFor(name)
        yield* awaitReady(subscriber.connection, commandTimeoutMs, health.notConnected("subscribe", commandTimeoutMs))
        const channel = yield* channelFor(name)
        const mailbox = yield* Mailbox.make<string, StoreUnavailable>()
        yield* Effect.acquireRelease(
          Effect.sync(() => channel.listeners.add(mailbox)),
          () =>
            Effect.sync(() => {
              channel.listeners.delete(mailbox)
              mailbox.unsafeDone(Exit.void)
            })
        )
        yield* awaitConfirmed(channel.confirmed, "subscribe")
        return Mailbox.toStream(mailbox)
      })

    // --- the socket watch -----------------------------------------------------------
    /**
     * The first listener sends PSUBSCRIBE (on every master of a cluster: keyspace events are
     * published on the node whose key changed); a refused one is not kept, so the next
     * listener tries again.
     */
    const joinSocketWatch = (
      on: ReadonlyArray<Subscriber>,
      mailbox: Mailbox.Mailbox<RawSocketEvent, StoreUnavailable>
    ): SocketWatch => {
      let watch = socketWatch
      if (watch === undefined) {
        const created: SocketWatch = {
          parts: on.map((subscriber) => ({ subscriber, generation: subscriber.generation })),
          confirmed: Deferred.unsafeMake<void, StoreError>(FiberId.none),
          listeners: new Set()
        }
        socketWatch = created
        Promise.all(on.map((subscriber) => subscriber.connection.psubscribe(keyspace.pattern))).then(
          () => Deferred.unsafeDone(created.confirmed, Effect.void),
          (cause) => {
            Deferred.unsafeDone(created.confirmed, Effect.fail(mapError("socketEvents")(cause)))
            if (socketWatch === created) socketWatch = undefined
          }
        )
        watch = created
      }
      watch.listeners.add(mailbox)
      return watch
    }

    const leaveSocketWatch = (
      watch: SocketWatch,
      mailbox: Mailbox.Mailbox<RawSocketEvent, StoreUnavailable>
    ): Effect.Effect<void> =>
      Effect.suspend(() => {
        watch.listeners.delete(mailbox)
        mailbox.unsafeDone(Exit.void)
        if (watch.listeners.size > 0 || socketWatch !== watch) return Effect.void
        socketWatch = undefined
        const stillThere = watch.parts.filter(
          ({ generation, subscriber }) =>
            subscriber.generation === generation && subscriber.connection.status === "ready"
        )
        return Effect.forEach(
          stillThere,
          ({ subscriber }) =>
            Effect.promise(() => subscriber.connection.punsubscribe(keyspace.pattern).catch(() => undefined)).pipe(
              Effect.timeoutOption(commandTimeoutMs),
              withLiveClock
            ),
          { concurrency: "unbounded", discard: true }
        )
      })

    const socketEvents = Effect.gen(function* () {
      const on = yield* allSubscribers
      if (on.length === 0) return yield* Effect.fail(health.notConnected("socketEvents", commandTimeoutMs)())
      yield* Effect.forEach(
        on,
        (s) => awaitReady(s.connection, commandTimeoutMs, health.notConnected("socketEvents", commandTimeoutMs)),
        { concurrency: "unbounded", discard: true }
      )
      const mailbox = yield* Mailbox.make<RawSocketEvent, StoreUnavailable>()
      const watch = yield* Effect.acquireRelease(
        Effect.sync(() => joinSocketWatch(on, mailbox)),
        (watch) => leaveSocketWatch(watch, mailbox)
      )
      yield* awaitConfirmed(watch.confirmed, "socketEvents")
      return Mailbox.toStream(mailbox)
    })

    return {
      subscribe,
      socketEvents,
      connected: (timeoutMs, onTimeout) =>
        Effect.flatMap(allSubscribers, (all) =>
          Effect.forEach(all, (s) => awaitReady(s.connection, timeoutMs, onTimeout), {
            concurrency: "unbounded",
            discard: true
          })
        )
    }
  })
