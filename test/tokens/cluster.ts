/**
 * Workers for token-manager tests: several workers (each its own InstanceId, supervisor
 * and token manager) over one shared store, memory or a real redis-server.
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
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as MemoryStore from "../../src/MemoryStore.js"
import * as RedisStore from "../../src/RedisStore.js"
import { type SocketRecord, Store } from "../../src/Store.js"
import * as Supervisor from "../../src/Supervisor.js"
import * as TokenManager from "../../src/TokenManager.js"
import { capture, type LogLine } from "../support/logs.js"
import { buildOwn } from "../support/ownScope.js"
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
  /** Make the store refuse socket events (memory: `refuseSocketEvents`; Redis: CONFIG renamed away). */
  readonly refuseEvents?: boolean
  /**
   * Memory only: run before every call of a store operation, by name, so a test can hold
   * an operation at a chosen point; the real operation runs after it.
   */
  readonly before?: (operation: string) => Effect.Effect<void>
}

const configWith = (input: LeaseholdConfig.Input) =>
  LeaseholdConfig.layerWith({ retryJitter: false, lockExpiration: 1_000, lockWarningThreshold: 500, ...input })

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
  }
) => {
  const keys = makeKeys(Context.get(shared, LeaseholdConfig.LeaseholdConfig).keyPrefix)
  const worker = () =>
    Effect.gen(function* () {
      const { built, close } = yield* buildOwn(
        Layer.fresh(workerLayer).pipe(Layer.provide(Layer.succeedContext(shared))),
        logs
      )
      return {
        id: Context.get(built, InstanceId.InstanceId),
        tokens: Context.get(built, TokenManager.TokenManager),
        health: Context.get(built, Health.Health),
        close
      } satisfies TokenWorker
    })
  return {
    store: Context.get(shared, Store),
    logs: logs.lines,
    worker,
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
const counting = (store: Store.Service, before?: (operation: string) => Effect.Effect<void>) => {
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
              : Effect.zipRight(
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

/** Workers over one RedisStore against a fresh redis-server. */
export const redisCluster = (input: LeaseholdConfig.Input = {}, options: ClusterOptions = {}) =>
  Effect.gen(function* () {
    const logs = capture()
    const server = yield* RedisServer.start(
      options.refuseEvents === true ? { extraArgs: ["--rename-command", "CONFIG", ""] } : undefined
    )
    const shared = yield* Layer.build(
      RedisStore.layer({ url: server.url }).pipe(
        Layer.provideMerge(configWith({ commandTimeout: 1_000, connectTimeout: 1_000, ...input }))
      )
    ).pipe(Effect.provide(logs.layer), Effect.orDie)
    const cluster = makeCluster(shared, logs, {
      get: (key) => RedisServer.getRaw(server, key),
      set: (key, value) => Effect.asVoid(Effect.orDie(server.command("SET", key, value))),
      del: (key) => Effect.asVoid(Effect.orDie(server.command("DEL", key)))
    })
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
