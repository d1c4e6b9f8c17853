/**
 * Per-token notices to this worker (its lock handed to it, another worker queued behind
 * it), with subscriptions that survive outages.
 *
 * A worker holds at most one store subscription per notice channel, however many local
 * fibers listen: one for all its tokens on a single server and on the embedded store, one per
 * token on a Redis Cluster; each notice is handed to the listeners of its own token only. A
 * token's entry outlives its last listener by one to two `lingerMs` periods (and a channel
 * its last token): a hot token is waited for again and again, and each wait then costs a
 * callback added to a set, not a subscription made and dropped. When the subscriber
 * connection is lost, one supervised loop (`signals`) restores every subscription as soon
 * as the store is back, and every listener of a restored token receives `Resubscribed`:
 * signals published meanwhile may be lost, so a waiter must re-check instead of trusting
 * that nothing happened.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { InstanceId } from "./InstanceId.js"
import { validateToken } from "./internal/validate.js"
import { type Notice, Store } from "./Store.js"
import type { InvalidToken, StoreError, StoreUnavailable } from "./StoreError.js"
import { Supervisor, untilRecovered } from "./Supervisor.js"

/**
 * What a listener receives: a store signal, or `Resubscribed` after the token's
 * subscription was restored (signals may have been missed before it).
 *
 * @since 0.1.0
 * @category models
 */
export type SignalEvent = Notice | { readonly _tag: "Resubscribed" }

/**
 * The name of the supervised loop that restores subscriptions.
 *
 * @since 0.1.0
 * @category constants
 */
