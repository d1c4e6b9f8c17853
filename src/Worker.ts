/**
 * One worker of a leasehold application, as one layer: its instance id, supervisor,
 * signals, lock, leases, state manager, token manager and mailbox, over a store and a
 * configuration.
 *
 * ```ts
 * import { Effect, Schema } from "effect"
 * import { Worker } from "leasehold"
 *
 * const Update = Schema.Struct({ n: Schema.Number })
 * declare const sockets: { push: (token: string, update: typeof Update.Type) => Effect.Effect<void> }
 *
 * const worker = Worker.layerFromEnv({
 *   schema: Update,
 *   deliver: (token, update) => sockets.push(token, update)
 * })
 * ```
 *
 * `layerFromEnv` reads the `LEASEHOLD_*` variables and builds the store they name: Redis
 * (one server, a Cluster, or behind Sentinels) when `LEASEHOLD_REDIS_URL` or
 * `LEASEHOLD_REDIS_SENTINELS` is set, else the embedded store (keeping its state in
 * `LEASEHOLD_DATA_DIR` when that is set). `layer` runs over a store and settings you provide
 * (`MemoryStore.layer`, `RedisStore.layer({ url })`, `LeaseholdConfig.layer({ ... })`).
 *
 * Building the layer twice gives two independent workers with distinct instance ids: the
 * worker layers are `Layer.fresh`, so two `Effect.provide` of one layer value build two
 * workers (Effect shares a layer between `provide` calls otherwise).
 * Closing it interrupts every loop, flushes the leases, removes its sockets' records and
 * closes the store's connections, in that order.
 *
 * @since 0.1.0
 */
import type * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Health from "./Health.js"
import * as InstanceId from "./InstanceId.js"
import * as Lease from "./internal/lease.js"
import * as Signals from "./internal/signals.js"
import * as Supervisor from "./internal/supervisor.js"
import * as LeaseholdConfig from "./LeaseholdConfig.js"
import * as Lock from "./Lock.js"
import * as Mailbox from "./Mailbox.js"
import * as MemoryStore from "./MemoryStore.js"
import * as RedisStore from "./RedisStore.js"
import * as StateManager from "./StateManager.js"
import type { Store } from "./Store.js"
import type { DataDirError, StoreUnavailable } from "./StoreError.js"
import * as TokenManager from "./TokenManager.js"

/**
 * What a worker's state alone provides (`layerState*`): no sockets, no mailbox.
 *
 * @since 0.1.0
 * @category models
 */
export type StateServices =
  | StateManager.StateManager
  | Lease.Lease
  | Lock.Lock
  | Signals.Signals
  | Supervisor.Supervisor
  | Health.Health
  | InstanceId.InstanceId

/**
 * What a worker layer provides.
 *
 * @since 0.1.0
 * @category models
 */
export type Services = StateServices | TokenManager.TokenManager | Mailbox.Mailbox

/**
 * The app's part of a worker: how updates are typed and how they reach a socket.
 *
 * @since 0.1.0
 * @category models
 */
export type Options<A, I, R> = Mailbox.Options<A, I, R>

/** What every worker runs on: its identity, health, supervisor and signals. */
const runtimeLayer = Signals.layer.pipe(
  Layer.provideMerge(Supervisor.layer),
  Layer.provideMerge(Layer.merge(Health.layer, InstanceId.layer))
)

const baseLayer = <A, I, R>(options: Options<A, I, R>) =>
  Mailbox.layer(options).pipe(Layer.provideMerge(TokenManager.layer), Layer.provideMerge(runtimeLayer))

/** The embedded store as a worker gets it: its control (outages, raw keys) is for tests alone. */
const memoryStore = Layer.flatMap(MemoryStore.layer, (context) =>
  Layer.succeedContext(Context.omit(MemoryStore.MemoryStoreControl)(context))
)

const stateLayer = StateManager.layer.pipe(Layer.provideMerge(Lease.layer), Layer.provideMerge(Lock.layer))

