/**
 * A worker's layers as the library builds them: besides the public services (`Worker`'s
 * `StateServices` and `Services`), their outputs hold the worker's `Lease` and `Signals`,
 * which `Worker`'s layers leave out of what they give an app (tests and benchmarks reach
 * them here). Its shutdown order is the one `Worker` documents.
 */
import type * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as Health from "../Health.js"
import * as InstanceId from "../InstanceId.js"
import * as LeaseholdConfig from "../LeaseholdConfig.js"
import * as Lock from "../Lock.js"
import * as Mailbox from "../Mailbox.js"
import * as MemoryStore from "../MemoryStore.js"
import * as RedisStore from "../RedisStore.js"
import * as StateManager from "../StateManager.js"
import type { Store } from "../Store.js"
import type { DataDirError, StoreUnavailable } from "../StoreError.js"
import * as TokenManager from "../TokenManager.js"
import type * as Worker from "../Worker.js"
import * as Lease from "./lease.js"
import * as Signals from "./signals.js"
import * as Manager from "./state/manager.js"
import * as Supervisor from "./supervisor.js"

/** The services of a worker's that its public layers leave out. */
export type Internal = Lease.Lease | Signals.Signals

/** The services of a worker's state, its internal ones included. */
export type StateServices = Worker.StateServices | Internal

/** The services of a worker, its internal ones included. */
export type Services = Worker.Services | Internal

/** What every worker runs on: its identity, health, supervisor and signals. */
const runtimeLayer = Signals.layer.pipe(
  Layer.provideMerge(Supervisor.layer),
  Layer.provideMerge(Layer.merge(Health.layer, InstanceId.layer))
)

const baseLayer = <A, I, R>(options: Worker.Options<A, I, R>) =>
  Mailbox.layer(options).pipe(Layer.provideMerge(TokenManager.layer), Layer.provideMerge(runtimeLayer))

/** The embedded store as a worker gets it: its control (outages, raw keys) is for tests alone. */
const memoryStore = Layer.flatMap(MemoryStore.layer, (context) =>
  Layer.succeedContext(Context.omit(MemoryStore.MemoryStoreControl)(context))
)

/** The state manager over the worker's leases (on the runtime's signals), and its lock. */
const stateLayer = Layer.effect(StateManager.StateManager, Manager.make).pipe(
  Layer.provideMerge(Lease.layer),
  Layer.provideMerge(Lock.layer)
)

/** `Worker.layerState`, with the worker's lease and signals. */
export const layerState: Layer.Layer<StateServices, never, Store | LeaseholdConfig.LeaseholdConfig> = Layer.fresh(
  stateLayer.pipe(Layer.provideMerge(runtimeLayer))
)

/** `Worker.layerStore`. */
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

/** `Worker.layerStateFromEnv`, with the worker's lease and signals. */
export const layerStateFromEnv: Layer.Layer<
  StateServices | Store | LeaseholdConfig.LeaseholdConfig,
  LeaseholdConfig.InvalidConfig | Config.ConfigError | DataDirError | StoreUnavailable
> = layerState.pipe(Layer.provideMerge(layerStore), Layer.provideMerge(LeaseholdConfig.layerFromEnv), Layer.fresh)

/** `Worker.layer`, with the worker's lease and signals. */
export const layer = <A, I, R>(
  options: Worker.Options<A, I, R>
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

/** `Worker.layerFromEnv`, with the worker's lease and signals. */
export const layerFromEnv = <A, I, R>(
  options: Worker.Options<A, I, R>
): Layer.Layer<
  Services | Store | LeaseholdConfig.LeaseholdConfig,
  LeaseholdConfig.InvalidConfig | Config.ConfigError | DataDirError | StoreUnavailable,
  R
> => layer(options).pipe(Layer.provideMerge(layerStore), Layer.provideMerge(LeaseholdConfig.layerFromEnv), Layer.fresh)

/** A worker's layer as `Worker` gives it to an app: without the services of `src/internal/`. */
export const withoutInternal = <A, E, R>(self: Layer.Layer<A, E, R>): Layer.Layer<Exclude<A, Internal>, E, R> =>
  Layer.fresh(
    Layer.flatMap(self, (context) => Layer.succeedContext(Context.omit(Lease.Lease, Signals.Signals)(context)))
  )
