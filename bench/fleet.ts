/**
 * A fleet: thousands of tabs spread over the workers, each sending events at a person's
 * pace with bursts, while API calls from elsewhere touch random tabs; the same load on
 * leasehold and on three baselines built on the same HTTP and WebSocket stack, one after the
 * other in the same run.
 *
 * The load (bench/fleet/generator.ts, bench/fleet/caller.ts, processes of their own, the same
 * for every implementation): W worker processes (`--workers`, default 2 and 4), each on its
 * own port, on one fresh redis-server (or, with `--cluster`, a fresh 3-master Cluster) per
 * implementation and cell; T tabs (`--tabs`, default 1,000 and 4,000; `--large` adds
 * 10,000), each a WebSocket on a worker picked at random, sending `bump` events as a Poisson
 * process at 1 per second plus a burst of 10 at a random moment of every 20 s; one caller
 * sending `POST /api/bump` for a random tab through a random worker, 100 per second. The
 * load is open: nothing waits for an answer before the next send, and it is never lowered
 * for one implementation. `--warmup` seconds (default 15) of it, then the tabs idle (the
 * heap is read), then `--seconds` (default 60) measured.
 *
 * The implementations (`--impl`, default all):
 * - `leasehold`: the counter example (examples/counter/main.ts) on the library's socket
 *   session, oplock on, `LEASEHOLD_LEASE_DURABILITY=batch` (each event answered after the
 *   group commit that stored it);
 * - `bare`, `bare-durable`, `reflex-style`: bench/fleet/baseline.ts, the same stack with only
 *   the state module differing (bench/fleet/designs.ts: a `Map` in the socket's worker; the
 *   same with one `SET` per event; Reflex's lock, `GET`, `SET` and release per event), and
 *   how an API call reaches the tab's socket documented there.
 * Each worker runs under bench/fleet/worker.ts, which answers the driver's heap and CPU
 * questions over IPC (nothing of it in the library or the example).
 *
 * Rows, one per implementation and cell:
 * - `impl`, `store` (`redis`, `cluster`), `workers`, `tabs`;
 * - `events_per_s`: socket events and API calls answered in the window, per second;
 *   `offered_per_s`: those sent in it; `saturated`: answered under 95 % of offered (its
 *   latency ratios are not targets);
 * - `p50_ms`, `p99_ms`, `p999_ms`: socket events sent in the window, from the frame's send
 *   to its answer (matched by `seq`); `api_p99_ms`: the API calls', apart;
 * - `worker_cpu_us_per_event`: the CPU time of every worker process in the window per event
 *   answered (API calls included); `redis_cpu_us_per_event`, `redis_commands_per_event`: the
 *   same of the store (`INFO cpu`, `INFO commandstats`, every master, before and after);
 * - `heap_per_tab_kb`: the workers' heap after full collections with the tabs connected and
 *   idle after the warm-up, less the same before they connected, per tab;
 * - `machine_cpu_pct`: the whole machine's CPU busy in the window (every core): near 100,
 *   the machine and not the implementation bounds the cell;
 * - `lost`, `doubled`: over the tabs, each tab's final counter (read from its worker after
 *   the drain) below the events and API calls applied for it by their answers (an update, a
 *   `duplicate`, an error saying `applied: true`; an API call's 200), or above those and the
 *   ones of unknown outcome; `unknown`: those (an error saying `applied: "unknown"`, a
 *   `forgotten`, an API call answered otherwise than 200: the load does not resend);
 *   `unanswered`: frames and calls still unanswered 30 s after the load stopped.
 *
 * The targets, checked in each cell where neither side is saturated and reported on stderr:
 * leasehold's p99 at most 2x bare's; its worker CPU per event at most 1.5x bare-durable's; its
 * Redis CPU per event at most 1/3 of reflex-style's; lost = doubled = 0 everywhere; and its
 * worker CPU per event at 4,000 tabs at most 1.2x its figure at 1,000. A target missed is
 * printed with its figures; `--profile DIR` writes each worker's CPU profile (`--cpu-prof`)
 * there, to see what bounds it.
 *
 *   npm run bench:fleet -- --json                      one JSON array of rows
 *   npm run bench:fleet -- --workers 2 --tabs 200 --seconds 10 --warmup 5
 *   --impl leasehold,bare   --cluster   --large   --profile /tmp/fleet-prof
 *   --commands                                          each row's store commands in the window, on stderr
 */
import * as fs from "node:fs"
import * as path from "node:path"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import { flag, has, json } from "./args.js"
import { impls, type Row, run } from "./fleet/run.js"

const list = (name: string, fallback: string) => (flag(name) ?? fallback).split(",").filter((part) => part !== "")
const workerCounts = list("workers", "2,4").map(Number)
const tabCounts = [...list("tabs", "1000,4000").map(Number), ...(has("large") ? [10_000] : [])]
const chosen = list("impl", impls.join(","))
const seconds = Number(flag("seconds") ?? "60")
const warmup = Number(flag("warmup") ?? "15")
const cluster = has("cluster")
const profileRoot = flag("profile")
const showCommands = has("commands")

