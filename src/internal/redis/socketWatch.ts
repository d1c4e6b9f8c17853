/**
 * The pattern subscription of a Redis store to socket-record changes (keyspace
 * notifications), shared by every local listener: PSUBSCRIBE on every master (the events
 * are published on the node whose key changed), sent by the first listener and undone by
 * the last. It fails its listeners with `StoreUnavailable` when a connection it uses drops,
 * or when the masters change; a refused PSUBSCRIBE is not kept, so the next listener tries
 * again.
 *
 * @internal
 */

import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { StoreError, StoreUnavailable } from "../../StoreError.js"
import type { RawSocketEvent } from "../store/driver.js"
import type { Environment as ChannelsEnvironment } from "./channels.js"
import { awaitReady, withLiveClock } from "./connection.js"
import type { Subscriber } from "./pubsub.js"

/** The subscription on every master, shared by every local listener. */
interface Watch {
  readonly parts: ReadonlyArray<{ readonly subscriber: Subscriber; readonly generation: number }>
  readonly confirmed: Deferred.Deferred<void, StoreError>
  readonly listeners: Set<Queue.Queue<RawSocketEvent, StoreUnavailable | Cause.Done>>
}

/** @internal */
export interface SocketWatch {
  readonly subscribe: Effect.Effect<Stream.Stream<RawSocketEvent, StoreUnavailable>, StoreError, Scope.Scope>
  /** A pattern message arrived on a subscriber connection. */
  readonly deliver: (pattern: string, channel: string, message: string) => void
  /** Fail the watch if it uses this subscriber (its connection dropped). */
  readonly failOn: (subscriber: Subscriber, error: StoreUnavailable) => void
  /** Fail the watch unless it covers exactly these masters; `true` when it failed. */
  readonly mastersAre: (masters: ReadonlySet<string>, error: StoreUnavailable) => boolean
}

/** @internal */
export interface Keyspace {
  /** The pattern of the keyspace channels of socket keys. */
  readonly pattern: string
  /** The key a keyspace channel is about, when it is one of ours. */
  readonly key: (channel: string) => string | undefined
}

/** @internal */
export interface Environment extends Omit<ChannelsEnvironment, "subscriberFor"> {
  readonly keyspace: Keyspace
  /** A subscriber for every master. */
  readonly allSubscribers: Effect.Effect<ReadonlyArray<Subscriber>, StoreUnavailable>
}

/** @internal */
export const make = (env: Environment): SocketWatch => {
  const { commandTimeoutMs, health, keyspace } = env
  let current: Watch | undefined

  // The watch is dropped first: a listener's fiber resumes on this very call stack, and may
  // watch again before the loop is done.
  const fail = (watch: Watch, error: StoreUnavailable) => {
    if (current === watch) current = undefined
    Deferred.doneUnsafe(watch.confirmed, Effect.fail(error))
    for (const mailbox of [...watch.listeners]) Queue.failCauseUnsafe(mailbox, Cause.fail(error))
  }

  const join = (
    on: ReadonlyArray<Subscriber>,
    mailbox: Queue.Queue<RawSocketEvent, StoreUnavailable | Cause.Done>
  ): Watch => {
    let watch = current
    if (watch === undefined) {
      const created: Watch = {
        parts: on.map((subscriber) => ({ subscriber, generation: subscriber.generation })),
        confirmed: Deferred.makeUnsafe<void, StoreError>(),
        listeners: new Set()
      }
      current = created
      Promise.all(on.map((subscriber) => subscriber.connection.psubscribe(keyspace.pattern))).then(
        () => Deferred.doneUnsafe(created.confirmed, Effect.void),
        (cause) => {
          Deferred.doneUnsafe(created.confirmed, Effect.fail(env.mapError("socketEvents")(cause)))
          if (current === created) current = undefined
        }
      )
      watch = created
    }
    watch.listeners.add(mailbox)
    return watch
  }

  const leave = (
    watch: Watch,
    mailbox: Queue.Queue<RawSocketEvent, StoreUnavailable | Cause.Done>
  ): Effect.Effect<void> =>
    Effect.suspend(() => {
      watch.listeners.delete(mailbox)
      Queue.endUnsafe(mailbox)
      if (watch.listeners.size > 0 || current !== watch) return Effect.void
      current = undefined
      const stillThere = watch.parts.filter(
        ({ generation, subscriber }) => subscriber.generation === generation && subscriber.connection.status === "ready"
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

  return {
    subscribe: Effect.gen(function* () {
      const on = yield* env.allSubscribers
      if (on.length === 0) return yield* Effect.fail(health.notConnected("socketEvents", commandTimeoutMs)())
      yield* Effect.forEach(
        on,
        (s) => awaitReady(s.connection, commandTimeoutMs, health.notConnected("socketEvents", commandTimeoutMs)),
        { concurrency: "unbounded", discard: true }
      )
      const mailbox = yield* Queue.unbounded<RawSocketEvent, StoreUnavailable | Cause.Done>()
      const watch = yield* Effect.acquireRelease(
        Effect.sync(() => join(on, mailbox)),
        (watch) => leave(watch, mailbox)
      )
      yield* env.awaitConfirmed(watch.confirmed, "socketEvents")
      return Stream.fromQueue(mailbox)
    }),
    deliver: (pattern, channel, message) => {
      if (pattern !== keyspace.pattern || current === undefined) return
      const key = keyspace.key(channel)
      if (key === undefined) return
      for (const mailbox of current.listeners) Queue.offerUnsafe(mailbox, { key, event: message })
    },
    failOn: (subscriber, error) => {
      if (current?.parts.some((part) => part.subscriber === subscriber)) fail(current, error)
    },
    mastersAre: (masters, error) => {
      const watch = current
      if (watch === undefined) return false
      if (watch.parts.length === masters.size && watch.parts.every((part) => masters.has(part.subscriber.node))) {
        return false
      }
      fail(watch, error)
      return true
    }
  }
}
