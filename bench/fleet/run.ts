/**
 * One implementation in one cell of `bench:fleet`: a fresh store, `workers` worker processes
 * each on its own port, the tabs' generators (one process per 2,000 tabs) and the API
 * caller; a warm-up, the heap of the idle tabs, the measured window, the drain and the final
 * check of every tab's counter. Everything it started is gone when it returns.
 */
import * as path from "node:path"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { freePort } from "../../test/app/support.js"
import * as Measure from "./measure.js"
import * as Processes from "./processes.js"

/** The implementations, in the order of a cell. */
export const impls = ["leasehold", "bare", "bare-durable", "reflex-style"] as const
export type Impl = (typeof impls)[number]

export interface Settings {
  readonly impl: Impl
  readonly cluster: boolean
  readonly workers: number
  readonly tabs: number
  readonly seconds: number
  readonly warmup: number
  /** Where the workers write a CPU profile each (`--cpu-prof`), if anywhere. */
  readonly profileDir?: string | undefined
}

/** A row of the output. */
export interface Row {
  readonly impl: Impl
  readonly store: "redis" | "cluster"
  readonly workers: number
  readonly tabs: number
  readonly events_per_s: number
  readonly offered_per_s: number
  readonly saturated: boolean
  readonly p50_ms: number
  readonly p99_ms: number
  readonly p999_ms: number
  readonly api_p99_ms: number
  readonly worker_cpu_us_per_event: number
  readonly redis_cpu_us_per_event: number
  readonly redis_commands_per_event: number
  readonly heap_per_tab_kb: number
  readonly machine_cpu_pct: number
  readonly lost: number
  readonly doubled: number
  /** Events and API calls of unknown outcome by their answers: `doubled` allows for them. */
  readonly unknown: number
  readonly unanswered: number
}

const root = path.resolve(import.meta.dirname, "../..")
const tabsPerGenerator = 2_000
const drainMs = 30_000

interface Stopped {
  readonly sent: number
  readonly answered: number
  readonly latencies: ReadonlyArray<number>
}
interface Drained {
  readonly pending: number
  readonly late: ReadonlyArray<number>
}

/** The worker processes of `settings.impl` on the store, one per port; up once each listens. */
const startWorkers = (settings: Settings, store: Measure.Store) =>
  Effect.gen(function* () {
    const ports = yield* Effect.forEach(Array.from({ length: settings.workers }), () => freePort)
    const profile = settings.profileDir === undefined ? [] : ["--cpu-prof", "--cpu-prof-dir", settings.profileDir]
    const execArgv = ["--expose-gc", "--conditions=leasehold-source", "--import", "tsx", ...profile]
    const env = (i: number): Record<string, string | undefined> =>
      settings.impl === "leasehold"
        ? {
            FLEET_ENTRY: path.join(root, "examples/counter/main.ts"),
            LEASEHOLD_REDIS_URL: store.url,
            LEASEHOLD_REDIS_CLUSTER: String(store.kind === "cluster"),
            LEASEHOLD_OPLOCK: "true",
            LEASEHOLD_LEASE_DURABILITY: "batch",
            LEASEHOLD_DATA_DIR: ""
          }
        : {
            FLEET_ENTRY: path.join(root, "bench/fleet/baseline.ts"),
            FLEET_IMPL: settings.impl,
            FLEET_WORKER_ID: String(i),
            FLEET_PEERS: ports.join(","),
            FLEET_REDIS_NODES: store.addresses,
            FLEET_CLUSTER: store.kind === "cluster" ? "1" : "0"
          }
    const workers = yield* Effect.forEach(
      ports,
      (port, i) =>
        Processes.start(path.join(root, "bench/fleet/worker.ts"), execArgv, {
          ...env(i),
          PORT: String(port),
          HOST: "127.0.0.1",
          WORKERS: "1",
          NODE_ENV: "production"
        }),
      { concurrency: "unbounded" }
    )
    yield* Effect.forEach(workers, (worker) => worker.waitFor(/listening on/, 60_000), { concurrency: "unbounded" })
    return { ports, workers }
  })

/**
 * `startWorkers`, again on new ports when an attempt fails (a port picked free may be taken
 * before the worker binds it), each failed attempt's workers stopped at once.
 */
const startWorkersRetrying = (
  settings: Settings,
  store: Measure.Store,
  attempts = 3
): Effect.Effect<Effect.Success<ReturnType<typeof startWorkers>>, never, Scope.Scope> =>
  Effect.gen(function* () {
    const scope = yield* Scope.fork(yield* Scope.Scope)
    const started = yield* startWorkers(settings, store).pipe(
      Scope.provide(scope),
      Effect.onExit((exit) => (Exit.isFailure(exit) ? Scope.close(scope, exit) : Effect.void)),
      Effect.catchDefect((defect) =>
        attempts > 1 ? startWorkersRetrying(settings, store, attempts - 1) : Effect.die(defect)
      )
    )
    return started
  })

