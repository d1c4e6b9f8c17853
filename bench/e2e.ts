/**
 * End to end, the scenario of Reflex's published table: the counter app in production
 * shape (cluster workers, Redis, oplock on, default knobs), one tab's WebSocket sending
 * 300 pipelined `bump` events while 100 `POST /api/bump` calls for the same tab go out on
 * fresh connections (so they spread over the workers), with 1, 2 and 4 concurrent API
 * callers, for 2 and 4 workers.
 *
 * Per cell (workers × callers), over `--runs` runs (default 6):
 * - `stalled_runs`: runs in which an API call took more than 500 ms;
 * - `p99_ms`, `p50_ms`: the 99th and 50th percentiles of the API calls' time (request sent
 *   to answer read);
 * - `exact_runs`: runs whose final count is exactly 400 and whose socket's last update
 *   equals it;
 * - `floor_p99_ms`, `floor_p50_ms`: the app's floor in that cell, from as many floor runs,
 *   each alternating with an API run: the same scenario with `GET /healthz` (which
 *   touches no token) in place of the bumps, from the same number of callers, timed the
 *   same way;
 * - `api_over_floor`: `p99_ms` / `floor_p99_ms`, to 2 decimals (`null` without calls);
 * - `machine_floor_p99_ms`, `machine_floor_p50_ms`: the machine's floor in that cell, from
 *   as many runs again, interleaved with the others: the same floor scenario against a
 *   plain Node server under `node:cluster` with the same worker count
 *   (bench/machine-floor.cjs: node:http and ws, the app's socket protocol over a Map, no
 *   Effect, no leasehold), the same socket load and the same callers;
 * - `floor_over_machine`: `floor_p99_ms` / `machine_floor_p99_ms`, to 2 decimals;
 * - `platform_floor_p99_ms`, `platform_floor_p50_ms`, `platform_over_machine`: the same
 *   floor scenario, measured beside the machine's each time, against the example's own
 *   stack without leasehold (bench/events-baseline.ts under `node:cluster`: effect/http's
 *   server and effect/socket's WebSocket, the socket protocol over a Map, the example's write
 *   batching): what the platform alone costs the floor.
 *
 *   npm run bench:e2e -- --json            one JSON array of rows
 *   npm run bench:e2e -- --runs 3          fewer runs per cell
 *   --workers 2 --conc 1,4 --events 0      a subset, or the API calls alone (for diagnosis)
 *   --oplock off                           the same without leases
 *   --warmup-rounds 1                      warm-up rounds before each cell (default 8)
 *
 * Output: [{"workers", "conc", "runs", "stalled_runs", "p99_ms", "exact_runs", "p50_ms",
 * "floor_p50_ms", "floor_p99_ms", "api_over_floor", "machine_floor_p50_ms",
 * "machine_floor_p99_ms", "floor_over_machine", "platform_floor_p50_ms", "platform_floor_p99_ms",
 * "platform_over_machine"}]; on stderr (with --json), a plain single-process Node server's
 * sequential floor before and after, and the floors per cell.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { bump, type Client, connect, freePort, request, startApp } from "../test/app/support.js"
import * as RedisServer from "../test/support/RedisServer.js"

const args = process.argv.slice(2)
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}
const json = args.includes("--json")
const runs = Number(flag("runs") ?? "6")
const workerCounts = (flag("workers") ?? "2,4").split(",").map(Number)
const concurrencies = (flag("conc") ?? "1,2,4").split(",").map(Number)

const events = Number(flag("events") ?? "300")
const calls = Number(flag("calls") ?? "100")
const oplock = flag("oplock") ?? "on"
// Each warm-up round is one API run and one floor run on the app, and one floor run on each
// reference server (the machine's, the platform's): the workers' code is measured
// JIT-compiled, as in a server that has been up for a while (bench:contention warms up
// likewise), and every floor alike.
const warmupRounds = Number(flag("warmup-rounds") ?? "8")
const stallMs = 500

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

const round = (ms: number) => Math.round(ms * 100) / 100

const lastUpdate = (client: Client) => client.frames.filter((frame) => frame.type === "update").at(-1)?.n as number

type App = { readonly url: string; readonly port: number }

/**
 * A fresh tab's socket sends its events at once while `calls` requests go out on fresh
 * connections, `conc` at a time, each timed from sent to answer read.
 */
const underLoad = <A>(app: App, token: string, conc: number, call: Effect.Effect<A>) =>
  Effect.gen(function* () {
    const client = yield* connect(app, token)
    yield* client.waitFor((frame) => frame.type === "state")
    const times: Array<number> = []
    const socketEvents = Effect.forEach(Array.from({ length: events }), () => client.send({ type: "bump", by: 1 }), {
      discard: true
    })
    const timed = Effect.forEach(
      Array.from({ length: calls }),
      () =>
        Effect.map(Effect.timed(call), ([elapsed, result]) => {
          times.push(Duration.toMillis(elapsed))
          return result
        }),
      { concurrency: conc }
    )
    const [, results] = yield* Effect.all([socketEvents, timed], { concurrency: 2 })
    return { client, times, results }
  })

