/**
 * Workers for the hostile-input tests: full `Worker.layer` workers (state manager, token
 * manager, mailbox) over one store, plus a record of everything the store was asked, to
 * prove that a refused input never reached it.
 *
 * - memory: one MemoryStore under `TestClock`; every call into it is recorded with its
 *   arguments.
 * - Redis: a fresh redis-server; every command it runs (scripts' commands included) is
 *   recorded through `MONITOR`.
 * - Redis Cluster: a real cluster of several redis-server nodes, shared by the tests of a
 *   file; every command any master runs is recorded through a `MONITOR` on each master.
 */
import { it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { type Keys, makeKeys } from "../../src/internal/keys.js"
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as MemoryStore from "../../src/MemoryStore.js"
import { Store } from "../../src/Store.js"
import { type DeliveryWorker, redisWorkers, type WorkerOptions, workerOver } from "../delivery/workers.js"
import { capture, type LogLine } from "../support/logs.js"
import * as Monitor from "../support/monitor.js"
import { untilOnTestClock, untilReal } from "../support/poll.js"
import type * as RedisCluster from "../support/RedisCluster.js"
import * as RedisServer from "../support/RedisServer.js"

export interface HostileFixture {
  readonly store: Store.Service
  readonly keys: Keys
  readonly logs: ReadonlyArray<LogLine>
  readonly worker: (options?: WorkerOptions) => Effect.Effect<DeliveryWorker, never, Scope.Scope>
  /** Store a raw string under a full key name. */
  readonly putRaw: (key: string, value: string) => Effect.Effect<void>
  /** The raw string under a key. */
  readonly getRaw: (key: string) => Effect.Effect<Option.Option<string>>
  /**
   * Everything the store has been asked so far, one string per operation or command with
   * its arguments. Calls after `marker` was seen in a control call are all included: wait
   * with `sawMarker` before asserting what is absent.
   */
  readonly seen: Effect.Effect<ReadonlyArray<string>>
  /** Wait until some recorded operation mentions `text` (Redis: MONITOR is asynchronous). */
  readonly sawText: (text: string) => Effect.Effect<void>
  /** Wait until `check` holds (memory: driving the TestClock a millisecond at a time). */
  readonly until: (label: string, check: Effect.Effect<boolean>) => Effect.Effect<void>
}

export interface HostileBackend {
  readonly name: "memory" | "redis" | "redis-cluster"
  readonly test: (name: string, body: (fx: HostileFixture) => Effect.Effect<void, unknown, Scope.Scope>) => void
}

const config = (keyPrefix: string, input: LeaseholdConfig.Input) =>
  LeaseholdConfig.layer({ retryJitter: false, keyPrefix, commandTimeout: 2_000, ...input })

/** Records every call of a store operation (with its arguments as JSON) and delegates it. */
const recording = (store: Store.Service, seen: Array<string>): Store.Service =>
  Object.fromEntries(
    Object.entries(store).map(([name, value]) => [
      name,
      typeof value === "function"
        ? (...args: Array<unknown>) => {
            seen.push(`${name} ${JSON.stringify(args)}`)
            return (value as (...args: Array<unknown>) => unknown)(...args)
          }
        : value
    ])
  ) as unknown as Store.Service

const memoryFixture = (input: LeaseholdConfig.Input) =>
  Effect.gen(function* () {
    const logs = capture()
    const settings = yield* Layer.build(config("mem", input))
    const memory = yield* MemoryStore.make.pipe(Effect.provide(settings), Effect.provide(logs.layer), Effect.orDie)
    const seen: Array<string> = []
    const shared = Context.add(settings, Store, recording(memory, seen))
    const fixture = {
      store: memory,
      keys: makeKeys("mem"),
      logs: logs.lines,
      worker: (options?: WorkerOptions) => workerOver(shared, logs, options),
      putRaw: (key, value) => memory.control.setRaw(key, value),
      getRaw: memory.control.getRaw,
      seen: Effect.sync(() => [...seen]),
      sawText: (text) =>
        untilReal(
          `the store saw ${text}`,
          Effect.sync(() => seen.some((line) => line.includes(text))),
          { within: 5_000 }
        ),
      until: (label, check) => untilOnTestClock(label, check, { within: 10_000 })
    } satisfies HostileFixture
    return {
      fixture,
      logged: (effect: Effect.Effect<void, unknown, Scope.Scope>) => Effect.provide(effect, logs.layer)
    }
  })

const redisFixture = (server: RedisServer.RedisServer, input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const m = yield* Monitor.monitor(server)
    // each command as `<command> <args…>` (the case of its name as sent does not matter here)
    const lines = () => m.commands.map((command) => command.args.join(" "))
    const fx = yield* redisWorkers(server.url, { keyPrefix: "red", commandTimeout: 10_000, ...input })
    const fixture = {
      store: fx.store,
      keys: makeKeys("red"),
      logs: fx.logs,
      worker: fx.worker,
      putRaw: (key, value) => Effect.asVoid(Effect.orDie(server.command("SET", key, value))),
      getRaw: (key) => RedisServer.getRaw(server, key),
      seen: Effect.sync(lines),
      sawText: (text) =>
        untilReal(
          `the server saw ${text}`,
          Effect.sync(() => lines().some((line) => line.includes(text))),
          { within: 5_000 }
        ),
      until: (label, check) => untilReal(label, check, { within: 10_000 })
    } satisfies HostileFixture
    return { fixture, logged: fx.logged }
  })

