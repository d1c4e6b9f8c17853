/**
 * The embedded default `Store`: every operation of the Redis scripts (docs/protocol.md#operations)
 * on an in-process key space, with TTLs on Effect's `Clock` so that `TestClock` drives expiry.
 *
 * Keys are the full Redis key names, so raw values written by tests through
 * `MemoryStoreControl.setRaw` land exactly where the Redis store would find them. Each
 * operation's step on the key space is one synchronous block, which makes it atomic on a
 * single-threaded runtime.
 *
 * With `dataDir` set, each token's slices and fencing counter are also kept in files there
 * (written a short interval after they change, loaded when the store is built), so a
 * restarted process keeps its tokens' state; see `docs/configuration.md`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import type * as Scope from "effect/Scope"
import * as Environment from "./internal/config/environment.js"
import { makeKeys } from "./internal/keys.js"
import * as MemoryControl from "./internal/memory/control.js"
import * as MemoryDisk from "./internal/memory/disk.js"
import * as MemoryDriver from "./internal/memory/driver.js"
import { cachedKeys } from "./internal/memory/keyCache.js"
import { Keyspace } from "./internal/memory/keyspace.js"
import * as Front from "./internal/store/front.js"
import { InvalidConfig, LeaseholdConfig } from "./LeaseholdConfig.js"
import { Store } from "./Store.js"
import type { DataDirError } from "./StoreError.js"

/**
 * What one flush of the data directory did, by token: files written, files removed (the
 * token expired), and writes that failed (retried by a later flush).
 *
 * @since 0.1.0
 * @category models
 */
export type FlushReport = MemoryDisk.FlushReport

/**
 * Fault injection and inspection for the embedded store, used by tests. Its own
 * operations work whatever the availability: a test can plant data during an outage.
 *
 * @since 0.1.0
 * @category models
 */
export declare namespace MemoryStoreControl {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * `false`: every operation fails with `StoreUnavailable`, open subscription streams
     * fail with `StoreUnavailable`, new subscribes fail, status `{ready: false}`.
     * `true`: works again and status `{ready: true, epoch: epoch + 1}`.
     */
    readonly setAvailable: (available: boolean) => Effect.Effect<void>
    /**
     * Like a killed subscriber connection that reconnects at once: every open
     * subscription stream fails with `StoreUnavailable`; status goes `{ready: false}`
     * then `{ready: true, epoch + 1}`. New subscribes work.
     */
    readonly dropSubscriptions: Effect.Effect<void>
    /** Write a raw string under a full key name (as `makeKeys` builds it), optional TTL in ms; for corrupt-data tests. */
    readonly setRaw: (key: string, value: string, ttlMs?: number) => Effect.Effect<void>
    /**
     * Give the key under a full key name, of any kind, a TTL of `ttlMs` (as `PEXPIRE`);
     * `false` when there is no such key.
     */
    readonly expireRaw: (key: string, ttlMs: number) => Effect.Effect<boolean>
    /** The raw string under a full key name; `None` when absent, expired, or not a string. */
    readonly getRaw: (key: string) => Effect.Effect<Option.Option<string>>
    /** Number of live keys of every kind (locks, fences, queues, slices, records, mailboxes). */
    readonly keyCount: Effect.Effect<number>
    /**
     * How many operations have reached the key space so far (past their validation), as
     * Redis counts the commands it processed: a test proves with it that a call did no work.
     */
    readonly operations: Effect.Effect<number>
    /**
     * Reports of the flushes to `dataDir` made from now on while the scope is open, each
     * published once its files are written or removed. Nothing arrives without `dataDir`.
     */
    readonly flushReports: Effect.Effect<PubSub.Subscription<FlushReport>, never, Scope.Scope>
    /**
     * `true`: behave like a managed Redis that refuses `CONFIG`: `enableSocketEvents`
     * answers `Refused` and no socket events are published. `false` (the default): events.
     */
    readonly refuseSocketEvents: (refused: boolean) => Effect.Effect<void>
    /**
     * Lose the next `count` notices published to a worker (`granted`, `contended`), as a
     * notice is lost when the subscriber connection drops at that moment and reconnects
     * before anyone notices: the steps that publish them work, nobody receives them.
     */
    readonly loseNotices: (count: number) => Effect.Effect<void>
    /**
     * Hold back the next `count` notices published to a worker until `deliverHeldNotices`,
     * as a notice arrives late behind a slow subscriber connection: the steps that publish
     * them work, and their workers hear of them only later (after a re-check, say).
     */
    readonly holdNotices: (count: number) => Effect.Effect<void>
    /** Deliver the notices held back, in the order published, to whoever listens now. */
    readonly deliverHeldNotices: Effect.Effect<void>
    /**
     * Lose the replies of the next `count` calls of `operation` (a store operation by name,
     * such as `acquireQueued`), as a reply is lost when the connection drops, or the command
     * times out, after the server ran it: each step works, and its caller fails with
     * `StoreUnavailable`. `0` loses nothing more.
     */
    readonly loseReplies: (operation: string, count: number) => Effect.Effect<void>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class MemoryStoreControl extends Context.Service<MemoryStoreControl, MemoryStoreControl.Service>()(
  "leasehold/MemoryStoreControl"
) {}

/**
 * A built memory store: the `Store` service, its control, and a view of its memory.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryStore extends Store.Service {
  readonly kind: "memory"
  readonly control: MemoryStoreControl.Service
  /**
   * Keys held in memory right now, including expired ones that nothing has removed yet
   * (unlike `keyCount`, reading it removes nothing): shows that the sweeper frees memory.
   */
  readonly residentKeys: Effect.Effect<number>
}