/**
 * A worker's state alone, on a given store: a fresh `InstanceId` every time it is built,
 * its own supervisor, signals, lock and leases, and the state manager; no token manager or
 * mailbox (for modifications without sockets: jobs, tests, benchmarks). Build it once per
 * worker (`Layer.fresh`) over a shared store to run several workers in one process.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerState: Layer.Layer<StateServices, never, Store | LeaseholdConfig.LeaseholdConfig> = Layer.fresh(
  stateLayer.pipe(Layer.provideMerge(runtimeLayer))
)

/**
 * The store the settings name: Redis when they name a deployment (`redisUrl`, with
 * `redisCluster` a Cluster, or `redisSentinels`), else the embedded store (with `dataDir`,
 * its slices kept on disk). Its control, for the embedded store, is left out: it is for tests.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerStore: Layer.Layer<
  Store,
  LeaseholdConfig.InvalidConfig | DataDirError | StoreUnavailable,
  LeaseholdConfig.LeaseholdConfig
> = Layer.unwrap(
  Effect.map(
    LeaseholdConfig.LeaseholdConfig,
    (
      settings
    ): Layer.Layer<
      Store,
      LeaseholdConfig.InvalidConfig | DataDirError | StoreUnavailable,
      LeaseholdConfig.LeaseholdConfig
    > => (LeaseholdConfig.usesRedis(settings) ? RedisStore.layerFromSettings : memoryStore)
  )
)

/**
 * `layerState` on the store the `LEASEHOLD_*` variables name (see `layerStore`), with the
 * settings they give.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerStateFromEnv: Layer.Layer<
  StateServices | Store | LeaseholdConfig.LeaseholdConfig,
  LeaseholdConfig.InvalidConfig | Config.ConfigError | DataDirError | StoreUnavailable
> = layerState.pipe(Layer.provideMerge(layerStore), Layer.provideMerge(LeaseholdConfig.layerFromEnv), Layer.fresh)

/**
 * A worker over a given store and configuration.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <A, I, R>(
  options: Options<A, I, R>
): Layer.Layer<Services, never, Store | LeaseholdConfig.LeaseholdConfig | R> =>
  Layer.effectContext(
    Effect.gen(function* () {
      const scope = yield* Effect.scope
      // Two scopes closed by hand, so that shutdown runs in the documented order rather
      // than in the reverse order of construction (leases need the supervisor's signals
      // while they run, yet must be flushed after its loops are stopped).
      const baseScope = yield* Scope.fork(scope, "sequential")
      const stateScope = yield* Scope.fork(scope, "sequential")
      const base = yield* Layer.buildWithScope(baseLayer(options), baseScope)
      const state = yield* Layer.buildWithScope(stateLayer.pipe(Layer.provide(Layer.succeedContext(base))), stateScope)
      const supervisor = Context.get(base, Supervisor.Supervisor)
      const tokens = Context.get(base, TokenManager.TokenManager)
      yield* Effect.addFinalizer(() =>
        Effect.gen(function* () {
          yield* supervisor.shutdown
          yield* Scope.close(stateScope, Exit.void)
          yield* tokens.disconnectAll
          yield* Scope.close(baseScope, Exit.void)
        })
      )
      return Context.merge(base, state)
    })
  ).pipe(Layer.fresh)

/**
 * One worker on the store the `LEASEHOLD_*` variables name (see `layerStore`), with the
 * settings they give: the embedded store for one process with no Redis, Redis for several.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerFromEnv = <A, I, R>(
  options: Options<A, I, R>
): Layer.Layer<
  Services | Store | LeaseholdConfig.LeaseholdConfig,
  LeaseholdConfig.InvalidConfig | Config.ConfigError | DataDirError | StoreUnavailable,
  R
> => layer(options).pipe(Layer.provideMerge(layerStore), Layer.provideMerge(LeaseholdConfig.layerFromEnv), Layer.fresh)
