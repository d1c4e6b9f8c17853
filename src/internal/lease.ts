/**
 * The per-token sessions of a worker: the local queue of a token's modifications, the
 * lock its head holds, and the lease (oplock) that keeps the lock while this worker alone
 * uses the token (docs/design.md#the-lock-a-queue-in-the-store, #leases-oplock).
 *
 * A session exists while a token has queued modifications or a lease on this worker, and
 * is dropped as soon as it has neither: memory does not grow with the tokens ever seen.
 * A modification is one call, `modify`, with a value that says what it reads and how it is
 * decided (`Modification`: a plain function, or an effect run in its caller's fiber); the
 * session decides where: inside one step of the store, under this worker's lease, under a
 * grant of the caller's own, or on a turn the session gives it in order. It answers once
 * the outcome is acknowledged.
 *
 * The sessions themselves (the way a modification takes, holding a grant, the session
 * fiber, writing and releasing) live in `internal/session/` (a modification's way in
 * `internal/session/modify.ts`); this module builds the environment they share.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import type * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { LeaseholdConfig } from "../LeaseholdConfig.js"
import { Lock, type LockError, type Grant as LockGrant } from "../Lock.js"
import type { LockExpired } from "../StateError.js"
import type { ModifyOptions } from "../StateManager.js"
import { type SliceEntry, Store } from "../Store.js"
import type { AcknowledgedError, InvalidInput } from "../StoreError.js"
import { engineOf } from "./lock/service.js"
import * as CommitLine from "./session/commitLine.js"
import { cachedOf } from "./session/idleLease.js"
import * as metrics from "./session/metrics.js"
import { modify } from "./session/modify.js"
import { closeParked, resumed } from "./session/run.js"
import type { Session, SessionEnv } from "./session/session.js"
import { TokenMarks } from "./session/tokenMarks.js"
import { Signals } from "./signals.js"
import * as Modify from "./state/modify.js"
import * as Timers from "./timers.js"

/**
 * What a modification decided in its caller's fiber receives when its turn comes.
 *
 * @since 0.1.0
 * @category models
 */
export interface Turn {
  /** The encoded slices it asked for (`None`: nothing stored). */
  readonly values: ReadonlyMap<string, Option.Option<string>>
  /** The fencing number of the grant it runs under. */
  readonly fence: number
}

/**
 * What an effectful decision hands back: its value, and the slices whose encoding changed
 * (none: nothing to write).
 *
 * @since 0.2.0
 * @category models
 */
export interface Decided<A> {
  readonly value: A
  readonly writes: ReadonlyArray<SliceEntry>
}

/**
 * What a modification may fail with besides its decision's own errors: the token or a
 * slice name refused by the store, the store's error, or its writes lost with the lock.
 *
 * @since 0.2.0
 * @category models
 */
export type ModifyFailure = InvalidInput | AcknowledgedError | LockExpired

/**
 * A modification of a token's slices, as the session takes it (`Lease.Service.modify`): the
 * slices it reads, its event, and how it is decided. Where it is decided (inside one step of
 * the store, under this worker's lease, under a grant of its own, or on a queued turn) is
 * the session's choice.
 *
 * @since 0.2.0
 * @category models
 */
export type Modification<A, E, R> = Pure<A, E> | Effectful<A, E, R>

/**
 * A modification decided by a plain function (`StateManager.modify`). The session may run
 * `decide` inside a step of the store, and, on Redis, more than once (the store refused the
 * step it ran for: the values had moved on); the last run counts. Each run records its
 * result in `exit` and what it logs in `warnings`, which the modification answers with once
 * its outcome is acknowledged.
 *
 * @since 0.2.0
 * @category models
 */
export interface Pure<A, E> {
  readonly _tag: "Pure"
  readonly slices: ReadonlyArray<string>
  readonly event: Option.Option<string>
  /**
   * Decide on the slices' encoded values (in the order of `slices`) under the grant's
   * fence: the writes. Synchronous and quick; it must not throw.
   */
  readonly decide: (values: ReadonlyArray<Option.Option<string>>, fence: number) => ReadonlyArray<SliceEntry>
  /** The last run's result; `undefined` before the first. */
  readonly exit: Exit.Exit<A, E> | undefined
  /** What the last run logs (values that did not decode), before its result; `undefined`: nothing. */
  readonly warnings: Effect.Effect<void> | undefined
  /**
   * Called when a run inside a step of the store counts for nothing (the store refused the
   * step, or the step failed), before `decide` may run again.
   */
  readonly discarded: (() => void) | undefined
}

/**
 * A modification decided by an effect (`StateManager.modifyEffect`, `modifyAll`,
 * `Lock.withLock`), run in the caller's fiber when its turn comes. The modification is
 * uninterruptible but where the caller may leave: the wait for its turn, and what `decide`
 * passes to `interruptible` (the caller's function).
 *
 * @since 0.2.0
 * @category models
 */