const sum = (values: ReadonlyArray<number>) => values.reduce((total, n) => total + n, 0)

/** The workers' heap after full collections, summed, in bytes. */
const heap = (workers: ReadonlyArray<Processes.Child>) =>
  Effect.map(
    Effect.forEach(workers, (worker) => worker.ask<{ bytes: number }>({ type: "heap" }, "heap")),
    (replies) => sum(replies.map((reply) => reply.bytes))
  )

/** The workers' CPU time so far, summed, in µs. */
const cpu = (workers: ReadonlyArray<Processes.Child>) =>
  Effect.map(
    Effect.forEach(workers, (worker) => worker.ask<{ us: number }>({ type: "cpu" }, "cpu"), {
      concurrency: "unbounded"
    }),
    (replies) => sum(replies.map((reply) => reply.us))
  )

/**
 * Every tab's final counter against the events and API calls applied for it: below, `lost`;
 * above what was applied and what is of unknown outcome (an event answered so, an API call
 * answered otherwise than 200), `doubled`. `unknown` counts the latter.
 */
const check = (
  tabs: ReadonlyArray<readonly [string, number, number, number]>,
  api: ReadonlyArray<readonly [string, number]>,
  apiUnknown: ReadonlyArray<readonly [string, number]>
) => {
  const calls = new Map(api)
  const callsUnknown = new Map(apiUnknown)
  let lost = 0
  let doubled = 0
  let unknown = 0
  const wrong: Array<string> = []
  for (const [token, applied, n, unknownEvents] of tabs) {
    const least = applied + (calls.get(token) ?? 0)
    const most = least + unknownEvents + (callsUnknown.get(token) ?? 0)
    unknown += most - least
    if (n < least) lost += least - n
    else if (n > most) doubled += n - most
    if (n < least || n > most) {
      wrong.push(
        `${token}: ${n} for ${applied} events and ${calls.get(token) ?? 0} API calls applied, ${most - least} unknown`
      )
    }
  }
  // the tabs whose counter is off, for a diagnosis (with FLEET_LOG_DIR, the workers' lines)
  if (wrong.length > 0) console.error(`  counters off: ${wrong.slice(0, 20).join("; ")}`)
  return { lost, doubled, unknown }
}

/**
 * The tabs (each generator's share connected) and the API caller: `load` runs them for a
 * while (the window's figures with `measure`), `drain` waits for their answers.
 */
const startLoad = (settings: Settings, ports: ReadonlyArray<number>) =>
  Effect.gen(function* () {
    const prefix = `fleet-${settings.impl}-${settings.workers}-${settings.tabs}`
    const tokens = Array.from({ length: settings.tabs }, (_, i) => `${prefix}-${i}`)
    const generators = yield* Effect.forEach(Array.from({ length: Math.ceil(settings.tabs / tabsPerGenerator) }), () =>
      Processes.start(path.join(root, "bench/fleet/generator.ts"), ["--import", "tsx"], {})
    )
    const connected = yield* Effect.forEach(
      generators,
      (generator, i) =>
        generator.ask<{ failed: number }>(
          { type: "connect", ports, tokens: tokens.slice(i * tabsPerGenerator, (i + 1) * tabsPerGenerator) },
          "connected"
        ),
      { concurrency: "unbounded" }
    )
    const failed = sum(connected.map((reply) => reply.failed))
    if (failed > 0) return yield* Effect.die(`${settings.impl}: ${failed} tabs could not connect`)
    const caller = yield* Processes.start(path.join(root, "bench/fleet/caller.ts"), ["--import", "tsx"], {})
    // The caller last: its replies are the last of each answer.
    const loaders = [...generators, caller]
    const all = <A>(message: object, type: string) =>
      Effect.forEach(loaders, (loader) => loader.ask<A>(message, type), { concurrency: "unbounded" })
    const load = (seconds: number, measure: boolean) =>
      Effect.andThen(
        Effect.forEach(loaders, (loader) => loader.tell({ type: "start", measure, ports, tokens })),
        Effect.andThen(Effect.sleep(`${seconds} seconds`), all<Stopped>({ type: "stop" }, "stopped"))
      )
    const drain = all<Drained>({ type: "drain", ms: drainMs }, "drained")
    const final = Effect.map(
      all<{ tabs: ReadonlyArray<any>; unknown?: ReadonlyArray<any> }>({ type: "final" }, "final"),
      (finals) =>
        check(
          finals.slice(0, -1).flatMap((reply) => reply.tabs),
          finals.at(-1)!.tabs,
          finals.at(-1)!.unknown ?? []
        )
    )
    const close = Effect.forEach(loaders, (loader) => loader.tell({ type: "close" }))
    return { load, drain, final, close }
  })

