/**
 * Workers for state-manager tests: several workers (each its own InstanceId, supervisor,
 * signals, lock and leases) over one shared store, memory or a real redis-server.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Health from "../../src/Health.js"
import { InstanceId } from "../../src/InstanceId.js"
import { makeKeys } from "../../src/internal/keys.js"
import * as Lease from "../../src/Lease.js"
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as MemoryStore from "../../src/MemoryStore.js"
import * as RedisStore from "../../src/RedisStore.js"
import * as StateManager from "../../src/StateManager.js"
import { Store } from "../../src/Store.js"
import * as WorkerLayers from "../../src/Worker.js"
import { capture, type LogLine } from "../support/logs.js"
import * as Monitor from "../support/monitor.js"
import { buildOwn } from "../support/ownScope.js"
import * as RedisServer from "../support/RedisServer.js"

export const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
export const Other = StateManager.slice("other", Schema.Struct({ s: Schema.String }), { s: "" })

export interface Worker {
  readonly id: string
  readonly states: StateManager.StateManager.Service
  readonly lease: Lease.Lease.Service
  readonly health: Health.Health.Service
  /** Close this worker (flushes its leases, releases its locks). */
  readonly close: Effect.Effect<void>
}

export interface Cluster {
  readonly store: Store.Service
  readonly logs: Array<LogLine>
  readonly worker: () => Effect.Effect<Worker, never, Scope.Scope>
  /** The number of grants a token has had: its fencing counter. */
  readonly grants: (token: string) => Effect.Effect<number>
  /** The stored counter slice, decoded. */
  readonly stored: (token: string) => Effect.Effect<number>
  readonly keys: ReturnType<typeof makeKeys>
  /** Memory only: the store operations so far, of every worker (calls into the store). */
  readonly operations: Option.Option<Effect.Effect<number>>
  /**
   * Redis only: watch the scripts the server holding `token`'s keys runs from now on (MONITOR,
   * for the life of the scope); the effect returned reads the arguments of each seen so far,
   * joined by spaces.
   */
  readonly scripts: Option.Option<
    (token: string) => Effect.Effect<Effect.Effect<ReadonlyArray<string>>, never, Scope.Scope>
  >
}

/** The scripts (EVALSHA, EVAL) a server runs from now on, as `Cluster.scripts` reads them. */
const watchScripts = (server: RedisServer.RedisServer) =>
  Effect.map(Monitor.monitor(server), (monitor) =>
    Effect.sync(() =>
      monitor.commands
        .filter((command) => !command.fromScript && command.args[0]!.startsWith("eval"))
        .map((command) => command.args.join(" "))
    )
  )

const configWith = (input: LeaseholdConfig.Input) =>
  LeaseholdConfig.layerWith({ retryJitter: false, lockWarningThreshold: 1_000, ...input })

/** `raw` reads a key past the store, from the store's own services. */
const makeCluster = <R, E>(
  storeLayer: Layer.Layer<Store | R, E, LeaseholdConfig.LeaseholdConfig>,
  input: LeaseholdConfig.Input,
  raw: (shared: Context.Context<Store | R>) => (key: string) => Effect.Effect<Option.Option<string>>,
  operations: (shared: Context.Context<Store | R>) => Option.Option<Effect.Effect<number>> = () => Option.none(),
  scripts: Option.Option<
    (token: string) => Effect.Effect<Effect.Effect<ReadonlyArray<string>>, never, Scope.Scope>
  > = Option.none()
) =>
  Effect.gen(function* () {
    const logs = capture()
    const config = configWith(input)
    const shared = yield* Layer.build(storeLayer.pipe(Layer.provideMerge(config))).pipe(
      Effect.provide(logs.layer),
      Effect.orDie
    )
    const store = Context.get(shared, Store)
    const read = raw(shared)
    const keys = makeKeys(Context.get(shared, LeaseholdConfig.LeaseholdConfig).keyPrefix)
    const worker = () =>
      Effect.gen(function* () {
        const { built, close } = yield* buildOwn(
          Layer.fresh(WorkerLayers.layerState).pipe(Layer.provide(Layer.succeedContext(shared))),
          logs
        )
        return {
          id: Context.get(built, InstanceId),
          states: Context.get(built, StateManager.StateManager),
          lease: Context.get(built, Lease.Lease),
          health: Context.get(built, Health.Health),
          close
        } satisfies Worker
      })
    return {
      shared,
      store,
      logs: logs.lines,
      keys,
      worker,
      operations: operations(shared),
      scripts,
      grants: (token: string) =>
        Effect.map(read(keys.fence(token)), (value) => Option.match(value, { onNone: () => 0, onSome: Number })),
      stored: (token: string) =>
        Effect.map(read(keys.slice(token, "counter")), (value) =>
          Option.match(value, { onNone: () => 0, onSome: (text) => (JSON.parse(text) as { n: number }).n })
        )
    } satisfies Cluster & { readonly shared: Context.Context<Store | R> }
  })

/** Workers over one MemoryStore (time on the TestClock when run under it.effect). */
export const memoryCluster = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const cluster = yield* makeCluster(
      MemoryStore.layer,
      input,
      (shared) => Context.get(shared, MemoryStore.MemoryStoreControl).getRaw,
      (shared) => Option.some(Context.get(shared, MemoryStore.MemoryStoreControl).operations)
    )
    return { ...cluster, control: Context.get(cluster.shared, MemoryStore.MemoryStoreControl) }
  })

/** Workers over one RedisStore against a fresh redis-server. */
export const redisCluster = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const server = yield* RedisServer.start()
    const cluster = yield* makeCluster(
      RedisStore.layer({ url: server.url }),
      input,
      () => (key) => RedisServer.getRaw(server, key),
      undefined,
      Option.some(() => watchScripts(server))
    )
    return { ...cluster, server }
  })

/**
 * Workers over one RedisStore on a Redis Cluster: `url` lists its seed nodes, `raw` reads
 * a key from the node that holds it.
 */
export const redisClusterWorkers = (
  url: string,
  raw: (key: string) => Effect.Effect<Option.Option<string>>,
  nodeFor: (key: string) => Effect.Effect<RedisServer.RedisServer>,
  input: LeaseholdConfig.Input = {}
) =>
  makeCluster(
    RedisStore.layer({ url, cluster: true }),
    input,
    () => raw,
    undefined,
    // the same slot holds all of a token's keys, and the scripts on them
    Option.some((token: string) =>
      Effect.flatMap(nodeFor(makeKeys(input.keyPrefix ?? "leasehold").lock(token)), watchScripts)
    )
  )

/**
 * Start a modification of `token` on `w` that adds 1 and holds its turn (and the lock)
 * until `open` runs; returns once it has entered.
 */
export const holding = (w: Worker, token: string) =>
  Effect.gen(function* () {
    const gate = yield* Deferred.make<void>()
    const entered = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(
      w.states.modifyEffect(token, Counter, (s) =>
        Effect.as(Effect.zipRight(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
          null,
          { n: s.n + 1 }
        ] as const)
      )
    )
    yield* Deferred.await(entered)
    return { fiber, open: Deferred.succeed(gate, undefined) }
  })
