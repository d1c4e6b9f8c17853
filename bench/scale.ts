/**
 * Scale: memory after many tokens go idle, breaking many leases at once, and how Redis
 * traffic grows with workers and tokens.
 *
 * 1. idle (embedded store, then Redis): one worker modifies `--tokens` distinct tokens once
 *    each (64 at a time), then stays idle past the token expiration (`--expiration-s`).
 *    The heap (after `gc()`) is read before the tokens (after a warm-up pass that went
 *    idle too, so code and pools are already in it), right after them, and after the idle.
 * 2. leases (Redis, then the embedded store): worker A (oplock on, a lease hold longer than
 *    the run) modifies `--leases` tokens once each, so it holds that many leases at once.
 *    Worker B then modifies every one of them at once; each modification contends, which
 *    ends A's lease on that token. `break_all_ms` runs from B's start to its last
 *    modification done; every one must read A's value (none lost). `heap_per_lease_kb` is
 *    the heap (after `gc()`) while A holds its leases less the heap before, per lease.
 * 3. traffic (Redis): connections a worker opens, commands per modification, commands per
 *    second of an idle worker, channels subscribed while idle and while leasing.
 *
 *   npm run bench:scale -- --json                   one JSON object with every figure
 *   npm run bench:scale -- --tokens 20000 --leases 2000 --expiration-s 3
 *   npm run bench:scale -- --only idle,leases,traffic
 *
 * The script needs `gc()`: `npm run bench:scale` runs node with `--expose-gc`.
 */

import * as v8 from "node:v8"
import { runInNewContext } from "node:vm"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { Redis } from "ioredis"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as RedisStore from "../src/RedisStore.js"
import * as StateManager from "../src/StateManager.js"
import type { Store } from "../src/Store.js"
import * as Worker from "../src/Worker.js"
import * as RedisServer from "../test/support/RedisServer.js"
import { flag, json, percentile } from "./args.js"

const tokens = Number(flag("tokens") ?? 100_000)
const leases = Number(flag("leases") ?? 10_000)
const expirationS = Number(flag("expiration-s") ?? 5)
const only = new Set((flag("only") ?? "idle,leases,traffic").split(","))

const gc: () => void =
  (globalThis as { gc?: () => void }).gc ??
  (() => {
    v8.setFlagsFromString("--expose-gc")
    return runInNewContext("gc") as () => void
  })()

/** The heap in use after full collections, in MB. */
const heapMb = Effect.sync(() => {
  for (let i = 0; i < 3; i++) gc()
  return Math.round((process.memoryUsage().heapUsed / 1024 / 1024) * 10) / 10
})

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
const bump = (s: { readonly n: number }) => [s.n, { n: s.n + 1 }] as const

const config = (input: LeaseholdConfig.Input) => LeaseholdConfig.layer({ retryJitter: false, ...input })

type Shared = Context.Context<Store | LeaseholdConfig.LeaseholdConfig>

/** A store and its configuration, built once and shared by the workers of one part. */
const sharedStore = (
  kind: "memory" | "redis",
  url: string,
  input: LeaseholdConfig.Input
): Effect.Effect<Shared, unknown, Scope.Scope> =>
  kind === "memory"
    ? Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(config(input))))
    : Layer.build(RedisStore.layer({ url }).pipe(Layer.provideMerge(config(input))))

/**
 * One worker over the shared store, with its own configuration. On Redis every worker has
 * its own connections (its own RedisStore), as separate processes would; on memory the
 * workers share the store.
 */
const stateWorker = (kind: "memory" | "redis", url: string, shared: Shared, input: LeaseholdConfig.Input) =>
  Effect.map(
    Layer.build(
      kind === "memory"
        ? Layer.fresh(Worker.layerState).pipe(Layer.provide(Layer.merge(Layer.succeedContext(shared), config(input))))
        : Worker.layerState.pipe(Layer.provide(RedisStore.layer({ url })), Layer.provide(config(input)))
    ),
    (context) => Context.get(context, StateManager.StateManager)
  )

const now = Clock.currentTimeMillis

const modifyEach = (states: StateManager.StateManager.Service, names: ReadonlyArray<string>, concurrency: number) =>
  Effect.forEach(names, (token) => states.modify(token, Counter, bump), { concurrency, discard: true })

