/**
 * The token channels of a Redis store's pub/sub. A channel is one confirmed subscription
 * shared by every local listener of it: an entry of an `RcMap`, whose first `get` sends
 * SUBSCRIBE (SSUBSCRIBE on a Cluster) on the subscriber connection of the channel's node and
 * whose last release sends UNSUBSCRIBE. A listener's stream starts once the server
 * confirmed the subscription. A channel that fails (its connection dropped, its slot moved,
 * SUBSCRIBE refused) fails its listeners with `StoreUnavailable` and is never handed out
 * again: the next subscribe gets a new entry, under a new key of the map.
 *
 * @internal
 */

import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as RcMap from "effect/RcMap"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { type StoreError, StoreUnavailable } from "../../StoreError.js"
import { awaitReady, withLiveClock } from "./connection.js"
import type { Health } from "./health.js"
import type { Subscriber } from "./pubsub.js"
import type { Topology } from "./topology.js"

/** One channel, shared by every local listener of one token. */
interface Channel {
  readonly name: string
  readonly slot: number
  readonly subscriber: Subscriber
  /** The subscriber's generation when SUBSCRIBE was sent; a later one means the server forgot it. */
  readonly generation: number
  readonly confirmed: Deferred.Deferred<void, StoreError>
  readonly listeners: Set<Queue.Queue<string, StoreUnavailable | Cause.Done>>
}

/** @internal */
export interface Channels {
  /** Raw messages of a channel from the confirmation on; the stream fails when the subscription is lost. */
  readonly subscribe: (name: string) => Effect.Effect<Stream.Stream<string, StoreUnavailable>, StoreError, Scope.Scope>
  /** A message arrived on a subscriber connection. */
  readonly deliver: (name: string, message: string) => void
  /** Fail every channel on this subscriber (its connection dropped). */
  readonly failOn: (subscriber: Subscriber, error: StoreUnavailable) => void
  /**
   * After the slot table changed: fail the channels whose slot a master of `masters` other
   * than their subscriber's node serves now. Returns the nodes still serving a live
   * channel's slot (they keep their subscriber), and whether anything failed.
   */
  readonly moved: (
    masters: ReadonlySet<string>,
    error: StoreUnavailable
  ) => { readonly owners: ReadonlySet<string>; readonly changed: boolean }
}

/** @internal */
export interface Environment {
  readonly topology: Topology
  readonly health: Health
  readonly commandTimeoutMs: number
  readonly mapError: (operation: string) => (cause: unknown) => StoreError
  /** The subscriber connection of the node serving a channel. */
  readonly subscriberFor: (name: string) => Effect.Effect<Subscriber, StoreUnavailable>
  /** Wait for a confirmation, at most the command timeout. */
  readonly awaitConfirmed: (
    confirmed: Deferred.Deferred<void, StoreError>,
    operation: string
  ) => Effect.Effect<void, StoreError>
}

/** What the channels share: the environment, and the channel now in force for each name. */
interface State {
  readonly env: Environment
  /** The channel now in force for each name (an `RcMap` entry may be a failed one, until released). */
  readonly live: Map<string, Channel>
  /** The `RcMap` key of each name's channel now: `<incarnation>:<name>`. */
  readonly keyOf: Map<string, string>
  incarnation: number
}

/** A channel is no longer the one in force for its name: the next subscribe starts a new one. */
const retire = (state: State, channel: Channel) => {
  if (state.live.get(channel.name) !== channel) return
  state.live.delete(channel.name)
  state.keyOf.delete(channel.name)
}

/**
 * A channel's listeners are told it is lost; the next subscribe starts a new one. It is
 * retired first: a listener's fiber resumes on this very call stack, and may subscribe
 * again before the loop is done.
 */
const fail = (state: State, channel: Channel, error: StoreUnavailable) => {
  retire(state, channel)
  Deferred.doneUnsafe(channel.confirmed, Effect.fail(error))
  for (const mailbox of [...channel.listeners]) Queue.failCauseUnsafe(mailbox, Cause.fail(error))
}

/** The first listener of a name sends SUBSCRIBE; ioredis resolves it once the server confirmed it. */
const open = (state: State, name: string): Effect.Effect<Channel, StoreUnavailable> => {
  const { env } = state
  const { topology } = env
  return Effect.map(env.subscriberFor(name), (subscriber) => {
    const channel: Channel = {
      name,
      slot: topology.slotOf(name),
      subscriber,
      generation: subscriber.generation,
      confirmed: Deferred.makeUnsafe<void, StoreError>(),
      listeners: new Set()
    }
    state.live.set(name, channel)
    topology.channels.subscribe(subscriber.connection, name).then(
      () => Deferred.doneUnsafe(channel.confirmed, Effect.void),
      (cause) => {
        topology.onReplyError(cause)
        Deferred.doneUnsafe(channel.confirmed, Effect.fail(env.mapError("subscribe")(cause)))
        // A refused SUBSCRIBE must not stay in force: the next subscriber tries again.
        retire(state, channel)
      }
    )
    return channel
  })
}

