/**
 * Workers for state-manager tests: several workers, each its own InstanceId, supervisor,
 * signals, lock and leases. On memory they share one MemoryStore (one process's); on Redis
 * each has its own RedisStore, with its own connections, as separate processes would: one
 * client does not serialise their races, and a cut subscriber is each worker's own. The
 * test reads and writes through a store of its own.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Health from "../../src/Health.js"
import { InstanceId } from "../../src/InstanceId.js"
import { makeKeys } from "../../src/internal/keys.js"
import * as Lease from "../../src/internal/lease.js"
// the worker layers with their leases, which the public ones leave out
import * as WorkerLayers from "../../src/internal/worker.js"
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as Lock from "../../src/Lock.js"
import * as MemoryStore from "../../src/MemoryStore.js"
import * as RedisStore from "../../src/RedisStore.js"
import * as StateManager from "../../src/StateManager.js"
import { Store } from "../../src/Store.js"
import { capture, type LogLine } from "../support/logs.js"
import * as Monitor from "../support/monitor.js"
import { buildOwn } from "../support/ownScope.js"
import { untilReal } from "../support/poll.js"
import type * as RedisSentinel from "../support/RedisSentinel.js"
import * as RedisServer from "../support/RedisServer.js"
import { settle } from "../support/testClock.js"

export const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
export const Other = StateManager.slice("other", Schema.Struct({ s: Schema.String }), { s: "" })

export interface Worker {
  readonly id: string
  readonly states: StateManager.StateManager.Service
  readonly lease: Lease.Lease.Service
  readonly lock: Lock.Lock.Service
  readonly health: Health.Health.Service
  /** The worker's own store (on Redis its own connections; on memory the one all share). */
  readonly store: Store.Service
  /** Close this worker (flushes its leases, releases its locks). */
  readonly close: Effect.Effect<void>
}

/**
 * A hand-off whose grantee is kept from acting on it, made by the backend: on memory with its
 * control; on Redis with `CLIENT PAUSE ... ALL` of the server that holds the token's keys
 * (commands wait and then run in the order sent; the pause ends by itself; a Cluster's bus
 * is not paused, so no node is taken for failed). A pause begins just after an attempt of
 * the grantee, seen with MONITOR, so that its next attempt, a re-check interval later,
 * comes after the release.
 */
export interface Handoffs {
  /**
   * Run `release` (which hands the token's lock to `grantee`, the head of its queue) so that
   * the grantee hears nothing of its grant until the effect returned ends. Memory: the grant's
   * notice is lost, and the effect returned does nothing. Redis: the release waits behind a
   * pause of half the command timeout, which the effect returned waits out; whatever the
   * grantee sends meanwhile runs after the release, and nothing times out.
   */
  readonly unheard: (
    token: string,
    grantee: Worker,
    release: Effect.Effect<unknown, unknown>
  ) => Effect.Effect<Effect.Effect<void>>
  /**
   * Run `release` so that the grantee's claim runs but its reply is lost: memory, the grant's
   * notice is lost and so is the reply of the grantee's next `acquireQueued` (its re-check);
   * Redis, its re-check waits behind a pause longer than a
   * re-check interval and the command timeout. Returns once the claim has run (and, on Redis,
   * what the grantee sent after it).
   */
  readonly claimReplyLost: (
    token: string,
    grantee: Worker,
    release: Effect.Effect<unknown, unknown>
  ) => Effect.Effect<void>
  /**
   * Redis only (memory answers every step at once): run `release` so that the grantee's
   * claim is sent and held by the paused server while `during` runs, then answered, within
   * the command timeout (which must exceed a re-check interval by 2.5 s). Returns once the
   * pause is over.
   */
  readonly claimHeld: Option.Option<
    (
      token: string,
      grantee: Worker,
      release: Effect.Effect<unknown, unknown>,
      during: Effect.Effect<void>
    ) => Effect.Effect<void>
  >
  /**
   * Memory only: run `release` (which hands the token's lock to `grantee`) so that the
   * grant's notice is held back; the effect returned delivers it, late (by then the grantee
   * may have claimed the grant by a re-check, used it and released it).
   */
  readonly lateNotice: Option.Option<
    (token: string, grantee: Worker, release: Effect.Effect<unknown, unknown>) => Effect.Effect<Effect.Effect<void>>
  >
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
   * Redis only: watch what clients send to the server holding `token`'s keys from now on
   * (MONITOR, for the life of the scope): every command, not only scripts, but for those
   * that keep a client connected rather than serve an operation (see `watchSent`). The effect
   * returned reads the arguments of each sent before it was called, joined by spaces.
   */
  readonly scripts: Option.Option<
    (token: string) => Effect.Effect<Effect.Effect<ReadonlyArray<string>>, never, Scope.Scope>
  >
  readonly handoffs: Handoffs
}