const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`)

// --- 1. idle ------------------------------------------------------------------------

const idlePart = (kind: "memory" | "redis", server: RedisServer.RedisServer) =>
  Effect.scoped(
    Effect.gen(function* () {
      const input = {
        tokenExpiration: Duration.seconds(expirationS),
        lockExpiration: 2_000,
        lockWarningThreshold: 1_000
      }
      const shared = yield* sharedStore(kind, server.url, input)
      const states = yield* stateWorker(kind, server.url, shared, input)
      // Everything past the expiration, and the embedded store's sweep (at most once a second).
      const idle = Effect.sleep(`${expirationS * 1000 + 2_500} millis`)
      yield* modifyEach(states, names("warm", Math.min(tokens, 5_000)), 64)
      yield* idle
      const baseline = yield* heapMb
      const start = yield* now
      yield* modifyEach(states, names("tab", tokens), 64)
      const elapsed = (yield* now) - start
      const peak = yield* heapMb
      yield* idle
      const after = yield* heapMb
      const keysLeft =
        kind === "redis"
          ? yield* Effect.orDie(server.dbsize)
          : yield* Context.getUnsafe(shared, MemoryStore.MemoryStoreControl).keyCount
      return {
        store: kind,
        tokens,
        modify_ops_s: Math.round((tokens * 1000) / elapsed),
        baseline_heap_mb: baseline,
        peak_heap_mb: peak,
        idle_heap_mb: after,
        idle_vs_baseline_pct: Math.round(((after - baseline) / baseline) * 1000) / 10,
        keys_after_idle: keysLeft
      }
    })
  )

// --- 2. leases ----------------------------------------------------------------------

const channels = (server: RedisServer.RedisServer) =>
  Effect.map(Effect.orDie(server.info("stats")), (stats) => Number(stats.pubsub_channels))

const patterns = (server: RedisServer.RedisServer) =>
  Effect.map(Effect.orDie(server.info("stats")), (stats) => Number(stats.pubsub_patterns))

const leasePart = (kind: "memory" | "redis", server: RedisServer.RedisServer) =>
  Effect.scoped(
    Effect.gen(function* () {
      // A hold longer than the run: only contention ends these leases.
      const input = {
        oplock: true,
        lockExpiration: 120_000,
        leaseHoldTime: 110_000,
        lockWarningThreshold: 60_000,
        commandTimeout: 30_000
      }
      const shared = yield* sharedStore(kind, server.url, input)
      const a = yield* stateWorker(kind, server.url, shared, input)
      // B takes no leases of its own: once A's are broken, no per-token subscription is left.
      const b = yield* stateWorker(kind, server.url, shared, { ...input, oplock: false })
      const tokensOf = names(`lease-${kind}`, leases)
      const channelsBefore = kind === "redis" ? yield* channels(server) : 0
      const heapBefore = yield* heapMb
      const setupStart = yield* now
      yield* modifyEach(a, tokensOf, 256)
      const setupMs = (yield* now) - setupStart
      // read once the leases are idle, as held leases mostly are (an idle lease parks)
      yield* Effect.sleep("1 second")
      const heapLeasing = yield* heapMb
      const channelsLeasing = kind === "redis" ? yield* channels(server) : 0
      const waits: Array<number> = []
      let lost = 0
      const start = yield* now
      yield* Effect.forEach(
        tokensOf,
        (token) =>
          Effect.gen(function* () {
            const begun = yield* now
            const seen = yield* b.modify(token, Counter, bump)
            if (seen !== 1) lost++
            waits.push((yield* now) - begun)
          }),
        { concurrency: "unbounded", discard: true }
      )
      const breakMs = (yield* now) - start
      // Every lease is over: the per-token subscriptions go with them.
      yield* Effect.sleep("1 second")
      const channelsAfter = kind === "redis" ? yield* channels(server) : 0
      waits.sort((x, y) => x - y)
      return {
        store: kind,
        leases,
        lease_setup_ms: setupMs,
        heap_per_lease_kb: Math.round(((heapLeasing - heapBefore) * 1024 * 10) / leases) / 10,
        break_all_ms: breakMs,
        per_token_p50_ms: percentile(waits, 50),
        per_token_p99_ms: percentile(waits, 99),
        per_token_max_ms: waits[waits.length - 1] ?? 0,
        lost_updates: lost,
        ...(kind === "redis"
          ? { channels_before: channelsBefore, channels_leasing: channelsLeasing, channels_after: channelsAfter }
          : {})
      }
    })
  )

// --- 3. traffic ---------------------------------------------------------------------

/**
 * Every command clients send, through MONITOR: `sent` counts the commands of a round trip
 * (a script call is one), `inScripts` the commands the scripts ran. The harness's own PING,
 * INFO and CLIENT are left out.
 */
const monitor = (server: RedisServer.RedisServer) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Redis(server.port, "127.0.0.1", { lazyConnect: true })
      const counts = { sent: 0, inScripts: 0 }
      const feed = await client.monitor()
      feed.on("monitor", (_time: string, argv: ReadonlyArray<string>, source: string) => {
        const name = String(argv[0]).toLowerCase()
        if (source === "lua") counts.inScripts++
        else if (name !== "ping" && name !== "info" && name !== "client") counts.sent++
      })
      const close = () => {
        feed.disconnect()
        client.disconnect()
      }
      return { counts, close }
    }),
    (m) => Effect.sync(() => m.close())
  )

type Counts = { readonly sent: number; readonly inScripts: number }

const clients = (server: RedisServer.RedisServer) =>
  Effect.map(Effect.orDie(server.info("clients")), (info) => Number(info.connected_clients))

const Update = Schema.Struct({ n: Schema.Number })

/** A full worker (state, sockets, mailbox) on Redis, in the current scope. */
const fullWorker = (url: string, input: LeaseholdConfig.Input) =>
  Effect.map(
    Layer.build(
      Worker.layer({ schema: Update, deliver: () => Effect.void }).pipe(
        Layer.provide(RedisStore.layer({ url })),
        Layer.provide(config(input))
      )
    ),
    (context) => Context.get(context, StateManager.StateManager)
  )

const trafficPart = (server: RedisServer.RedisServer) =>
  Effect.scoped(
    Effect.gen(function* () {
      const input = { lockExpiration: 2_000, lockWarningThreshold: 1_000 }
      const idleSeconds = 10
      const m = yield* monitor(server)
      const snapshot = Effect.sync((): Counts => ({ ...m.counts }))
      // MONITOR's output arrives after the replies: let it catch up before reading a count.
      const settled = Effect.andThen(Effect.sleep("300 millis"), snapshot)
      const clientsBefore = yield* clients(server)
      const channelsBefore = yield* channels(server)
      const patternsBefore = yield* patterns(server)
      const w1 = yield* fullWorker(server.url, input)
      yield* Effect.sleep("1 second")
      const clientsOne = yield* clients(server)
      const channelsOne = yield* channels(server)
      const patternsOne = yield* patterns(server)
      // an idle worker's own traffic: its mailbox reader, record keep-alive and expiry refreshes
      const idleStart = yield* settled
      yield* Effect.sleep(`${idleSeconds} seconds`)
      const idleOne = ((yield* settled).sent - idleStart.sent) / idleSeconds
      yield* fullWorker(server.url, input)
      yield* Effect.sleep("1 second")
      const clientsTwo = yield* clients(server)
      const idleTwoStart = yield* settled
      yield* Effect.sleep(`${idleSeconds} seconds`)
      const idleTwo = ((yield* settled).sent - idleTwoStart.sent) / idleSeconds

      const n = 2_000
      const perModification = (states: StateManager.StateManager.Service, tokensOf: ReadonlyArray<string>) =>
        Effect.gen(function* () {
          const before = yield* settled
          const started = yield* now
          for (const token of tokensOf) yield* states.modify(token, Counter, bump)
          const elapsed = (yield* now) - started
          const after = yield* settled
          const per = (x: number) => Math.round((x / tokensOf.length) * 100) / 100
          return {
            round_trips: per(after.sent - before.sent),
            commands_in_scripts: per(after.inScripts - before.inScripts),
            ms: Math.round((elapsed / tokensOf.length) * 1000) / 1000
          }
        })
      const offDistinct = yield* perModification(w1, names("off", n))
      const offSame = yield* perModification(
        w1,
        Array.from({ length: n }, () => "off-hot")
      )
      const leased = yield* fullWorker(server.url, { ...input, oplock: true })
      const onSame = yield* perModification(
        leased,
        Array.from({ length: n }, () => "on-hot")
      )
      const onDistinct = yield* perModification(leased, names("on", n))
      return {
        clients_per_worker: clientsOne - clientsBefore,
        clients_two_workers: clientsTwo - clientsBefore,
        channels_idle_worker: channelsOne - channelsBefore,
        patterns_idle_worker: patternsOne - patternsBefore,
        idle_commands_s_one_worker: Math.round(idleOne * 10) / 10,
        idle_commands_s_two_workers: Math.round(idleTwo * 10) / 10,
        modify_oplock_off_distinct: offDistinct,
        modify_oplock_off_one_token: offSame,
        modify_oplock_on_one_token: onSame,
        modify_oplock_on_distinct: onDistinct
      }
    })
  )

const program = Effect.gen(function* () {
  const server = yield* RedisServer.start()
  const result: Record<string, unknown> = { tokens, leases, expiration_s: expirationS }
  const report = (name: string, value: unknown) =>
    Effect.sync(() => {
      result[name] = value
      if (!json) console.log(name, JSON.stringify(value))
    })
  if (only.has("idle")) {
    yield* report("idle_memory", yield* idlePart("memory", server))
    yield* report("idle_redis", yield* idlePart("redis", server))
    yield* Effect.orDie(server.command("FLUSHALL"))
  }
  if (only.has("leases")) {
    yield* report("leases_redis", yield* leasePart("redis", server))
    yield* report("leases_memory", yield* leasePart("memory", server))
    yield* Effect.orDie(server.command("FLUSHALL"))
  }
  if (only.has("traffic")) {
    yield* report("traffic_redis", yield* trafficPart(server))
  }
  if (json) console.log(JSON.stringify(result))
}).pipe(Effect.scoped)

// runMain keeps the process alive while the program awaits sockets and child processes.
NodeRuntime.runMain(program.pipe(Effect.provideService(References.MinimumLogLevel, "None")))
