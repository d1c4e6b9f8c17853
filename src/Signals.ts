/**
 * Per-token notices to this worker (its lock handed to it, another worker queued behind
 * it), with subscriptions that survive outages.
 *
 * A worker holds at most one store subscription per token, however many local fibers
 * listen (on a single server the store shares one channel per worker between them). When the subscriber connection is lost, one supervised loop (`signals`) restores
 * every token subscription as soon as the store is back, and every listener of a restored
 * token receives `Resubscribed`: signals published meanwhile may be lost, so a waiter must
 * re-check instead of trusting that nothing happened.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as PubSub from "effect/PubSub"
import * as RcMap from "effect/RcMap"
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
    /** Tokens with at least one local listener. */
    readonly tokens: Effect.Effect<ReadonlyArray<string>>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Signals extends Context.Tag("leasehold/Signals")<Signals, Signals.Service>() {}

interface Entry {
  readonly token: string
  readonly events: PubSub.PubSub<SignalEvent>
  readonly lock: Effect.Semaphore
  /** Set once its last listener left: nothing restores it any more. */
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
              Stream.runForEach((signal) => PubSub.publish(entry.events, signal)),
              Effect.catchAll(markLost),
              Effect.interruptible,
              Effect.forkIn(scope)
            )
            entry.scope = scope
            entry.live = true
            if (entry.confirmed) yield* PubSub.publish(entry.events, { _tag: "Resubscribed" } as const)
            entry.confirmed = true
          })
        )
      })
    )

  // One entry per token with local listeners: made by the first, closed after the last.
  const tokens = yield* RcMap.make({
    lookup: (token: string) =>
      Effect.acquireRelease(
        Effect.map(PubSub.unbounded<SignalEvent>(), (events) => {
          const entry: Entry = {
            token,
            events,
            lock: Effect.unsafeMakeSemaphore(1),
            closed: false,
            scope: undefined,
            live: false,
            confirmed: false
          }
          entries.set(token, entry)
          return entry
        }),
        (entry) =>
          Effect.suspend(() => {
            entry.closed = true
            if (entries.get(token) === entry) entries.delete(token)
            return entry.lock.withPermits(1)(closeScope(entry))
          })
      )
  })

  const subscribe = (token: string) =>
    Effect.gen(function* () {
      yield* validateToken(token)
      const entry = yield* RcMap.get(tokens, token)
      // Join the local channel first, so nothing published after the confirmation is missed.
      const queue = yield* PubSub.subscribe(entry.events)
      yield* ensureLive(entry)
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
    tokens: Effect.sync(() => [...entries.keys()])
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Signals, never, Store | InstanceId | Supervisor> = Layer.scoped(Signals, make)
