/**
 * The cost of one socket event, end to end: the example app as `npm start` runs it (one
 * process, the embedded store with a data directory, default knobs), one tab's WebSocket
 * sending `--events` pipelined `bump` frames at once, timed from the first frame sent to
 * the update carrying the last count. The server process's CPU (user + system, from
 * `/proc/<pid>/stat`, garbage collection included) over that time is divided by the
 * events.
 *
 * The baseline is the same load against bench/events-baseline.ts: the same stack
 * (effect/http and effect/socket on Node), the same protocol, a read-increment-write
 * on an in-process Map, no leasehold. The `redis` row is the example on Redis (a
 * redis-server of its own on a free port), when `redis-server` is on the PATH.
 *
 * The example holds its socket's writes back to the end of each turn of the event loop, so
 * that the frames of a turn leave in one write (the socket session's upgrade, src/internal/socket/upgrade.ts); the baseline
 * does not. `batched_baseline_*` is the baseline with that same change
 * (`BATCH_WRITES=1`): the stack's cost per event with the socket path the example has, the
 * figure to compare with for what leasehold itself costs.
 *
 *   npm run bench:events -- --json          one JSON array of rows
 *   npm run bench:events -- --events 2000   events per measurement (default 5000)
 *   --rounds 3                              measurements per server; the best is kept
 *   --stores memory,redis                   which rows (default both)
 *   --oplock on                             the app with LEASEHOLD_OPLOCK=true
 *
 * Output: [{"store", "events_per_s", "cpu_us_per_event", "baseline_events_per_s",
 * "baseline_cpu_us_per_event", "of_baseline", "batched_baseline_events_per_s",
 * "batched_baseline_cpu_us_per_event", "of_batched_baseline"}], `of_baseline` being
 * events_per_s / baseline_events_per_s. Each figure is the best of `--rounds` measurements on a fresh
 * tab each (other work on the machine only adds), after a warm-up of the same size.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import WebSocket from "ws"
import { type App, startApp } from "../test/app/support.js"
import * as RedisServer from "../test/support/RedisServer.js"
import { flag, json } from "./args.js"

const events = Number(flag("events") ?? "5000")
const rounds = Number(flag("rounds") ?? "3")
const stores = (flag("stores") ?? "memory,redis").split(",")
const oplock = flag("oplock") ?? "off"

const ticks = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100

/** The process's CPU time so far (user + system), in µs. */
const cpuOf = (pid: number): number => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  // Fields after the command name (which may hold spaces) start at the 3rd: utime is the 14th.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / ticks
}

interface Measure {
  readonly eventsPerS: number
  readonly cpuUsPerEvent: number
}

/**
 * One tab: open its socket, wait for its initial state, then send every event at once and
 * wait for the update with the last count (a fresh tab starts at 0).
 */
const tab = (app: App, token: string): Promise<Measure> =>
  new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://127.0.0.1:${app.port}/ws?token=${token}`)
    let start = 0
    let cpuBefore = 0
    const timer = setTimeout(() => {
      socket.terminate()
      reject(new Error(`${token}: no update with n=${events} within 120 s`))
    }, 120_000)
    socket.on("error", reject)
    socket.on("message", (data) => {
      const frame = JSON.parse(data.toString()) as { type: string; n?: number; message?: string }
      if (frame.type === "error") console.error(`${token}: error frame: ${frame.message}`)
      if (frame.type === "state") {
        cpuBefore = cpuOf(app.pid)
        start = performance.now()
        const bump = JSON.stringify({ type: "bump", by: 1 })
        for (let i = 0; i < events; i++) socket.send(bump)
      } else if (frame.type === "update" && frame.n === events) {
        const wall = performance.now() - start
        const cpu = cpuOf(app.pid) - cpuBefore
        clearTimeout(timer)
        socket.once("close", () => resolve({ eventsPerS: (events * 1000) / wall, cpuUsPerEvent: cpu / events }))
        socket.close()
      }
    })
  })

