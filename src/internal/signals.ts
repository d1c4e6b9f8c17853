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
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { InstanceId } from "../InstanceId.js"
import { type Notice, Store } from "../Store.js"
import type { InvalidInstanceId, InvalidToken, StoreError, StoreUnavailable } from "../StoreError.js"
import { untilRecovered } from "../Supervisor.js"
import * as Registry from "./signals/registry.js"
import { Supervisor } from "./supervisor.js"

/**
 * What a listener receives: a store signal, or `Resubscribed` after the token's
 * subscription was restored (signals may have been missed before it).
 *
 * @since 0.1.0
 * @category models
 */
export type SignalEvent = Notice | { readonly _tag: "Resubscribed" }

/**
 * Where this worker's notice channel of a token stood at a moment (`mark`), for
 * `missedSince`.
 *
 * @since 0.1.0
 * @category models
 */
export type Mark = Registry.Mark | undefined

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
    ) => Effect.Effect<Stream.Stream<SignalEvent>, InvalidToken | InvalidInstanceId | StoreError, Scope.Scope>
    /**
     * Call `listener` with each of the token's signals until the returned function is
     * called; the same guarantee as `subscribe`. The listener runs synchronously in the
     * subscription's fiber and must not throw: it is the cheap way for a fiber that waits
     * on a token again and again (no stream, no fiber of its own).
     */
    readonly listen: (
      token: string,
      listener: (event: SignalEvent) => void
    ) => Effect.Effect<() => void, InvalidToken | InvalidInstanceId | StoreError>
    /**
     * Where the token's notice channel stands now; taken just before a step that may make
     * the store send this worker a notice about the token (an attempt that queues it).
     */
    readonly mark: (token: string) => Mark
    /**
     * Whether a notice about the token may have arrived since `mark` unheard by a listener
     * registered since: `false` only when the channel was subscribed at the mark and
     * delivered all along, and no notice about the token arrived since. A caller that
     * listened after its step can then trust that nothing was missed, instead of checking
     * the store again.
     */
    readonly missedSince: (token: string, mark: Mark) => boolean
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
export class Signals extends Context.Service<Signals, Signals.Service>()("leasehold/Signals") {}

/**
 * How long a token's subscription is kept without listeners: between one and two of these.
 *
 * @since 0.1.0
 * @category constants
 */
export const lingerMs = 2_000

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const store = yield* Store
  const instanceId = yield* InstanceId
  const supervisor = yield* Supervisor
  // Completed by the first pump that loses its subscription; renewed by each attempt of the loop.
  let lost = yield* Deferred.make<never, StoreUnavailable>()
  const registry = Registry.make(store, instanceId, () => lost)
  const { listen } = registry
  yield* Effect.forkScoped(Effect.schedule(registry.sweep, Schedule.spaced(lingerMs)))
  // Closed with the layer: the `signals` loop (in the supervisor's scope, which may outlive
  // this one) finds nothing left to restore.
  yield* Effect.addFinalizer(() => registry.closeAll)

  const subscribe = (token: string) =>
    Effect.gen(function* () {
      const queue = yield* Queue.unbounded<SignalEvent>()
      yield* Effect.acquireRelease(
        listen(token, (event) => Queue.offerUnsafe(queue, event)),
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
        yield* registry.restoreAll
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
    mark: registry.mark,
    missedSince: registry.missedSince,
    tokens: registry.tokens,
    subscribed: registry.subscribed
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Signals, never, Store | InstanceId | Supervisor> = Layer.effect(Signals, make)
