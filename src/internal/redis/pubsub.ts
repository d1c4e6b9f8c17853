/**
 * Pub/sub of a Redis store: the subscriber connections (one on a single server, one per
 * master on a Cluster) and what runs on them, the token channels (`channels.ts`) and the
 * socket watch (`socketWatch.ts`).
 *
 * When a subscriber connection drops, the server forgets its subscriptions, and so do we:
 * every channel on it, and the socket watch if it uses it, fail their listeners with
 * `StoreUnavailable`; listeners subscribe again. On a Cluster, each re-read of the slot
 * table is checked: channels whose slot moved fail the same way, the socket watch fails
 * when the masters changed, and subscribers of nodes that are no longer masters close.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type { Redis } from "ioredis"
import { type StoreError, StoreUnavailable } from "../../StoreError.js"
import type { RawSocketEvent } from "../store/driver.js"
import * as Channels from "./channels.js"
import {
  awaitReady,
  closeConnection,
  connectionOptions,
  type Endpoint,
  endConnection,
  openConnection,
  toStoreError,
  withLiveClock
} from "./connection.js"
import type { Health } from "./health.js"
import * as SocketWatch from "./socketWatch.js"
import type { Settings, Topology } from "./topology.js"

/** A subscriber connection: the only one on a single server, one per master on a cluster. @internal */
export interface Subscriber {
  /** The node's `host:port` on a cluster; "" on a single server. */
  readonly node: string
  readonly connection: Redis
  /** Counts the connection's drops: a subscription made in an earlier one is forgotten by the server. */
  generation: number
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

export type { Keyspace } from "./socketWatch.js"

/** The subscriber connections of a store, by node, and what they need to open. */
interface Nodes {
  readonly endpoint: Endpoint
  readonly topology: Topology
  readonly health: Health
  readonly settings: Settings
  readonly subscribers: Map<string, Subscriber>
  /** Set when the store's scope closes: no subscriber opens after that. */
  closed: boolean
}

/** What runs on the subscriber connections: it hears their messages, and loses their subscriptions. */
interface Listeners {
  readonly channels: Channels.Channels
  readonly socketWatch: SocketWatch.SocketWatch
}

/** The subscriber connection of a node, opened on first use. */
const nodeSubscriber = (
  nodes: Nodes,
  open: (node: string) => Subscriber,
  node: string
): Effect.Effect<Subscriber, StoreUnavailable> =>
  Effect.suspend(() => {
    const existing = nodes.subscribers.get(node)
    if (existing !== undefined) return Effect.succeed(existing)
    if (nodes.closed)
      return Effect.fail(new StoreUnavailable({ operation: "subscribe", reason: "the store is closed" }))
    return Effect.succeed(open(node))
  })

/** What the channels and the socket watch are given: the subscribers, and the waits on them. */
const environmentOf = (
  nodes: Nodes,
  keyspace: SocketWatch.Keyspace,
  subscriberOf: (node: string) => Effect.Effect<Subscriber, StoreUnavailable>
): Channels.Environment & SocketWatch.Environment => {
  const { commandTimeoutMs } = nodes.settings
  const { topology } = nodes
  return {
    topology,
    health: nodes.health,
    commandTimeoutMs,
    mapError: (operation: string) => toStoreError(nodes.endpoint, operation),
    subscriberFor: (name: string) => Effect.flatMap(topology.nodeOf("subscribe", name), subscriberOf),
    awaitConfirmed: (confirmed: Deferred.Deferred<void, StoreError>, operation: string) =>
      Deferred.await(confirmed).pipe(
        Effect.timeoutOrElse({
          duration: commandTimeoutMs,
          orElse: () =>
            Effect.failSync(
              () => new StoreUnavailable({ operation, reason: "no confirmation within the command timeout" })
            )
        }),
        withLiveClock
      ),
    keyspace,
    allSubscribers: Effect.suspend(() => Effect.forEach(topology.masters(), subscriberOf))
  }
}

/** The server forgets a lost connection's subscriptions: so do we. */
const dropSubscriptions = (nodes: Nodes, listeners: Listeners, subscriber: Subscriber) => {
  subscriber.generation++
  const error = new StoreUnavailable({
    operation: "subscribe",
    reason: `subscriber connection to ${subscriber.node === "" ? nodes.endpoint.safeUrl : subscriber.node} lost`
  })
  listeners.channels.failOn(subscriber, error)
  listeners.socketWatch.failOn(subscriber, error)
}

/** Open a node's subscriber connection: its messages go to the listeners, and its drops lose their subscriptions. */
const openSubscriber = (nodes: Nodes, listeners: Listeners, node: string): Subscriber => {
  const { health, topology } = nodes
  const connection = openConnection(
    topology.endpointOf(node),
    connectionOptions("subscriber", nodes.settings),
    health.onError
  )
  const subscriber: Subscriber = { node, connection, generation: 0 }
  health.track(connection, "subscriber", (ready) => {
    if (!ready) dropSubscriptions(nodes, listeners, subscriber)
  })
  connection.on("pmessage", listeners.socketWatch.deliver)
  connection.on(topology.channels.message, listeners.channels.deliver)
  nodes.subscribers.set(node, subscriber)
  return subscriber
}

/** Close every subscriber, and open none after. */
const closeAll = (nodes: Nodes): Effect.Effect<void> =>
  Effect.suspend(() => {
    nodes.closed = true
    return Effect.forEach(
      nodes.subscribers.values(),
      (s) => closeConnection(s.connection, nodes.settings.commandTimeoutMs),
      {
        concurrency: "unbounded",
        discard: true
      }
    )
  })

/**
 * After the cluster client re-read its slot table. A shard channel whose slot moved to
 * another master is lost: the server unsubscribes it when the slot leaves, and what is
 * published now goes to the new master. The socket watch must cover the masters as
 * they are now. A subscriber to a node that is no longer a master is closed: it would
 * try to reconnect for ever, and the store would never be ready again. Whatever was
 * lost fails its listeners with `StoreUnavailable` and counts as a new epoch, so that
 * their loops subscribe again at once, on the right nodes.
 */
const slotsRefreshed = (nodes: Nodes, listeners: Listeners): void => {
  const { health, subscribers, topology } = nodes
  if (nodes.closed) return
  const masters = new Set(topology.masters())
  // a table being rebuilt (no master known) says nothing yet
  if (masters.size === 0) return
  const error = new StoreUnavailable({ operation: "subscribe", reason: `the cluster's slots moved` })
  // Nodes that serve a live channel's slot keep their subscriber, even when the table
  // does not list them as masters (ioredis keeps the last owner of a slot nobody serves).
  const { changed: moved, owners } = listeners.channels.moved(masters, error)
  let changed = listeners.socketWatch.mastersAre(masters, error) || moved
  for (const [node, subscriber] of [...subscribers]) {
    if (masters.has(node) || owners.has(node)) continue
    subscribers.delete(node)
    health.forget(subscriber.connection)
    dropSubscriptions(nodes, listeners, subscriber)
    endConnection(subscriber.connection)
    changed = true
  }
  if (!changed) return
  // as at the start, every master has its subscriber: the store is ready once they are
  for (const node of masters) if (!subscribers.has(node)) openSubscriber(nodes, listeners, node)
  health.newEpoch()
}

/** @internal */
export const make = (
  endpoint: Endpoint,
  topology: Topology,
  health: Health,
  settings: Settings,
  keyspace: SocketWatch.Keyspace
): Effect.Effect<PubSub, never, Scope.Scope> =>
  Effect.gen(function* () {
    const nodes: Nodes = { endpoint, topology, health, settings, subscribers: new Map(), closed: false }
    // The listeners are built over the subscribers they listen on: a subscriber opens on
    // their first use of it, once both exist.
    const environment = environmentOf(nodes, keyspace, (node) =>
      nodeSubscriber(nodes, (opened) => openSubscriber(nodes, listeners, opened), node)
    )
    const listeners: Listeners = {
      channels: yield* Channels.make(environment),
      socketWatch: SocketWatch.make(environment)
    }
    yield* Effect.addFinalizer(() => closeAll(nodes))
    topology.onRefresh = () => slotsRefreshed(nodes, listeners)

    // Subscribers connect beside the command connection: a single server's at once, a
    // cluster's for each master its client already knows (the others in `connected`).
    for (const node of topology.masters()) openSubscriber(nodes, listeners, node)

    return {
      subscribe: listeners.channels.subscribe,
      socketEvents: listeners.socketWatch.subscribe,
      connected: (timeoutMs, onTimeout) =>
        Effect.flatMap(environment.allSubscribers, (all) =>
          Effect.forEach(all, (s) => awaitReady(s.connection, timeoutMs, onTimeout), {
            concurrency: "unbounded",
            discard: true
          })
        )
    }
  })
