/**
 * Workers for token-manager tests: several workers, each its own InstanceId, supervisor
 * and token manager, on memory, a real redis-server, or a real Redis Cluster of several
 * redis-server nodes. On memory they share one MemoryStore (one process's); on Redis each
 * has its own RedisStore, with its own connections, as separate processes would: one client
 * does not serialise their races, and each resubscribes on its own. The test reads and
 * writes through a store of its own.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Health from "../../src/Health.js"
import * as InstanceId from "../../src/InstanceId.js"
import { encodeSocketRecord } from "../../src/internal/codec.js"
import { makeKeys } from "../../src/internal/keys.js"
import * as Supervisor from "../../src/internal/supervisor.js"
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as MemoryStore from "../../src/MemoryStore.js"
import * as RedisStore from "../../src/RedisStore.js"
import { type SocketRecord, Store } from "../../src/Store.js"
import type { StoreError } from "../../src/StoreError.js"
import * as TokenManager from "../../src/TokenManager.js"
import { capture, type LogLine } from "../support/logs.js"
import { buildOwn } from "../support/ownScope.js"
import type * as RedisCluster from "../support/RedisCluster.js"
import * as RedisServer from "../support/RedisServer.js"

export interface TokenWorker {
  readonly id: string
  readonly tokens: TokenManager.TokenManager.Service
  readonly health: Health.Health.Service
  /** Close this worker's layers (its token manager disconnects every local socket). */
  readonly close: Effect.Effect<void>
}

export interface TokenCluster {
  readonly store: Store.Service
  readonly logs: Array<LogLine>
  readonly worker: () => Effect.Effect<TokenWorker, never, Scope.Scope>
  /**
   * A worker's store opened now; the effect returned builds the worker over it, later (a
   * RedisStore is built only while Redis answers, so a worker built during an outage needs
   * its store open before). On memory, the workers' shared store.
   */
  readonly storeFirst: Effect.Effect<Effect.Effect<TokenWorker, never, Scope.Scope>, never, Scope.Scope>
  /** The record stored for a token, read raw. */
  readonly record: (token: string) => Effect.Effect<Option.Option<SocketRecord>>
  /** Overwrite a token's record raw (a plain SET: the store reports `set`, not a deletion). */
  readonly overwrite: (token: string, record: SocketRecord) => Effect.Effect<void>
  /** Delete a token's record raw. */
  readonly remove: (token: string) => Effect.Effect<void>
  /**
   * Delete a token's record while the store is down (memory: behind the outage; Redis: a
   * restarted server has lost every key already, so nothing is left to do).
   */
  readonly removeDuringOutage: (token: string) => Effect.Effect<void>
  /** The whole store down (memory: unavailable; Redis: SIGKILL, and a restart without data). */
  readonly outage: { readonly begin: Effect.Effect<void>; readonly end: Effect.Effect<void> }
  /** Cut the subscriber connections only (memory: dropSubscriptions; Redis: CLIENT KILL TYPE pubsub). */
  readonly dropSubscriptions: Effect.Effect<void>
  /** Store commands processed so far (memory: calls into the store; Redis: INFO commandstats). */
  readonly operations: Effect.Effect<number>
}

export interface ClusterOptions {
  /**
   * Make the store refuse socket events (memory: `refuseSocketEvents`; Redis: CONFIG renamed
   * away; Redis Cluster: CONFIG denied by an ACL on every master).
   */
  readonly refuseEvents?: boolean
  /**
   * Memory only: run before every call of a store operation, by name, so a test can hold
   * an operation at a chosen point; the real operation runs after it, unless this fails
   * (the operation then fails with that error, as one the store could not serve).
   */
  readonly before?: (operation: string) => Effect.Effect<void, StoreError>
}

const configWith = (input: LeaseholdConfig.Input) =>
  LeaseholdConfig.layer({ retryJitter: false, lockExpiration: 1_000, lockWarningThreshold: 500, ...input })

const workerLayer = TokenManager.layer.pipe(
  Layer.provideMerge(Supervisor.layer),
  Layer.provideMerge(Layer.merge(Health.layer, InstanceId.layer))
)