/** Run `args` on every master of the cluster. */
const onEveryMaster = (nodes: RedisCluster.RedisCluster, ...args: ReadonlyArray<string>) =>
  Effect.forEach(nodes.nodes, (node) => Effect.orDie(node.command(...args)), {
    concurrency: "unbounded",
    discard: true
  })

/**
 * The cluster is shared by the tests of a file: it is emptied first, and `keyPrefix` is the
 * test's own. Raw reads and writes go to the master of the key's slot.
 */
const redisClusterFixture = (nodes: RedisCluster.RedisCluster, keyPrefix: string, input: LeaseholdConfig.Input) =>
  Effect.gen(function* () {
    yield* onEveryMaster(nodes, "FLUSHALL")
    // A hostile token could hash to any slot: watch every master, not only one.
    const monitors = yield* Effect.forEach(nodes.nodes, Monitor.monitor)
    const lines = () => monitors.flatMap((m) => m.commands.map((command) => command.args.join(" ")))
    const fx = yield* redisWorkers(nodes.url, { redisCluster: true, keyPrefix, commandTimeout: 10_000, ...input })
    const masterOf = (key: string) => Effect.orDie(nodes.nodeFor(key))
    const fixture = {
      store: fx.store,
      keys: makeKeys(keyPrefix),
      logs: fx.logs,
      worker: fx.worker,
      putRaw: (key, value) =>
        Effect.flatMap(masterOf(key), (node) => Effect.asVoid(Effect.orDie(node.command("SET", key, value)))),
      getRaw: (key) => Effect.flatMap(masterOf(key), (node) => RedisServer.getRaw(node, key)),
      seen: Effect.sync(lines),
      sawText: (text) =>
        untilReal(
          `a master saw ${text}`,
          Effect.sync(() => lines().some((line) => line.includes(text))),
          { within: 5_000 }
        ),
      until: (label, check) => untilReal(label, check, { within: 10_000 })
    } satisfies HostileFixture
    return { fixture, logged: fx.logged }
  })

/**
 * The test's body, with its own calls of the workers logging into the workers' capture (a
 * logger is provided to the effect it is provided to, not to the fiber that built it).
 */
const withLogs =
  (body: (fx: HostileFixture) => Effect.Effect<void, unknown, Scope.Scope>) =>
  (built: {
    readonly fixture: HostileFixture
    readonly logged: (effect: Effect.Effect<void, unknown, Scope.Scope>) => Effect.Effect<void, unknown, Scope.Scope>
  }) =>
    built.logged(body(built.fixture))

export const memory = (input: LeaseholdConfig.Input = {}): HostileBackend => ({
  name: "memory",
  test: (name, body) => it.effect(name, () => Effect.flatMap(memoryFixture(input), withLogs(body)))
})

export const redis = (input: LeaseholdConfig.Input = {}): HostileBackend => ({
  name: "redis",
  test: (name, body) =>
    it.live(name, () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        yield* withLogs(body)(yield* redisFixture(server, input))
      })
    )
})

/**
 * On a real Redis Cluster: `cluster` hands out the file's shared cluster (see
 * `RedisCluster.shared`), which each test empties first; each test has its own key prefix.
 */
export const redisCluster = (
  cluster: Effect.Effect<RedisCluster.RedisCluster>,
  input: LeaseholdConfig.Input = {}
): HostileBackend => {
  let testCount = 0
  return {
    name: "redis-cluster",
    test: (name, body) =>
      it.live(
        name,
        () =>
          Effect.gen(function* () {
            const nodes = yield* cluster
            yield* withLogs(body)(yield* redisClusterFixture(nodes, `hostile${++testCount}`, input))
          }),
        60_000
      )
  }
}