export interface Effectful<A, E, R> {
  readonly _tag: "Effectful"
  readonly slices: ReadonlyArray<string>
  readonly event: Option.Option<string>
  readonly decide: (
    turn: Turn,
    interruptible: <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>
  ) => Effect.Effect<Decided<A>, E, R>
}

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Lease {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * Make one modification of `token` (already validated): its result once its outcome is
     * known and acknowledged (its writes made, or kept by this worker's lease as its
     * durability says). A modification that writes nothing but may have read writes of the
     * token's session not yet acknowledged is acknowledged with them, and fails as they do.
     * Called when the modification runs (a plain modification's way is built then).
     */
    readonly modify: <A, E, R>(
      token: string,
      modification: Modification<A, E, R>
    ) => Effect.Effect<A, E | ModifyFailure, R>
    /** The encoded slice under this worker's lease, if it holds one on the token and has the slice. */
    readonly cached: (token: string, slice: string) => Option.Option<Option.Option<string>>
    /** Whether this worker holds a lease on the token now. */
    readonly isLeased: (token: string) => boolean
    /** The number of tokens with a session on this worker. */
    readonly sessions: Effect.Effect<number>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Lease extends Context.Service<Lease, Lease.Service>()("leasehold/Lease") {}

/**
 * @since 0.1.0
 * @category metrics
 */
export const leasesStarted: Metric.Counter<number> = metrics.leasesStarted

/**
 * @since 0.1.0
 * @category metrics
 */
export const leasesBroken: Metric.Counter<number> = metrics.leasesBroken

/**
 * Idle leases that parked: after a short wait with nothing to do, a lease lets its fiber
 * and its hold's state go and holds the lock with a compact record (itself the timer of its
 * deadline and next extension); the next modification, contention, deadline or extension
 * due builds the hold again in a new fiber.
 *
 * @since 0.2.0
 * @category metrics
 */
export const leasesParked: Metric.Counter<number> = metrics.leasesParked

/**
 * @since 0.1.0
 * @category metrics
 */
export const flushes: Metric.Counter<number> = metrics.flushes

/**
 * @since 0.1.0
 * @category metrics
 */
export const flushFailures: Metric.Counter<number> = metrics.flushFailures

/** How long an idle lease keeps its fiber before it parks (at least the lease quantum). */
const parkAfterMs = 20

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Lease.Service, never, Scope.Scope | Store | Lock | Signals | LeaseholdConfig> =
  Effect.gen(function* () {
    const store = yield* Store
    const lock = engineOf(yield* Lock)
    const signals = yield* Signals
    const config = yield* LeaseholdConfig
    const scope = yield* Effect.scope
    const instanceId = lock.instanceId
    const sessions = new Map<string, Session>()

    const quantumMs = Duration.toMillis(config.leaseQuantum)
    const timers = yield* Timers.make
    // Everything the sessions share, derived once from the services and the configuration.
    const env: SessionEnv = {
      store,
      lock,
      signals,
      instanceId,
      sessions,
      scope,
      timers,
      lockMs: Duration.toMillis(config.lockExpiration),
      handoffMs: Duration.toMillis(config.handoffTimeout),
      holdMs: Duration.toMillis(config.leaseHoldTime),
      quantumMs,
      yieldMs: Math.max(1, quantumMs),
      warnMs: Duration.toMillis(config.lockWarningThreshold),
      durable: config.leaseDurability === "batch",
      commitLine: CommitLine.make(timers, Duration.toMillis(config.leaseCommitWindow)),
      oplock: config.oplock,
      parkMs: Math.max(parkAfterMs, quantumMs),
      resume: (session, parked) => runFork(resumed(env, session, parked)),
      inStep: { made: 0 },
      clock: yield* Clock.Clock,
      withheld: new TokenMarks(),
      returning: new TokenMarks(),
      released: new TokenMarks()
    }
    // Started from a callback (`notify`): with the services this layer was built with.
    const runFork = Effect.runForkWith(yield* Effect.context<never>())
    // Added after the timers: at shutdown, the parked holds are written and released before
    // the timers stop (and after the session fibers, which the scope interrupts first).
    yield* Effect.addFinalizer(() => closeParked(env))

    const service = Lease.of({
      modify: (token, modification) => modify(env, token, modification),
      cached: (token, slice) => {
        const lease = sessions.get(token)?.lease
        return lease === undefined ? Option.none() : cachedOf(lease, slice)
      },
      isLeased: (token) => sessions.get(token)?.lease !== undefined,
      sessions: Effect.sync(() => sessions.size)
    })
    // `Lock.withLock`: a modification of no slice, whose function is the caller's effect
    const state: Modify.ModifyContext = { lease: service, maxValueBytes: config.maxValueBytes }
    // of no slice: none of the slice errors of `ModifyError` can occur
    lock.serve(
      <A, E, R>(token: string, use: (grant: LockGrant) => Effect.Effect<A, E, R>, options?: ModifyOptions) =>
        Modify.run(
          state,
          token,
          [],
          () =>
            Effect.flatMap(Modify.currentFence, (fence) =>
              Effect.map(use({ token, fence: Option.getOrElse(fence, () => 0) }), (a) => [a, []] as const)
            ),
          options
        ) as Effect.Effect<A, E | LockError, R>
    )
    return service
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Lease, never, Store | Lock | Signals | LeaseholdConfig> = Layer.effect(Lease, make)