const makeCluster = (
  shared: Context.Context<Store | LeaseholdConfig.LeaseholdConfig>,
  logs: ReturnType<typeof capture>,
  raw: {
    readonly get: (key: string) => Effect.Effect<Option.Option<string>>
    readonly set: (key: string, value: string) => Effect.Effect<void>
    readonly del: (key: string) => Effect.Effect<void>
  },
  /**
   * Each worker's own store, built with it as `Worker.layerFromEnv` builds one; without it,
   * the workers share the test's store.
   */
  workerStore?: Layer.Layer<Store, unknown, LeaseholdConfig.LeaseholdConfig>
) => {
  const config = Context.pick(LeaseholdConfig.LeaseholdConfig)(shared)
  const keys = makeKeys(Context.get(config, LeaseholdConfig.LeaseholdConfig).keyPrefix)
  const build = (layer: Layer.Layer<Layer.Success<typeof workerLayer>, unknown>) =>
    Effect.gen(function* () {
      const { built, close } = yield* Effect.orDie(buildOwn(layer, logs))
      return {
        id: Context.get(built, InstanceId.InstanceId),
        tokens: Context.get(built, TokenManager.TokenManager),
        health: Context.get(built, Health.Health),
        close
      } satisfies TokenWorker
    })
  const over = (store: Context.Context<Store>) =>
    build(Layer.fresh(workerLayer).pipe(Layer.provide(Layer.succeedContext(Context.merge(config, store)))))
  const worker = () =>
    workerStore === undefined
      ? over(shared)
      : build(
          Layer.fresh(workerLayer.pipe(Layer.provideMerge(workerStore))).pipe(
            Layer.provide(Layer.succeedContext(config))
          )
        )
  const storeFirst =
    workerStore === undefined
      ? Effect.succeed(over(shared))
      : Effect.map(
          Layer.build(Layer.fresh(workerStore).pipe(Layer.provide(Layer.succeedContext(config)))).pipe(
            Effect.provide(logs.layer),
            Effect.orDie
          ),
          over
        )
  return {
    store: Context.get(shared, Store),
    logs: logs.lines,
    worker,
    storeFirst,
    record: (token: string) =>
      Effect.map(
        raw.get(keys.socket(token)),
        Option.map((text) => JSON.parse(text) as SocketRecord)
      ),
    overwrite: (token: string, record: SocketRecord) => raw.set(keys.socket(token), encodeSocketRecord(record)),
    remove: (token: string) => raw.del(keys.socket(token))
  }
}

/** Records the name of every operation called on a store, delegating each call to it. */
const counting = (store: Store.Service, before?: (operation: string) => Effect.Effect<void, StoreError>) => {
  const calls: Array<string> = []
  const wrapped = Object.fromEntries(
    Object.entries(store).map(([name, value]) => [
      name,
      typeof value === "function"
        ? (...args: Array<unknown>) => {
            calls.push(name)
            const call = value as (...args: Array<unknown>) => Effect.Effect<unknown, unknown, unknown>
            return before === undefined
              ? call(...args)
              : Effect.andThen(
                  before(name),
                  Effect.suspend(() => call(...args))
                )
          }
        : value
    ])
  ) as unknown as Store.Service
  return { wrapped, calls: Effect.sync((): ReadonlyArray<string> => [...calls]) }
}

/** Workers over one MemoryStore (time on the TestClock when run under it.effect). */
export const memoryCluster = (input: LeaseholdConfig.Input = {}, options: ClusterOptions = {}) =>
  Effect.gen(function* () {
    const logs = capture()
    const config = yield* Layer.build(configWith(input)).pipe(Effect.orDie)
    const memory = yield* MemoryStore.make.pipe(Effect.provide(config), Effect.provide(logs.layer))
    if (options.refuseEvents === true) yield* memory.control.refuseSocketEvents(true)
    const { wrapped, calls } = counting(memory, options.before)
    const shared = Context.add(config, Store, wrapped)
    const cluster = makeCluster(shared, logs, {
      get: memory.control.getRaw,
      set: (key, value) => memory.control.setRaw(key, value),
      del: (key) => memory.control.setRaw(key, "", 0)
    })
    return {
      ...cluster,
      control: memory.control,
      removeDuringOutage: (token: string) => cluster.remove(token),
      outage: { begin: memory.control.setAvailable(false), end: memory.control.setAvailable(true) },
      dropSubscriptions: memory.control.dropSubscriptions,
      operations: Effect.map(calls, (names) => names.length),
      /** The operations called so far, by name (the operations that take arguments). */
      calls
    } satisfies TokenCluster & {
      readonly control: MemoryStore.MemoryStoreControl.Service
      readonly calls: Effect.Effect<ReadonlyArray<string>>
    }
  })

/** Commands that do not touch data and that the harness itself sends. */
const uncounted = new Set(["cmdstat_ping", "cmdstat_info", "cmdstat_client|kill"])

const commandsProcessed = (server: RedisServer.RedisServer) =>
  server.info("commandstats").pipe(
    Effect.map((stats) => RedisServer.commandCalls(stats, (name) => uncounted.has(name))),
    Effect.orDie
  )

/**
 * Workers each with its own RedisStore against a fresh redis-server (a "cluster" of
 * workers, on a single server; see `onRedisCluster` for a Redis Cluster).
 */
export const redisCluster = (input: LeaseholdConfig.Input = {}, options: ClusterOptions = {}) =>
  Effect.gen(function* () {
    const logs = capture()
    const server = yield* RedisServer.start(
      options.refuseEvents === true ? { extraArgs: ["--rename-command", "CONFIG", ""] } : undefined
    )
    const store = RedisStore.layer({ url: server.url })
    const shared = yield* Layer.build(
      store.pipe(Layer.provideMerge(configWith({ commandTimeout: 1_000, connectTimeout: 5_000, ...input })))
    ).pipe(Effect.provide(logs.layer), Effect.orDie)
    const cluster = makeCluster(
      shared,
      logs,
      {
        get: (key) => RedisServer.getRaw(server, key),
        set: (key, value) => Effect.asVoid(Effect.orDie(server.command("SET", key, value))),
        del: (key) => Effect.asVoid(Effect.orDie(server.command("DEL", key)))
      },
      store
    )
    return {
      ...cluster,
      server,
      removeDuringOutage: () => Effect.void,
      outage: {
        begin: server.kill,
        end: Effect.flatMap(server.pid, (pid) => (Option.isNone(pid) ? server.restart : Effect.void))
      },
      dropSubscriptions: Effect.asVoid(Effect.orDie(server.clientKill("pubsub"))),
      operations: commandsProcessed(server)
    } satisfies TokenCluster & { readonly server: RedisServer.RedisServer }
  })