/** A warm-up tab, then the best of `rounds` tabs (highest rate, lowest CPU). */
const measure = (app: App, name: string) =>
  Effect.promise(async () => {
    await tab(app, `warmup-${name}`)
    let eventsPerS = 0
    let cpuUsPerEvent = Number.POSITIVE_INFINITY
    for (let round = 0; round < rounds; round++) {
      const result = await tab(app, `bench-${name}-${round}`)
      note(
        `${name}, round ${round + 1}: ${Math.round(result.eventsPerS)} events/s, ${result.cpuUsPerEvent.toFixed(1)} µs CPU per event`
      )
      eventsPerS = Math.max(eventsPerS, result.eventsPerS)
      cpuUsPerEvent = Math.min(cpuUsPerEvent, result.cpuUsPerEvent)
    }
    return { eventsPerS, cpuUsPerEvent }
  })

const stopped = (app: App) => Effect.andThen(app.kill("SIGTERM"), app.exited)

const baseline = (batched: boolean) =>
  Effect.scoped(
    Effect.gen(function* () {
      const app = yield* startApp({
        entry: "bench/events-baseline.ts",
        ready: /baseline: listening/,
        env: { BATCH_WRITES: batched ? "1" : "0" }
      })
      const result = yield* measure(app, batched ? "batched baseline" : "baseline")
      yield* stopped(app)
      return result
    })
  )

/** The example as `npm start` runs it: one process, a data directory of its own (npm start's `.leasehold`). */
const example = (store: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-bench-events-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dataDir, { recursive: true, force: true })))
      const redis = store === "redis" ? (yield* RedisServer.start()).url : undefined
      const app = yield* startApp({
        env: { LEASEHOLD_DATA_DIR: dataDir, LEASEHOLD_REDIS_URL: redis, LEASEHOLD_OPLOCK: String(oplock === "on") }
      })
      const result = yield* measure(app, store)
      yield* stopped(app)
      return result
    })
  )

const hasRedis = (): boolean => {
  try {
    execFileSync("redis-server", ["--version"], { stdio: "ignore" })
    return true
  } catch {
    return false
  }
}

// On stderr in --json mode, so that stdout stays one JSON array.
const note = (line: string) => (json ? console.error(line) : console.log(line))

const round1 = (x: number) => Math.round(x * 10) / 10

const program = Effect.gen(function* () {
  const base = yield* baseline(false)
  const batched = yield* baseline(true)
  const rows = []
  for (const store of stores) {
    if (store === "redis" && !hasRedis()) {
      note("redis: no redis-server on the PATH, row skipped")
      continue
    }
    const result = yield* example(store)
    rows.push({
      store,
      events_per_s: Math.round(result.eventsPerS),
      cpu_us_per_event: round1(result.cpuUsPerEvent),
      baseline_events_per_s: Math.round(base.eventsPerS),
      baseline_cpu_us_per_event: round1(base.cpuUsPerEvent),
      of_baseline: Math.round((result.eventsPerS / base.eventsPerS) * 100) / 100,
      batched_baseline_events_per_s: Math.round(batched.eventsPerS),
      batched_baseline_cpu_us_per_event: round1(batched.cpuUsPerEvent),
      of_batched_baseline: Math.round((result.eventsPerS / batched.eventsPerS) * 100) / 100
    })
  }
  if (json) console.log(JSON.stringify(rows))
  else
    for (const row of rows)
      console.log(
        `${row.store}: ${row.events_per_s} events/s, ${row.cpu_us_per_event} µs CPU per event; ` +
          `baseline ${row.baseline_events_per_s} events/s, ${row.baseline_cpu_us_per_event} µs; ${row.of_baseline}x the baseline's rate; ` +
          `batched baseline ${row.batched_baseline_events_per_s} events/s, ${row.batched_baseline_cpu_us_per_event} µs; ${row.of_batched_baseline}x`
      )
})

NodeRuntime.runMain(program)
