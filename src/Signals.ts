/**
 * Per-token notices to this worker (its lock handed to it, another worker queued behind
 * it), with subscriptions that survive outages.
 *
 * A worker holds at most one store subscription per token, however many local fibers
 * listen (on a single server the store shares one channel per worker between them). A
 * token's subscription outlives its last listener by one to two `lingerMs` periods: a hot
 * token is waited for again and again, and each wait then costs a callback added to a set,
 * not a subscription made and dropped. When the subscriber connection is lost, one
 * supervised loop (`signals`) restores every token subscription as soon as the store is
 * back, and every listener of a restored token receives `Resubscribed`: signals published
 * meanwhile may be lost, so a waiter must re-check instead of trusting that nothing happened.
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

interface Entry {
  readonly token: string
  readonly listeners: Set<(event: SignalEvent) => void>
  readonly lock: Effect.Semaphore
  /** Set by a sweep that found it without listeners; the next such sweep closes it. */
  idle: boolean
  /** Set once it was swept away: nothing restores it any more. */
  closed: boolean
  /** The scope of the latest store subscription and its pump. */
  scope: Scope.CloseableScope | undefined
  /** Whether that subscription still delivers. */
  live: boolean
  /** Whether a subscription was ever confirmed: its replacement announces `Resubscribed`. */
  confirmed: boolean
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const store = yield* Store
  const instanceId = yield* InstanceId
  const supervisor = yield* Supervisor
  const entries = new Map<string, Entry>()
  const deliver = (entry: Entry, event: SignalEvent) =>
    Effect.sync(() => {
      for (const listener of entry.listeners) listener(event)
    })
  // Completed by the first pump that loses its subscription; renewed by each attempt of the loop.
  let lost = yield* Deferred.make<never, StoreUnavailable>()

  const closeScope = (entry: Entry) =>
    Effect.suspend(() => {
      const scope = entry.scope
      entry.scope = undefined
      entry.live = false
      return scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
    })

  /**
   * Subscribe the token in the store unless it already is. Replacing a lost subscription
   * announces `Resubscribed` to every listener.
   */
  const ensureLive = (entry: Entry) =>
    entry.lock.withPermits(1)(
      Effect.suspend(() => {
        if (entry.live || entry.closed) return Effect.void
        return Effect.uninterruptibleMask((restoreInterrupt) =>
          Effect.gen(function* () {
            // The pump of a lost subscription has ended; release what is left of it.
            yield* closeScope(entry)
            const scope = yield* Scope.make()
            const stream = yield* restoreInterrupt(store.notices(entry.token, instanceId)).pipe(
              Scope.extend(scope),
              Effect.onError(() => Scope.close(scope, Exit.void))
            )
            // The pump cannot close its own scope (closing waits for the pump): it marks the
            // entry lost and wakes the loop, which closes the scope when it resubscribes.
            const markLost = (error: StoreUnavailable) =>
              Effect.suspend(() => {
                if (entry.scope === scope) entry.live = false
                return Deferred.fail(lost, error)
              })
            yield* stream.pipe(
              Stream.runForEach((signal) => deliver(entry, signal)),
              Effect.catchAll(markLost),
              Effect.interruptible,
              Effect.forkIn(scope)
            )
            entry.scope = scope
            entry.live = true
            if (entry.confirmed) yield* deliver(entry, { _tag: "Resubscribed" })
            entry.confirmed = true
          })
        )
      })
    )

  // One entry per token with local listeners: made by the first, swept away once it has
  // had none for a whole sweep period.
  const entryOf = (token: string): Entry => {
    const existing = entries.get(token)
    if (existing !== undefined) return existing
    const entry: Entry = {
      token,
      listeners: new Set(),
      lock: Effect.unsafeMakeSemaphore(1),
      idle: false,
      closed: false,
      scope: undefined,
      live: false,
      confirmed: false
    }
    entries.set(token, entry)
    return entry
  }

  const sweep = Effect.suspend(() => {
    const gone: Array<Entry> = []
    for (const entry of entries.values()) {
      if (entry.listeners.size > 0) entry.idle = false
      else if (!entry.idle) entry.idle = true
      else {
        // Gone from the map before anything yields: a listener from now on makes a new entry.
        entry.closed = true
        entries.delete(entry.token)
        gone.push(entry)
      }
    }
    return Effect.forEach(gone, (entry) => entry.lock.withPermits(1)(closeScope(entry)), { discard: true })
  })
  yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(lingerMs), sweep)))
  // Closed with the layer: the `signals` loop (in the supervisor's scope, which may outlive
  // this one) finds nothing left to restore.
  yield* Effect.addFinalizer(() =>
    Effect.suspend(() => {
      const all = [...entries.values()]
      entries.clear()
      for (const entry of all) entry.closed = true
      return Effect.forEach(all, (entry) => entry.lock.withPermits(1)(closeScope(entry)), { discard: true })
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
        if (entry.live) return Effect.succeed(unlisten)
        return ensureLive(entry).pipe(
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
        for (const entry of [...entries.values()]) yield* ensureLive(entry)
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
    subscribed: Effect.sync(() => [...entries.values()].filter((entry) => entry.live).map((e) => e.token))
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Signals, never, Store | InstanceId | Supervisor> = Layer.scoped(Signals, make)
