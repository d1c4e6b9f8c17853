/**
 * The per-token sessions of a worker: the local queue of a token's modifications, the
 * lock its head holds, and the lease (oplock) that keeps the lock while this worker alone
 * uses the token (docs/design.md#the-lock-a-queue-in-the-store, #leases-oplock).
 *
 * A session exists while a token has queued modifications or a lease on this worker, and
 * is dropped as soon as it has neither: memory does not grow with the tokens ever seen.
 * Modifications run in their callers' fibers; the session gives each its turn in order,
 * with the encoded slices it asked for, and writes what it changed.
 *
 * The sessions themselves (holding a grant, the session fiber, writing and releasing) live in
 * `internal/session/` (the caller's side of a modification, `begin` and `complete`, in
 * `internal/session/caller.ts`); this module builds the environment they share.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
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
import type { OneShot } from "./oneShot.js"
import { begin, complete, inStep } from "./session/caller.js"
import * as CommitLine from "./session/commitLine.js"
import { cachedOf } from "./session/idleLease.js"
import * as metrics from "./session/metrics.js"
import { closeParked, resumed } from "./session/run.js"
import { notify, type Session, type SessionEnv } from "./session/session.js"
import { Signals } from "./signals.js"
import * as Modify from "./state/modify.js"
import * as Timers from "./timers.js"

/**
 * What a modification receives when its turn comes.
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
 * What a modification hands back: the slices whose encoding changed, or nothing to write.
 *
 * @since 0.1.0
 * @category models
 */
export type Outcome =
  | { readonly _tag: "Commit"; readonly writes: ReadonlyArray<SliceEntry> }
  | { readonly _tag: "Abort" }

/**
 * A modification queued on a token.
 *
 * @since 0.1.0
 * @category models
 */
export interface Request {
  readonly slices: ReadonlyArray<string>
  readonly event: Option.Option<string>
  /** Completed by the session when the turn comes, or failed when it cannot come. */
  readonly turn: OneShot<Turn, InvalidInput | AcknowledgedError>
  /** Completed by the caller once its modification is decided. */
  readonly done: OneShot<Outcome>
  /**
   * A modification decided by a plain function (`StateManager.modify`): the session
   * decides it itself when its turn comes, in the step that gives the turn, instead of
   * completing `turn` and waiting for the caller's fiber to run. It completes nothing.
   */
  readonly decideOnTurn?: ((turn: Turn) => Outcome) | undefined
  /**
   * Completed by the session once the outcome is durable (or failed). A turn that writes
   * nothing is acknowledged at once, or, when it may have read writes of its session not yet
   * acknowledged, with them (failed if they fail). A turn `begin` returned is acknowledged by
   * `complete`.
   */
  readonly ack: OneShot<void, LockExpired | AcknowledgedError>
  cancelled: boolean
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
     * Start a modification (the token is already validated). With nothing queued on the
     * token here, the caller makes the uncontended attempt itself; when that grants a lock
     * to be held for this one modification, the turn is returned and the caller decides in
     * its own fiber, completes `done` and calls `complete`. Otherwise (`None`) the request
     * is queued: the caller awaits its turn. The caller runs it uninterruptibly (as
     * `StateManager` does, with `complete` in the same region): a lock granted to a
     * caller that left would stay taken until it expires.
     */
    readonly begin: (
      token: string,
      request: Request
    ) => Effect.Effect<Option.Option<Turn>, InvalidInput | AcknowledgedError>
    /**
     * A whole modification in one step of the store (`Store.Stepping`), before `begin`;
     * `undefined` (decided once, when the layer is built) where the store has no such step,
     * so that a modification there builds nothing for it. `then(true)` once `decide`
     * ran inside the store's step on the slices' values and the grant's fence, and what it
     * returned is written: under a grant of the step's own (the oplock off, no session on
     * the token here, the lock free and nobody queued), or (the embedded store only) under
     * this worker's lease while its hold is idle. `then(false)` when nothing was done, and the modification goes on
     * with `begin`. Called when the modification runs; `decide` must not throw. On Redis,
     * `decide` may run on the values this worker's last grant left and the step then be
     * refused (`false`: the values had moved on): the modification then decides again.
     */
    readonly inStep:
      | (<A, E>(
          token: string,
          slices: ReadonlyArray<string>,
          event: Option.Option<string>,
          decide: (values: ReadonlyArray<Option.Option<string>>, fence: number) => ReadonlyArray<SliceEntry>,
          then: (done: boolean) => Effect.Effect<A, E>
        ) => Effect.Effect<A, E | InvalidInput | AcknowledgedError>)
      | undefined
    /** After a turn from `begin`, with `done` completed: write, release, then complete `ack`. */
    readonly complete: (token: string, request: Request) => Effect.Effect<void>
    /** A request cancelled by its caller: the session skips it. */
    readonly cancel: (token: string, request: Request) => Effect.Effect<void>
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
      withheld: new Map(),
      withheldSweep: { at: 1024 }
    }
    // Started from a callback (`notify`): with the services this layer was built with.
    const runFork = Effect.runForkWith(yield* Effect.context<never>())
    // Added after the timers: at shutdown, the parked holds are written and released before
    // the timers stop (and after the session fibers, which the scope interrupts first).
    yield* Effect.addFinalizer(() => closeParked(env))

    const service = Lease.of({
      begin: (token, request) => begin(env, token, request),
      inStep:
        store.modifyInStep === undefined
          ? undefined
          : (token, slices, event, decide, then) =>
              inStep(env, store.modifyInStep!, token, slices, event, decide, then),
      complete: (token, request) => complete(env, token, request),
      cancel: (token, request) =>
        Effect.sync(() => {
          request.cancelled = true
          const session = sessions.get(token)
          if (session !== undefined) notify(session)
        }),
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