/** Until the socket's last update says `n`; `false` after 10 s. */
const updated = (client: Client, n: number) =>
  client
    .waitFor((frame) => frame.type === "update" && frame.n === n, 10_000)
    .pipe(
      Effect.as(true),
      Effect.catchDefect(() => Effect.succeed(false))
    )

/** One run on a fresh token: the API calls' times and whether the counts came out exact. */
const run = (app: App, conc: number, token: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { client, times, results } = yield* underLoad(
        app,
        token,
        conc,
        Effect.map(bump(app, token), (answer) => answer.status === 200)
      )
      const expected = events + calls
      const arrived = yield* updated(client, expected)
      // Anything still in flight would arrive now, and must not change the last update.
      yield* Effect.sleep(200)
      const final = (yield* request("GET", `${app.url}/api/state?token=${token}`)).body.n as number
      const exact = arrived && results.every(Boolean) && final === expected && lastUpdate(client) === final
      return { times, exact }
    })
  )

/**
 * The app's own floor under the same load: the tab's socket sends its events while the
 * same number of calls, `conc` at a time on fresh connections, ask `GET /healthz`, which
 * touches no token. What the cluster, the HTTP server and the busy workers cost a call
 * before leasehold does anything.
 */
const appFloor = (app: App, conc: number, token: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { client, times } = yield* underLoad(app, token, conc, request("GET", `${app.url}/healthz`))
      if (events > 0) yield* updated(client, events)
      return times
    })
  )

/**
 * The plain server of bench/machine-floor.cjs with `workers` cluster workers, killed with
 * its workers (its own process group) when the scope closes.
 */
const startMachineFloor = (workers: number) =>
  startFloorServer([path.join(import.meta.dirname, "machine-floor.cjs")], { WORKERS: String(workers) })

/**
 * The platform's floor: bench/events-baseline.ts (the example's stack, @effect/platform's
 * HTTP server and WebSocket, a Map, no leasehold) with its writes batched as the example's,
 * under `node:cluster` with `workers` workers.
 */
const startPlatformFloor = (workers: number) =>
  startFloorServer(["--import", "tsx", path.join(import.meta.dirname, "events-baseline.ts")], {
    WORKERS: String(workers),
    HOST: "127.0.0.1",
    BATCH_WRITES: "1"
  })

/** A floor server in its own process group, up once it prints its first line. */
const startFloorServer = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.gen(function* () {
    const port = yield* freePort
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn(process.execPath, args, {
          env: { ...process.env, ...env, PORT: String(port) },
          stdio: ["ignore", "pipe", "inherit"],
          detached: true
        })
      ),
      (child: ChildProcess) =>
        Effect.sync(() => {
          try {
            process.kill(-child.pid!, "SIGKILL")
          } catch {
            child.kill("SIGKILL")
          }
        })
    )
    yield* Effect.callback<void>((resume) => {
      child.stdout!.once("data", () => resume(Effect.void))
    })
    return { port, url: `http://127.0.0.1:${port}` } satisfies App
  })