/**
 * Commands that do not touch data on a Redis Cluster: the harness's own, and the cluster
 * client's topology reads (`CLUSTER SLOTS` at connection and every few seconds after).
 */
const uncountedOnCluster = (name: string) => uncounted.has(name) || name.startsWith("cmdstat_cluster|")

/** The commands processed by every master of a Redis Cluster, summed. */
const clusterCommandsProcessed = (nodes: RedisCluster.RedisCluster) =>
  Effect.forEach(nodes.nodes, (node) => node.info("commandstats"), { concurrency: "unbounded" }).pipe(
    Effect.map((all) => all.reduce((total, stats) => total + RedisServer.commandCalls(stats, uncountedOnCluster), 0)),
    Effect.orDie
  )

/** Run `args` on every master of the cluster. */
const onEveryMaster = (nodes: RedisCluster.RedisCluster, ...args: ReadonlyArray<string | number>) =>
  Effect.forEach(nodes.nodes, (node) => Effect.orDie(node.command(...args)), {
    concurrency: "unbounded",
    discard: true
  })

/**
 * Workers each with its own RedisStore in cluster mode against a real Redis Cluster (several
 * redis-server cluster nodes, `support/RedisCluster.ts`): each token's record lives on the
 * master of its slot, and every raw read, write, kill and count goes to the master(s) it
 * concerns.
 *
 * The cluster may be shared by the tests of a file: the fixture first lets the default
 * user run every command again, empties every master and turns keyspace notifications off,
 * as a fresh server would be; give each test a `keyPrefix` of its own as well.
 *
 * `refuseEvents`: CONFIG cannot be renamed away on a running node, so an ACL forbids it
 * (`ACL SETUSER default -config`) on every master, until the test ends. The store's CONFIG
 * GET is refused with a NOPERM error reply, as a server without CONFIG refuses it.
 */
export const onRedisCluster = (
  nodes: RedisCluster.RedisCluster,
  input: LeaseholdConfig.Input = {},
  options: ClusterOptions = {}
) =>
  Effect.gen(function* () {
    const logs = capture()
    yield* onEveryMaster(nodes, "ACL", "SETUSER", "default", "+@all")
    yield* onEveryMaster(nodes, "FLUSHALL")
    yield* onEveryMaster(nodes, "CONFIG", "SET", "notify-keyspace-events", "")
    if (options.refuseEvents === true) {
      // Registered before the store is built, so it runs after the store is closed. A node
      // restarted in the meantime has forgotten the ACL anyway.
      yield* Effect.acquireRelease(onEveryMaster(nodes, "ACL", "SETUSER", "default", "-config"), () =>
        Effect.forEach(nodes.nodes, (node) => Effect.ignore(node.command("ACL", "SETUSER", "default", "+@all")), {
          concurrency: "unbounded",
          discard: true
        })
      )
    }
    const store = RedisStore.layer({ url: nodes.url, cluster: true })
    const shared = yield* Layer.build(
      store.pipe(Layer.provideMerge(configWith({ commandTimeout: 1_000, connectTimeout: 5_000, ...input })))
    ).pipe(Effect.provide(logs.layer), Effect.orDie)
    /** Run a raw command on the master that holds `key`. */
    const onMasterOf = (key: string, ...args: ReadonlyArray<string>) =>
      Effect.orDie(Effect.flatMap(nodes.nodeFor(key), (node) => node.command(...args)))
    const cluster = makeCluster(
      shared,
      logs,
      {
        get: (key) => Effect.flatMap(Effect.orDie(nodes.nodeFor(key)), (node) => RedisServer.getRaw(node, key)),
        set: (key, value) => Effect.asVoid(onMasterOf(key, "SET", key, value)),
        del: (key) => Effect.asVoid(onMasterOf(key, "DEL", key))
      },
      store
    )
    return {
      ...cluster,
      nodes,
      // every master restarts empty: nothing is left to delete
      removeDuringOutage: () => Effect.void,
      outage: {
        // every master SIGKILLed: the whole cluster is down
        begin: nodes.kill,
        // restarts only the stopped masters (the suite also runs it as a finalizer), then
        // waits for cluster_state:ok everywhere
        end: nodes.restart
      },
      dropSubscriptions: Effect.asVoid(Effect.orDie(nodes.clientKill("pubsub"))),
      operations: clusterCommandsProcessed(nodes)
    } satisfies TokenCluster & { readonly nodes: RedisCluster.RedisCluster }
  })