/**
 * Commands a client sends to keep connected, not for an operation: a subscriber's
 * (un)subscriptions, and a Cluster client's topology reads (`CLUSTER SLOTS` every 5 s, on
 * a timer of its own).
 */
const upkeep = new Set([
  "subscribe",
  "unsubscribe",
  "ssubscribe",
  "sunsubscribe",
  "psubscribe",
  "punsubscribe",
  "cluster"
])

/**
 * What clients send to a server from now on, as `Cluster.scripts` reads it. Each read ends
 * at a barrier, so whatever was sent before the read began is in it, without waiting for
 * "nothing more".
 */
const watchSent = (server: RedisServer.RedisServer) =>
  Effect.map(Monitor.monitor(server), (monitor) =>
    Effect.map(Monitor.barrier(server, monitor), (end) =>
      Monitor.sentBetween(monitor, 0, end)
        .filter((command) => !upkeep.has(command.args[0]!))
        .map((command) => command.args.join(" "))
    )
  )

/** The longest a waiter waits between attempts, as `Lock.make` derives it. */
const recheckMsOf = (settings: LeaseholdConfig.LeaseholdConfig["Service"]) =>
  Math.max(
    1,
    Math.floor(
      Math.min(Duration.toMillis(settings.lockExpiration) / 10, Duration.toMillis(settings.handoffTimeout) / 2)
    )
  )

/** `Handoffs` on a real server: `serverFor` is the server that holds a token's keys. */
const pausedHandoffs = (
  serverFor: (token: string) => Effect.Effect<RedisServer.RedisServer>,
  settings: LeaseholdConfig.LeaseholdConfig["Service"]
): Handoffs => {
  const commandTimeoutMs = Duration.toMillis(settings.commandTimeout)
  const recheckMs = recheckMsOf(settings)
  /** Returns just after the server ran a script naming `worker` (one of its attempts). */
  const afterAttemptOf = (server: RedisServer.RedisServer, worker: Worker) =>
    Effect.scoped(
      Effect.gen(function* () {
        const monitor = yield* Monitor.monitor(server)
        yield* untilReal(
          `an attempt of ${worker.id}`,
          Effect.sync(() =>
            monitor.commands.some(
              (command) =>
                !command.fromScript && command.args[0]!.startsWith("eval") && command.args.includes(worker.id)
            )
          ),
          { within: 5_000 }
        )
      })
    )
  /**
   * Pause the token's server for `ms` just after an attempt of `grantee`, and send `release`
   * first (its reply, late or timed out, is not awaited). Returns the effect that waits until
   * the pause is over.
   */
  const pauseAndRelease = (token: string, grantee: Worker, release: Effect.Effect<unknown, unknown>, ms: number) =>
    Effect.gen(function* () {
      const server = yield* serverFor(token)
      yield* afterAttemptOf(server, grantee)
      yield* Effect.orDie(server.command("CLIENT", "PAUSE", ms, "ALL"))
      // The release is sent before anything the test does next makes a worker send: started
      // at once, it runs to its wait for the reply, its command written on its connection
      // before the fork returns (nothing before the write waits for anything).
      yield* Effect.forkChild(Effect.ignore(release), { startImmediately: true })
      // A command on a connection of its own, sent after all that: answered once the pause
      // is over and what waited behind it before has run.
      return Effect.asVoid(Effect.orDie(server.commandWithTimeout(ms + 5_000, "PING")))
    })
  return {
    lateNotice: Option.none(),
    unheard: (token, grantee, release) => pauseAndRelease(token, grantee, release, Math.floor(commandTimeoutMs / 2)),
    claimReplyLost: (token, grantee, release) =>
      // the grantee's re-check comes within a re-check interval, then times out; what it sends
      // then waits behind the pause too
      Effect.flatten(pauseAndRelease(token, grantee, release, recheckMs + commandTimeoutMs + 1_500)),
    claimHeld: Option.some((token, grantee, release, during) =>
      Effect.gen(function* () {
        const pauseMs = recheckMs + 1_500
        if (commandTimeoutMs < pauseMs + 1_000) {
          return yield* Effect.die(`claimHeld: a command timeout of ${commandTimeoutMs} ms is too short`)
        }
        const over = yield* pauseAndRelease(token, grantee, release, pauseMs)
        // Time the protocol needs, not a wait for something to settle: the grantee's re-check
        // goes out on its own timer, a re-check interval after the attempt the pause began
        // behind, and the paused server shows nothing of it (MONITOR sees a command when it
        // runs). A re-check interval, and 600 ms more, and it has been sent, and waits.
        yield* Effect.sleep(recheckMs + 600)
        yield* during
        yield* over
      })
    )
  }
}