/** The last listener out sends UNSUBSCRIBE, unless the server already forgot the channel. */
const close = (state: State, channel: Channel): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (state.live.get(channel.name) === channel) retire(state, channel)
    // A newer channel (this one's SUBSCRIBE failed) owns the server's subscription now.
    else if (state.live.has(channel.name)) return Effect.void
    const { connection } = channel.subscriber
    if (channel.generation !== channel.subscriber.generation || connection.status !== "ready") return Effect.void
    return Effect.promise(() =>
      state.env.topology.channels.unsubscribe(connection, channel.name).catch(() => undefined)
    ).pipe(Effect.timeoutOption(state.env.commandTimeoutMs), withLiveClock, Effect.asVoid)
  })

/** The channel of a name now: the map's entry under the name's current key, a new key once it failed. */
const channelFor = (
  state: State,
  channels: RcMap.RcMap<string, Channel, StoreUnavailable>,
  name: string
): Effect.Effect<Channel, StoreUnavailable, Scope.Scope> =>
  Effect.suspend(() => {
    let key = state.keyOf.get(name)
    if (key === undefined) {
      key = `${state.incarnation++}:${name}`
      state.keyOf.set(name, key)
    }
    return RcMap.get(channels, key)
  })

/** Add a listener's mailbox to its channel for the scope's life; the mailbox ends when it leaves. */
const listen = (
  state: State,
  channel: Channel,
  mailbox: Queue.Queue<string, StoreUnavailable | Cause.Done>
): Effect.Effect<void, StoreUnavailable, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() =>
      // A channel that failed while the map handed it out (its connection dropped,
      // its slot moved) would neither deliver nor fail: subscribe again instead.
      state.live.get(channel.name) === channel
        ? Effect.sync(() => {
            channel.listeners.add(mailbox)
          })
        : Effect.fail(new StoreUnavailable({ operation: "subscribe", reason: "the subscription was lost" }))
    ),
    () =>
      Effect.sync(() => {
        channel.listeners.delete(mailbox)
        Queue.endUnsafe(mailbox)
      })
  )

/** A listener of a channel, its stream starting once the subscription is confirmed. */
const subscribe = (state: State, channels: RcMap.RcMap<string, Channel, StoreUnavailable>, name: string) =>
  Effect.gen(function* () {
    const { env } = state
    const { commandTimeoutMs } = env
    const subscriber = yield* env.subscriberFor(name)
    yield* awaitReady(subscriber.connection, commandTimeoutMs, env.health.notConnected("subscribe", commandTimeoutMs))
    const channel = yield* channelFor(state, channels, name)
    const mailbox = yield* Queue.unbounded<string, StoreUnavailable | Cause.Done>()
    yield* listen(state, channel, mailbox)
    yield* env.awaitConfirmed(channel.confirmed, "subscribe")
    return Stream.fromQueue(mailbox)
  })

/** Fail the channels whose slot moved to another master; see `Channels.moved`. */
const moved = (state: State, masters: ReadonlySet<string>, error: StoreUnavailable) => {
  let changed = false
  const owners = new Set<string>()
  for (const channel of [...state.live.values()]) {
    const owner = state.env.topology.slotOwner(channel.slot)
    if (owner === undefined) continue
    owners.add(owner)
    // an owner that is not a master of the table is no better than the one we have
    if (owner === channel.subscriber.node || !masters.has(owner)) continue
    fail(state, channel, error)
    changed = true
  }
  return { owners, changed }
}

/** @internal */
export const make = (env: Environment): Effect.Effect<Channels, never, Scope.Scope> =>
  Effect.gen(function* () {
    const state: State = { env, live: new Map(), keyOf: new Map(), incarnation: 0 }
    const channels = yield* RcMap.make({
      lookup: (key: string) =>
        Effect.acquireRelease(open(state, key.slice(key.indexOf(":") + 1)), (channel) => close(state, channel))
    })
    return {
      subscribe: (name) => subscribe(state, channels, name),
      deliver: (name, message) => {
        const channel = state.live.get(name)
        if (channel === undefined) return
        for (const mailbox of channel.listeners) Queue.offerUnsafe(mailbox, message)
      },
      failOn: (subscriber, error) => {
        for (const channel of [...state.live.values()])
          if (channel.subscriber === subscriber) fail(state, channel, error)
      },
      moved: (masters, error) => moved(state, masters, error)
    }
  })