for (const impl of chosen) {
  if (!(impls as ReadonlyArray<string>).includes(impl))
    throw new Error(`--impl: ${impl} is none of ${impls.join(", ")}`)
}

// On stderr in --json mode, so that stdout stays one JSON array.
const note = (line: string) => (json ? console.error(line) : console.log(line))

const find = (rows: ReadonlyArray<Row>, impl: string) => rows.find((row) => row.impl === impl)

/** The targets of one cell: a line per target checked. */
const targets = (rows: ReadonlyArray<Row>): ReadonlyArray<string> => {
  const lines: Array<string> = []
  for (const row of rows) {
    if (row.lost !== 0 || row.doubled !== 0) lines.push(`MISSED ${row.impl}: lost ${row.lost}, doubled ${row.doubled}`)
  }
  const leasehold = find(rows, "leasehold")
  if (leasehold === undefined) return lines
  const ratio = (name: string, field: keyof Row, bound: number, what: string) => {
    const other = find(rows, name)
    if (other === undefined) return
    if (leasehold.saturated || other.saturated) {
      lines.push(`${what}: not a target (${leasehold.saturated ? "leasehold" : name} saturated)`)
      return
    }
    const mine = leasehold[field] as number
    const theirs = other[field] as number
    const x = theirs === 0 ? Number.POSITIVE_INFINITY : mine / theirs
    lines.push(
      `${x <= bound ? "met" : "MISSED"} ${what}: leasehold ${mine}, ${name} ${theirs} (${x.toFixed(2)}x, bound ${bound.toFixed(2)}x)`
    )
  }
  ratio("bare", "p99_ms", 2, "p99 <= 2x bare's")
  ratio("bare-durable", "worker_cpu_us_per_event", 1.5, "worker CPU per event <= 1.5x bare-durable's")
  ratio("reflex-style", "redis_cpu_us_per_event", 1 / 3, "Redis CPU per event <= 1/3 of reflex-style's")
  return lines
}

/** leasehold's worker CPU per event at 4,000 tabs against 1,000, per worker count. */
const growth = (rows: ReadonlyArray<Row>): ReadonlyArray<string> =>
  workerCounts.flatMap((workers) => {
    const at = (tabs: number) =>
      rows.find((row) => row.impl === "leasehold" && row.workers === workers && row.tabs === tabs)
    const small = at(1000)
    const large = at(4000)
    if (small === undefined || large === undefined) return []
    if (small.saturated || large.saturated)
      return [`${workers} workers, growth 1,000 -> 4,000 tabs: not a target (saturated)`]
    const x = large.worker_cpu_us_per_event / small.worker_cpu_us_per_event
    return [
      `${x <= 1.2 ? "met" : "MISSED"} ${workers} workers, worker CPU per event 4,000 tabs vs 1,000: ` +
        `${large.worker_cpu_us_per_event} vs ${small.worker_cpu_us_per_event} µs (${x.toFixed(2)}x, bound 1.20x)`
    ]
  })

const describe = (row: Row) =>
  `${row.impl.padEnd(12)} ${row.store} ${row.workers}w ${row.tabs} tabs: ${row.events_per_s}/${row.offered_per_s} ev/s` +
  `${row.saturated ? " SATURATED" : ""}, p50 ${row.p50_ms} p99 ${row.p99_ms} p99.9 ${row.p999_ms} ms, api p99 ${row.api_p99_ms} ms, ` +
  `worker ${row.worker_cpu_us_per_event} µs/ev, redis ${row.redis_cpu_us_per_event} µs/ev ${row.redis_commands_per_event} cmd/ev, ` +
  `heap ${row.heap_per_tab_kb} KB/tab, machine ${row.machine_cpu_pct} %, lost ${row.lost}, doubled ${row.doubled}, unknown ${row.unknown}, unanswered ${row.unanswered}`

const program = Effect.gen(function* () {
  const rows: Array<Row> = []
  for (const workers of workerCounts) {
    for (const tabs of tabCounts) {
      const cell: Array<Row> = []
      for (const impl of chosen as ReadonlyArray<(typeof impls)[number]>) {
        const profileDir =
          profileRoot === undefined ? undefined : path.resolve(profileRoot, `${impl}-${workers}w-${tabs}t`)
        if (profileDir !== undefined) fs.mkdirSync(profileDir, { recursive: true })
        const { row, commands } = yield* run({ impl, cluster, workers, tabs, seconds, warmup, profileDir })
        note(describe(row))
        if (showCommands) note(`  store commands in the window: ${commands}`)
        if (profileDir !== undefined) note(`  profiles: ${profileDir}`)
        cell.push(row)
      }
      for (const line of targets(cell)) note(`  ${workers} workers, ${tabs} tabs: ${line}`)
      rows.push(...cell)
    }
  }
  for (const line of growth(rows)) note(`  ${line}`)
  if (json) console.log(JSON.stringify(rows))
})

NodeRuntime.runMain(program)