const configWith = (input: LeaseholdConfig.Input) =>
  LeaseholdConfig.layer({ retryJitter: false, lockWarningThreshold: 1_000, ...input })

/** What a backend adds to a cluster of workers, from the store's own services. */
interface BackendParts<R> {
  /** Reads a key past the store. */
  readonly raw: (shared: Context.Context<Store | R>) => (key: string) => Effect.Effect<Option.Option<string>>
  readonly operations?: (shared: Context.Context<Store | R>) => Option.Option<Effect.Effect<number>>
  readonly scripts?: Option.Option<
    (token: string) => Effect.Effect<Effect.Effect<ReadonlyArray<string>>, never, Scope.Scope>
  >
  readonly handoffs: (
    shared: Context.Context<Store | R>,
    settings: LeaseholdConfig.LeaseholdConfig["Service"]
  ) => Handoffs
  /**
   * Each worker's own store, built with it as `Worker.layerStateFromEnv` builds one; without
   * it, the workers share the test's store.
   */
  readonly workerStore?: Layer.Layer<Store, unknown, LeaseholdConfig.LeaseholdConfig>
}

const makeCluster = <R, E>(
  storeLayer: Layer.Layer<Store | R, E, LeaseholdConfig.LeaseholdConfig>,
  input: LeaseholdConfig.Input,
  parts: BackendParts<R>
) =>
  Effect.gen(function* () {
    const logs = capture()
    const config = configWith(input)
    const shared = yield* Layer.build(storeLayer.pipe(Layer.provideMerge(config))).pipe(
      Effect.provide(logs.layer),
      Effect.orDie
    )
    const store = Context.get(shared, Store)
    const read = parts.raw(shared)
    const settings = Context.get(shared, LeaseholdConfig.LeaseholdConfig)
    const keys = makeKeys(settings.keyPrefix)
    const worker = () =>
      Effect.gen(function* () {
        const layer =
          parts.workerStore === undefined
            ? Layer.fresh(WorkerLayers.layerState).pipe(Layer.provideMerge(Layer.succeedContext(shared)))
            : Layer.fresh(WorkerLayers.layerState.pipe(Layer.provideMerge(parts.workerStore))).pipe(
                Layer.provide(Layer.succeedContext(Context.pick(LeaseholdConfig.LeaseholdConfig)(shared)))
              )
        const { built, close } = yield* Effect.orDie(buildOwn(layer, logs))
        return {
          id: Context.get(built, InstanceId),
          states: Context.get(built, StateManager.StateManager),
          lease: Context.get(built, Lease.Lease),
          lock: Context.get(built, Lock.Lock),
          health: Context.get(built, Health.Health),
          store: Context.get(built, Store),
          close
        } satisfies Worker
      })
    return {
      shared,
      store,
      logs: logs.lines,
      keys,
      worker,
      operations: parts.operations?.(shared) ?? Option.none(),
      scripts: parts.scripts ?? Option.none(),
      handoffs: parts.handoffs(shared, settings),
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
    const control = (shared: Context.Context<MemoryStore.MemoryStoreControl>) =>
      Context.get(shared, MemoryStore.MemoryStoreControl)
    const cluster = yield* makeCluster(MemoryStore.layer, input, {
      raw: (shared) => control(shared).getRaw,
      operations: (shared) => Option.some(control(shared).operations),
      handoffs: (shared) => ({
        unheard: (_token, _grantee, release) =>
          Effect.gen(function* () {
            yield* control(shared).loseNotices(1)
            yield* Effect.orDie(release)
            return Effect.void
          }),
        claimReplyLost: (_token, _grantee, release) =>
          Effect.gen(function* () {
            // the grant's notice is lost (a notice that hands the lock over needs no claim):
            // the grantee's claim is its next attempt, at its re-check
            yield* control(shared).loseNotices(1)
            yield* control(shared).loseReplies("acquireQueued", 1)
            yield* Effect.orDie(release)
            yield* settle
          }),
        claimHeld: Option.none(),
        lateNotice: Option.some((_token, _grantee, release) =>
          Effect.gen(function* () {
            yield* control(shared).holdNotices(1)
            yield* Effect.orDie(release)
            return control(shared).deliverHeldNotices
          })
        )
      })
    })
    return { ...cluster, control: Context.get(cluster.shared, MemoryStore.MemoryStoreControl) }
  })

/** Workers each with its own RedisStore reaching Redis as `target` says; the test has one too. */
const redisWorkers = (
  target: RedisStore.Options,
  input: LeaseholdConfig.Input,
  parts: Omit<BackendParts<never>, "workerStore">
) => makeCluster(RedisStore.layer(target), input, { ...parts, workerStore: RedisStore.layer(target) })

/** Workers each with its own RedisStore against a fresh redis-server. */
export const redisCluster = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const server = yield* RedisServer.start()
    const cluster = yield* redisWorkers({ url: server.url }, input, {
      raw: () => (key) => RedisServer.getRaw(server, key),
      scripts: Option.some(() => watchSent(server)),
      handoffs: (_shared, settings) => pausedHandoffs(() => Effect.succeed(server), settings)
    })
    return { ...cluster, server }
  })