export const loopName = "signals"

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Signals {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * Listen to a token's signals for the life of the scope. The store subscription is
     * confirmed before this returns: every signal published afterwards is delivered, or
     * followed by `Resubscribed` if the connection was lost in between.
     */
    readonly subscribe: (
      token: string
    ) => Effect.Effect<Stream.Stream<SignalEvent>, InvalidToken | StoreError, Scope.Scope>
    /**
     * Call `listener` with each of the token's signals until the returned function is
     * called; the same guarantee as `subscribe`. The listener runs synchronously in the
     * subscription's fiber and must not throw: it is the cheap way for a fiber that waits
     * on a token again and again (no stream, no fiber of its own).
     */
    readonly listen: (
      token: string,
      listener: (event: SignalEvent) => void
    ) => Effect.Effect<() => void, InvalidToken | StoreError>
    /** Tokens with at least one local listener. */
    readonly tokens: Effect.Effect<ReadonlyArray<string>>
    /**
     * Tokens whose store subscription is kept: those with listeners, and those whose last
     * listener left less than one to two `lingerMs` ago.
     */
    readonly subscribed: Effect.Effect<ReadonlyArray<string>>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Signals extends Context.Tag("leasehold/Signals")<Signals, Signals.Service>() {}

/** How long a token's subscription is kept without listeners: between one and two of these. */
export const lingerMs = 2_000

/**
 * One store subscription: a notice channel of this worker, shared by every token it carries
 * (all of them on a single server and on the embedded store, one on a Redis Cluster), so a
 * notice is decoded once and handed to its token's listeners alone.
 */
interface Channel {
  readonly name: string
  /** The tokens it carries that have an entry here. */
  readonly tokens: Map<string, Entry>
  readonly lock: Effect.Semaphore
  /** Set once its last token was swept away: nothing restores it any more. */
  closed: boolean
  /** The scope of the latest store subscription and its pump. */
  scope: Scope.CloseableScope | undefined
  /** Whether that subscription still delivers. */
  live: boolean
  /** Whether a subscription was ever confirmed: its replacement announces `Resubscribed`. */
  confirmed: boolean
}

interface Entry {
  readonly token: string
  readonly channel: Channel
  readonly listeners: Set<(event: SignalEvent) => void>
  /** Set by a sweep that found it without listeners; the next such sweep removes it. */
  idle: boolean
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const store = yield* Store
  const instanceId = yield* InstanceId
  const supervisor = yield* Supervisor
  const channels = new Map<string, Channel>()
  const entries = new Map<string, Entry>()
  const tell = (entry: Entry | undefined, event: SignalEvent) => {
    if (entry === undefined) return
    for (const listener of entry.listeners) {
      // A listener that throws must not stop the channel's other tokens' notices.
      try {
        listener(event)
      } catch {
        // its own fault, its own loss
      }
    }
  }
  // Completed by the first pump that loses its subscription; renewed by each attempt of the loop.
  let lost = yield* Deferred.make<never, StoreUnavailable>()

  const closeScope = (channel: Channel) =>
    Effect.suspend(() => {
      const scope = channel.scope
      channel.scope = undefined
      channel.live = false
      return scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
    })

  /**
   * Subscribe the channel in the store unless it already is. Replacing a lost subscription
   * announces `Resubscribed` to every listener of its tokens.
   */
  const ensureLive = (channel: Channel) =>
    channel.lock.withPermits(1)(
      Effect.suspend(() => {
        const first = channel.tokens.keys().next()
        if (channel.live || channel.closed || first.done === true) return Effect.void
        // any token of the channel names it
        const token = first.value
        return Effect.uninterruptibleMask((restoreInterrupt) =>
          Effect.gen(function* () {
            // The pump of a lost subscription has ended; release what is left of it.
            yield* closeScope(channel)
            const scope = yield* Scope.make()
            const stream = yield* restoreInterrupt(store.channelNotices(token, instanceId)).pipe(
              Scope.extend(scope),
              Effect.onError(() => Scope.close(scope, Exit.void))
            )
            // The pump cannot close its own scope (closing waits for the pump): it marks the
            // channel lost and wakes the loop, which closes the scope when it resubscribes.
            const markLost = (error: StoreUnavailable) =>
              Effect.suspend(() => {
                if (channel.scope === scope) channel.live = false
                return Deferred.fail(lost, error)
              })
            channel.scope = scope
            yield* stream.pipe(
              Stream.runForEach((received) =>
                Effect.sync(() => tell(channel.tokens.get(received.token), received.notice))
              ),
              Effect.catchAll(markLost),
              Effect.interruptible,
              Effect.forkIn(scope)
            )
            channel.live = true
            if (channel.confirmed) {
              for (const entry of channel.tokens.values()) tell(entry, { _tag: "Resubscribed" })
            }
            channel.confirmed = true
          })
        )
      })
    )

  // One entry per token with local listeners: made by the first, swept away once it has
  // had none for a whole sweep period; its channel goes with the last of its tokens.
  const entryOf = (token: string): Entry => {
    const existing = entries.get(token)
    if (existing !== undefined) return existing
    const name = store.noticeChannel(token, instanceId)
    let channel = channels.get(name)
    if (channel === undefined) {
      channel = {
        name,
        tokens: new Map(),
        lock: Effect.unsafeMakeSemaphore(1),
        closed: false,
        scope: undefined,
        live: false,
        confirmed: false
      }
      channels.set(name, channel)
    }
    const entry: Entry = { token, channel, listeners: new Set(), idle: false }
    channel.tokens.set(token, entry)
    entries.set(token, entry)
    return entry
  }

  const sweep = Effect.suspend(() => {
    const gone: Array<Channel> = []
    for (const entry of entries.values()) {
      if (entry.listeners.size > 0) entry.idle = false
      else if (!entry.idle) entry.idle = true
      else {
        // Gone from the maps before anything yields: a listener from now on makes a new entry.
        entries.delete(entry.token)
        entry.channel.tokens.delete(entry.token)
        if (entry.channel.tokens.size === 0) {
          entry.channel.closed = true
          channels.delete(entry.channel.name)
          gone.push(entry.channel)
        }
      }
    }
    return Effect.forEach(gone, (channel) => channel.lock.withPermits(1)(closeScope(channel)), { discard: true })
  })
  yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(lingerMs), sweep)))
  // Closed with the layer: the `signals` loop (in the supervisor's scope, which may outlive
  // this one) finds nothing left to restore.
  yield* Effect.addFinalizer(() =>
    Effect.suspend(() => {
      const all = [...channels.values()]
      channels.clear()
      entries.clear()
      for (const channel of all) channel.closed = true
      return Effect.forEach(all, (channel) => channel.lock.withPermits(1)(closeScope(channel)), { discard: true })
    })
  )

  const listen = (token: string, listener: (event: SignalEvent) => void) =>
    Effect.flatMap(validateToken(token), () =>
      Effect.suspend(() => {
        const entry = entryOf(token)
        entry.listeners.add(listener)
        entry.idle = false
        const unlisten = () => {
          entry.listeners.delete(listener)
        }
        // Listening before the subscription is confirmed: nothing published after it is missed.
        if (entry.channel.live) return Effect.succeed(unlisten)
        return ensureLive(entry.channel).pipe(
          Effect.onError(() => Effect.sync(unlisten)),
          Effect.as(unlisten)
        )
      })
    )

  const subscribe = (token: string) =>
    Effect.gen(function* () {
      const queue = yield* Queue.unbounded<SignalEvent>()
      yield* Effect.acquireRelease(
        listen(token, (event) => Queue.unsafeOffer(queue, event)),
        (unlisten) => Effect.sync(unlisten)
      )
      return Stream.fromQueue(queue)
    })

  // One loop restores every token subscription lost with the connection. The layer is
  // ready once the loop watches: a loss noticed before that would wait a full delay.
  const watching = yield* Deferred.make<void>()
  yield* supervisor.run(
    loopName,
    (recovered) =>
      Effect.gen(function* () {
        lost = yield* Deferred.make<never, StoreUnavailable>()
        const current = lost
        for (const channel of [...channels.values()]) yield* ensureLive(channel)
        yield* recovered
        yield* Deferred.succeed(watching, undefined)
        return yield* Deferred.await(current)
      }),
    untilRecovered()
  )
  yield* Deferred.await(watching)

  return Signals.of({
    subscribe,
    listen,
    tokens: Effect.sync(() => [...entries.values()].filter((entry) => entry.listeners.size > 0).map((e) => e.token)),
    subscribed: Effect.sync(() => [...entries.values()].filter((entry) => entry.channel.live).map((e) => e.token))
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Signals, never, Store | InstanceId | Supervisor> = Layer.scoped(Signals, make)