/** At most one full sweep per second: expired keys are unreachable at once, the sweep only frees memory. */
const minSweepMs = 1_000

/**
 * Token files written to `dataDir`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const filesWritten = MemoryDisk.filesWritten

/**
 * Token files removed from `dataDir` because their token expired.
 *
 * @since 0.1.0
 * @category metrics
 */
export const filesRemoved = MemoryDisk.filesRemoved

/**
 * Token file writes or removals that failed (each is retried by a later flush).
 *
 * @since 0.1.0
 * @category metrics
 */
export const fileWriteFailures = MemoryDisk.fileWriteFailures

/**
 * Build a memory store whose sweeper runs in the current scope. With `dataDir` set, the
 * store first loads the tokens kept there, then writes every change of a token's slices
 * and fencing counter back to it; closing the scope writes what is still pending. A
 * directory that cannot be created, listed or written fails the build with
 * `DataDirError`; `minReplicasAck` above 0 fails it with `InvalidConfig` (there are no replicas).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<MemoryStore, DataDirError | InvalidConfig, LeaseholdConfig | Scope.Scope> = Effect.gen(
  function* () {
    const settings = yield* LeaseholdConfig
    if (settings.minReplicasAck > 0) {
      // Nothing could acknowledge: accepting the knob would promise what the store cannot keep.
      return yield* new InvalidConfig(
        Environment.describe(settings, {
          knob: "minReplicasAck",
          value: String(settings.minReplicasAck),
          reason: "needs a Redis store with replicas; the embedded store has none"
        })
      )
    }
    if (settings.redisCluster) {
      // A Cluster was asked for and its seeds are missing (an unset URL, a lost secret):
      // starting on a private embedded store instead would split the state without a word.
      return yield* new InvalidConfig(
        Environment.describe(settings, {
          knob: "redisCluster",
          value: "true",
          reason: "is set without redisUrl; the embedded store is no Cluster"
        })
      )
    }
    const keys = cachedKeys(makeKeys(settings.keyPrefix))
    const now = Effect.clockWith((clock) => Effect.sync(() => clock.currentTimeMillisUnsafe()))
    const ks = new Keyspace(minSweepMs, yield* now)
    const flushReports = yield* PubSub.unbounded<FlushReport>()
    if (Option.isSome(settings.dataDir)) {
      yield* MemoryDisk.attach(ks, {
        dir: settings.dataDir.value,
        keys,
        flushInterval: settings.dataFlushInterval,
        reports: flushReports
      })
    }
    const { driver, state } = yield* MemoryDriver.make(ks, keys, settings)

    // The sweeper sleeps until the earliest deadline (re-planned when an earlier one is
    // set), so an idle store does not wake and a store full of dead keys is emptied.
    const sweepStep = Effect.gen(function* () {
      const poke = yield* Deferred.make<void>()
      const delay = yield* Effect.map(now, (at) => {
        if (at >= ks.wakeAt) ks.sweep(at)
        ks.onWakeAtLowered = () => Deferred.doneUnsafe(poke, Effect.void)
        return ks.wakeAt - at
      })
      if (delay === Number.POSITIVE_INFINITY) yield* Deferred.await(poke)
      else yield* Effect.race(Effect.sleep(Duration.millis(delay)), Deferred.await(poke))
    })
    yield* Effect.forkScoped(Effect.interruptible(Effect.forever(sweepStep)))

    return {
      ...Front.make(driver),
      kind: "memory",
      control: MemoryControl.make(state, flushReports),
      residentKeys: Effect.sync(() => ks.entries.size)
    } satisfies MemoryStore
  }
)

/**
 * The embedded store and its control. Each build is a separate store: empty, or loaded
 * from `dataDir` when it is set.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Store | MemoryStoreControl, DataDirError | InvalidConfig, LeaseholdConfig> =
  Layer.effectContext(
    Effect.map(make, (memory) => Context.make(Store, memory).pipe(Context.add(MemoryStoreControl, memory.control)))
  )