interface Window {
  readonly stopped: ReadonlyArray<Stopped>
  readonly drained: ReadonlyArray<Drained>
  readonly workerCpuUs: number
  readonly store: readonly [Measure.StoreStats, Measure.StoreStats]
  readonly ticks: readonly [{ busy: number; total: number }, { busy: number; total: number }]
  readonly heapPerTabBytes: number
  readonly lost: number
  readonly doubled: number
  readonly unknown: number
}

/** The row of a window (the caller's replies last in `stopped` and `drained`). */
const rowOf = (settings: Settings, kind: Measure.Store["kind"], window: Window): Row => {
  const { stopped, drained } = window
  const latencies = [
    ...stopped.slice(0, -1).flatMap((s) => s.latencies),
    ...drained.slice(0, -1).flatMap((d) => d.late)
  ].sort((a, b) => a - b)
  const apiLatencies = [...stopped.at(-1)!.latencies, ...drained.at(-1)!.late].sort((a, b) => a - b)
  const answered = sum(stopped.map((s) => s.answered))
  const offered = sum(stopped.map((s) => s.sent))
  const perEvent = (x: number, digits = 1) => (answered === 0 ? 0 : Measure.round(x / answered, digits))
  const [store0, store1] = window.store
  const [ticks0, ticks1] = window.ticks
  return {
    impl: settings.impl,
    store: kind,
    workers: settings.workers,
    tabs: settings.tabs,
    events_per_s: Measure.round(answered / settings.seconds, 1),
    offered_per_s: Measure.round(offered / settings.seconds, 1),
    saturated: answered < 0.95 * offered,
    p50_ms: Measure.round(Measure.percentile(latencies, 50)),
    p99_ms: Measure.round(Measure.percentile(latencies, 99)),
    p999_ms: Measure.round(Measure.percentile(latencies, 99.9)),
    api_p99_ms: Measure.round(Measure.percentile(apiLatencies, 99)),
    worker_cpu_us_per_event: perEvent(window.workerCpuUs),
    redis_cpu_us_per_event: perEvent((store1.cpuS - store0.cpuS) * 1e6),
    redis_commands_per_event: perEvent(store1.commands - store0.commands, 2),
    heap_per_tab_kb: Measure.round(window.heapPerTabBytes / 1024),
    machine_cpu_pct: Measure.round((100 * (ticks1.busy - ticks0.busy)) / (ticks1.total - ticks0.total), 1),
    lost: window.lost,
    doubled: window.doubled,
    unknown: window.unknown,
    unanswered: sum(drained.map((d) => d.pending))
  }
}

/** Run `settings.impl` in its cell: its row, and the store's commands in the window (`name calls, …`). */
export const run = (settings: Settings) =>
  Effect.scoped(
    Effect.gen(function* () {
      const store = yield* Measure.startStore(settings.cluster)
      const { ports, workers } = yield* startWorkersRetrying(settings, store)
      const heapBefore = yield* heap(workers)
      const { load, drain, final, close } = yield* startLoad(settings, ports)
      yield* load(settings.warmup, false)
      yield* drain
      // The tabs connected and idle: what they cost the workers' heap.
      const heapIdle = yield* heap(workers)

      const store0 = yield* Measure.storeStats(store)
      const cpu0 = yield* cpu(workers)
      const ticks0 = yield* Measure.machineTicks
      const stopped = yield* load(settings.seconds, true)
      const cpu1 = yield* cpu(workers)
      const ticks1 = yield* Measure.machineTicks
      const store1 = yield* Measure.storeStats(store)
      const drained = yield* drain
      const { lost, doubled, unknown } = yield* final
      yield* close
      // A worker writes its CPU profile as it exits.
      if (settings.profileDir !== undefined) {
        yield* Effect.forEach(workers, (worker) => worker.stop, { concurrency: "unbounded" })
      }
      const row = rowOf(settings, store.kind, {
        stopped,
        drained,
        workerCpuUs: cpu1 - cpu0,
        store: [store0, store1],
        ticks: [ticks0, ticks1],
        heapPerTabBytes: (heapIdle - heapBefore) / settings.tabs,
        lost,
        doubled,
        unknown
      })
      return { row, commands: Measure.commandsBetween(store0, store1) }
    })
  )