const cell = (workers: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const machine = yield* startMachineFloor(workers)
      const platform = yield* startPlatformFloor(workers)
      for (let i = 0; i < warmupRounds; i++) {
        yield* appFloor(machine, 4, `warmup-machine-${i}`)
        yield* appFloor(platform, 4, `warmup-platform-${i}`)
      }
      const server = yield* RedisServer.start()
      const app = yield* startApp({
        env: {
          LEASEHOLD_REDIS_URL: server.url,
          LEASEHOLD_OPLOCK: String(oplock === "on"),
          WORKERS: String(workers),
          NODE_ENV: "production"
        }
      })
      // Warm the workers (JIT, connections) on tokens of their own, for both kinds of call.
      for (let i = 0; i < warmupRounds; i++) {
        yield* run(app, 4, `warmup-${i}`)
        yield* appFloor(app, 4, `warmup-floor-${i}`)
      }
      const rows = []
      for (const conc of concurrencies) {
        const all: Array<number> = []
        const floorTimes: Array<number> = []
        const machineTimes: Array<number> = []
        const platformTimes: Array<number> = []
        let stalled = 0
        let exact = 0
        for (let i = 0; i < runs; i++) {
          // A floor run beside each API run, first every other time, so that a drift in the
          // machine's load falls on both alike.
          const measureFloor = Effect.map(appFloor(app, conc, `floor-${workers}-${conc}-${i}`), (times) => {
            floorTimes.push(...times)
          })
          // the two reference floors, one after the other
          const measureReferences = Effect.andThen(
            Effect.map(appFloor(machine, conc, `machine-${workers}-${conc}-${i}`), (times) => {
              machineTimes.push(...times)
            }),
            Effect.map(appFloor(platform, conc, `platform-${workers}-${conc}-${i}`), (times) => {
              platformTimes.push(...times)
            })
          )
          if (i % 2 === 0) yield* measureFloor
          else yield* measureReferences
          const result = yield* run(app, conc, `bench-${workers}-${conc}-${i}`)
          all.push(...result.times)
          if (result.times.some((ms) => ms > stallMs)) stalled++
          if (result.exact) exact++
          if (i % 2 === 1) yield* measureFloor
          else yield* measureReferences
        }
        all.sort((a, b) => a - b)
        floorTimes.sort((a, b) => a - b)
        machineTimes.sort((a, b) => a - b)
        platformTimes.sort((a, b) => a - b)
        const p99 = percentile(all, 99)
        const floorP99 = percentile(floorTimes, 99)
        const machineP99 = percentile(machineTimes, 99)
        const platformP99 = percentile(platformTimes, 99)
        const row = {
          workers,
          conc,
          runs,
          stalled_runs: stalled,
          p99_ms: round(p99),
          exact_runs: exact,
          p50_ms: round(percentile(all, 50)),
          floor_p50_ms: round(percentile(floorTimes, 50)),
          floor_p99_ms: round(floorP99),
          api_over_floor: floorP99 > 0 ? round(p99 / floorP99) : null,
          machine_floor_p50_ms: round(percentile(machineTimes, 50)),
          machine_floor_p99_ms: round(machineP99),
          floor_over_machine: machineP99 > 0 ? round(floorP99 / machineP99) : null,
          platform_floor_p50_ms: round(percentile(platformTimes, 50)),
          platform_floor_p99_ms: round(platformP99),
          platform_over_machine: machineP99 > 0 ? round(platformP99 / machineP99) : null
        }
        note(
          `app floor (${workers} workers, ${conc} caller${conc === 1 ? "" : "s"}): GET /healthz during the socket's events: ` +
            `p50 ${row.floor_p50_ms} ms, p99 ${row.floor_p99_ms} ms, max ${round(floorTimes.at(-1) ?? 0)} ms; ` +
            `machine floor (plain node:cluster server, same load): p50 ${row.machine_floor_p50_ms} ms, ` +
            `p99 ${row.machine_floor_p99_ms} ms (app floor ${row.floor_over_machine}x); ` +
            `platform floor (the example's stack with a Map, no leasehold, same workers and load): ` +
            `p50 ${row.platform_floor_p50_ms} ms, p99 ${row.platform_floor_p99_ms} ms (${row.platform_over_machine}x the machine's)`
        )
        if (!json) {
          console.log(
            `${workers} workers, ${conc} API callers: ${stalled}/${runs} runs stalled, p99 ${row.p99_ms} ms, ` +
              `exact ${exact}/${runs} (p50 ${row.p50_ms} ms, max ${round(all.at(-1) ?? 0)} ms); ` +
              `p99 ${row.api_over_floor}x the app's floor`
          )
        }
        rows.push(row)
      }
      yield* app.kill("SIGTERM")
      yield* app.exited
      return rows
    })
  )

/**
 * The machine's floor: the same fresh-connection POSTs, sequential, to a plain Node HTTP
 * server in its own process that answers at once. No app can have a lower p99 here.
 */
const floor = Effect.scoped(
  Effect.gen(function* () {
    const port = yield* freePort
    const script = `require("http").createServer((q, s) => { q.resume(); s.end("{}") }).listen(${port}, "127.0.0.1", () => console.log("up"))`
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] })),
      (child) => Effect.sync(() => child.kill("SIGKILL"))
    )
    yield* Effect.callback<void>((resume) => {
      child.stdout!.once("data", () => resume(Effect.void))
    })
    const times: Array<number> = []
    for (let i = 0; i < 600; i++) {
      const [elapsed] = yield* Effect.timed(request("POST", `http://127.0.0.1:${port}/`))
      times.push(Duration.toMillis(elapsed))
    }
    times.sort((a, b) => a - b)
    return { p50: round(percentile(times, 50)), p99: round(percentile(times, 99)) }
  })
)

// On stderr in --json mode, so that stdout stays one JSON array.
const note = (line: string) => (json ? console.error(line) : console.log(line))

const reportFloor = (when: string) =>
  Effect.map(floor, (base) =>
    note(`floor (${when}): a plain Node HTTP server, fresh connections: p50 ${base.p50} ms, p99 ${base.p99} ms`)
  )

const program = Effect.gen(function* () {
  yield* reportFloor("before")
  const rows = []
  for (const workers of workerCounts) rows.push(...(yield* cell(workers)))
  yield* reportFloor("after")
  if (json) console.log(JSON.stringify(rows))
})

NodeRuntime.runMain(program)