/** Workers each with its own RedisStore against a redis-server already running (a primary with replicas, say). */
export const redisWorkersAt = (server: RedisServer.RedisServer, input: LeaseholdConfig.Input = {}) =>
  redisWorkers({ url: server.url }, input, {
    raw: () => (key) => RedisServer.getRaw(server, key),
    scripts: Option.some(() => watchSent(server)),
    handoffs: (_shared, settings) => pausedHandoffs(() => Effect.succeed(server), settings)
  })

/**
 * Workers each with its own RedisStore on a Redis Cluster: `url` lists its seed nodes, `raw`
 * reads a key from the node that holds it.
 */
export const redisClusterWorkers = (
  url: string,
  raw: (key: string) => Effect.Effect<Option.Option<string>>,
  nodeFor: (key: string) => Effect.Effect<RedisServer.RedisServer>,
  input: LeaseholdConfig.Input = {}
) =>
  redisWorkers({ url, cluster: true }, input, {
    raw: () => raw,
    // the same slot holds all of a token's keys, and the commands on them
    scripts: Option.some((token: string) =>
      Effect.flatMap(nodeFor(makeKeys(input.keyPrefix ?? "leasehold").lock(token)), watchSent)
    ),
    handoffs: (_shared, settings) =>
      pausedHandoffs((token) => nodeFor(makeKeys(settings.keyPrefix).lock(token)), settings)
  })

/**
 * Workers each with its own RedisStore behind Sentinel: `raw` reads a key from the primary
 * the Sentinels name now.
 */
export const redisSentinelWorkers = (sentinel: RedisSentinel.RedisSentinel, input: LeaseholdConfig.Input = {}) =>
  redisWorkers({ sentinels: sentinel.addresses, sentinelName: sentinel.name }, input, {
    raw: () => (key) => Effect.flatMap(sentinel.primary, (primary) => RedisServer.getRaw(primary, key)),
    scripts: Option.some(() => Effect.flatMap(sentinel.primary, watchSent)),
    handoffs: (_shared, settings) => pausedHandoffs(() => sentinel.primary, settings)
  })

/**
 * Start a modification of `token` on `w` that adds 1 and holds its turn (and the lock)
 * until `open` runs; returns once it has entered.
 */
export const holding = (w: { readonly states: StateManager.StateManager.Service }, token: string) =>
  Effect.gen(function* () {
    const gate = yield* Deferred.make<void>()
    const entered = yield* Deferred.make<void>()
    const fiber = yield* Effect.forkChild(
      w.states.modifyEffect(token, Counter, (s) =>
        Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
          null,
          { n: s.n + 1 }
        ] as const)
      )
    )
    yield* Deferred.await(entered)
    return { fiber, open: Deferred.succeed(gate, undefined) }
  })
