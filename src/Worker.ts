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
import type * as Layer from "effect/Layer"
import type * as Health from "./Health.js"
import type * as InstanceId from "./InstanceId.js"
import * as Internal from "./internal/worker.js"
import type * as LeaseholdConfig from "./LeaseholdConfig.js"
import type * as Lock from "./Lock.js"
import type * as Mailbox from "./Mailbox.js"
import type * as StateManager from "./StateManager.js"
import type { Store } from "./Store.js"
import type { DataDirError, StoreUnavailable } from "./StoreError.js"
import type * as Supervisor from "./Supervisor.js"
import type * as TokenManager from "./TokenManager.js"

/**
 * What a worker's state alone provides (`layerState*`): no sockets, no mailbox.
 *
 * @since 0.1.0
 * @category models
 */
export type StateServices =
  | StateManager.StateManager
  | Lock.Lock
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

/**
 * A worker's state alone, on a given store: a fresh `InstanceId` every time it is built,
 * its own supervisor, signals, lock and leases, and the state manager; no token manager or
 * mailbox (for modifications without sockets: jobs, tests, benchmarks). Build it once per
 * worker (`Layer.fresh`) over a shared store to run several workers in one process.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerState: Layer.Layer<StateServices, never, Store | LeaseholdConfig.LeaseholdConfig> =
  Internal.withoutInternal(Internal.layerState)

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
> = Internal.layerStore

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
> = Internal.withoutInternal(Internal.layerStateFromEnv)

/**
 * A worker over a given store and configuration.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <A, I, R>(
  options: Options<A, I, R>
): Layer.Layer<Services, never, Store | LeaseholdConfig.LeaseholdConfig | R> =>
  Internal.withoutInternal(Internal.layer(options))

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
> => Internal.withoutInternal(Internal.layerFromEnv(options))
