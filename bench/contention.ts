/**
 * One hot token, W worker processes × C fibers, each operation "read the counter, add 1,
 * write it", for leasehold (oplock on and off; with oplock, also with the non-default
 * `leaseDurability: "memory"`, labelled `leasehold-oplock-memory`) and its peers side by side, on one
 * redis-server started for the run.
 *
 *   npm run bench:contention -- --json               one JSON array of rows
 *   npm run bench:contention -- --seconds 5          seconds measured per cell (default 3)
 *   npm run bench:contention -- --warmup 8           seconds of warm-up per cell before (default 8)
 *   npm run bench:contention -- --warmup-ops 10000   ...and on until every worker process did this many
 *                                                    operations, within --warmup-max seconds (default 60)
 *   npm run bench:contention -- --impls poll,leasehold --cells 4x4
 *   npm run bench:contention -- --cluster            on a 3-master Redis Cluster instead
 *   npm run bench:contention -- --replica --acks 0,1 on a primary with one replica; each leasehold
 *                                                    impl once per LEASEHOLD_MIN_REPLICAS_ACK value
 *
 * Row: {"impl", "workers", "conc", "ops_per_s", "p50_ms", "p99_ms", "p999_ms", "max_ms", "stalls", "exact",
 * "cpu_us_per_op", "redis_cpu_us_per_op", "warmup_s"} where the latencies are of whole operations (waiting for the lock
 * included), `stalls` counts operations over 500 ms, `exact` says the stored counter equals
 * the number of operations that reported success, and `cpu_us_per_op` is the CPU time of all
 * the cell's worker processes (Redis not included) divided by the operations done;
 * `redis_cpu_us_per_op` is the CPU time the Redis server (every node of a cluster) used over
 * the cell (`INFO cpu` before the start and after the workers exited) divided by the same, and `p999_ms` the 99.9th
 * percentile of the latencies, `warmup_s` how long the cell's warm-up took. With `--replica` every row has `min_replicas_ack` (the value a
 * leasehold row ran with; `null` for the peers, which never wait for replicas). More rows: {"impl": "ping", "p50_ms"};
 * {"impl": "scripts-floor", "p50_ms"}: the two scripts of an uncontended modification
 * (grant with read, then write with release) sent one after the other straight from ioredis,
 * with nothing around them: what two round trips of this work cost on this machine; and
 * {"impl": "leasehold-uncontended", "p50_ms"} (W = 1, C = 1, oplock off: two round trips).
 * With `--cluster` every implementation talks to the cluster through a cluster client; the
 * hot token lives on one master, and the ping row is measured against that master.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { Redis } from "ioredis"
import { encodeNotice } from "../src/internal/codec.js"
import { makeKeys } from "../src/internal/keys.js"
import { defineAll, invoke, singleServer } from "../src/internal/redis/script.js"
import * as Scripts from "../src/internal/redis/scripts/index.js"
import * as RedisCluster from "../test/support/RedisCluster.js"
import * as RedisServer from "../test/support/RedisServer.js"
import { flag, has, json, percentile } from "./args.js"

const onCluster = has("cluster")
const withReplica = has("replica")
const acks = (flag("acks") ?? "0").split(",").map(Number)
if (acks.some((ack) => !Number.isInteger(ack) || ack < 0) || (acks.some((ack) => ack > 0) && !withReplica)) {
  throw new Error("--acks takes whole numbers, and values above 0 need --replica")
}
if (withReplica && onCluster) throw new Error("--replica and --cluster do not go together")
const seconds = Number(flag("seconds") ?? "3")
// Every implementation runs its loop this long on the hot token before it is measured: the
// JIT compiles the code on the path (leasehold's, with Effect's, is much larger than a
// peer's few ioredis calls, and compiles over the first seconds), and the cell is measured
// in the state a long-running server is in.
const warmupSeconds = Number(flag("warmup") ?? "8")
// ...and on until every worker process did this many operations (at most `--warmup-max`
// seconds in all): a slow cell runs few operations in a fixed time, and its path stays cold.
const warmupOps = Number(flag("warmup-ops") ?? "10000")
const warmupMaxSeconds = Number(flag("warmup-max") ?? "60")
const impls = (
  flag("impls") ?? "leasehold-oplock,leasehold-oplock-memory,leasehold,redis-semaphore,redlock,poll"
).split(",")
const cells = (flag("cells") ?? "1x1,1x4,2x1,2x4,4x1,4x4")
  .split(",")
  .map((cell) => cell.split("x").map(Number) as [number, number])

const root = path.resolve(import.meta.dirname, "..")

interface Report {
  readonly ok: number
  readonly warm_ok: number
  readonly failed: number
  readonly lat: ReadonlyArray<number>
  readonly cpu_ms: number
}

const startWorker = (env: Record<string, string>) => {
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", "bench/contention-worker.ts"], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "inherit"]
  })
  let buffer = ""
  const lines: Array<string> = []
  const waiters: Array<() => void> = []
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    buffer += chunk
    const parts = buffer.split("\n")
    buffer = parts.pop() ?? ""
    lines.push(...parts.filter((line) => line.trim().length > 0))
    for (const wake of waiters.splice(0)) wake()
  })
  // "close", not "exit": the last lines a worker printed may still be on their way at its exit
  let exited = false
  child.once("close", () => {
    exited = true
    for (const wake of waiters.splice(0)) wake()
  })
  const line = (test: (line: string) => boolean) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const found = lines.find(test)
        if (found !== undefined) return resolve(found)
        if (exited) return reject(new Error(`worker exited with ${child.exitCode}`))
        waiters.push(check)
      }
      check()
    })
  return { child, line }
}

/**
 * Where the bench runs: one server, or a cluster; `read` gets a key from the node holding it,
 * `redisCpuSeconds` the CPU time every server of the target has used so far (`INFO cpu`).
 */
interface Target {
  readonly url: string
  readonly pingUrl: string
  readonly read: (key: string) => Promise<string | null>
  readonly redisCpuSeconds: () => Promise<number>
}

/** `used_cpu_sys` + `used_cpu_user` of the servers at `urls`, in seconds. */
const cpuSeconds = async (urls: ReadonlyArray<string>): Promise<number> => {
  let total = 0
  for (const url of urls) {
    const client = new Redis(url)
    const info = await client.info("cpu").finally(() => client.disconnect())
    for (const name of ["used_cpu_sys", "used_cpu_user"]) {
      const match = new RegExp(`^${name}:([0-9.]+)`, "m").exec(info)
      total += match === null ? 0 : Number(match[1])
    }
  }
  return total
}

const single = Effect.map(
  RedisServer.start(),
  (server): Target => ({
    url: server.url,
    pingUrl: server.url,
    read: (key) => Effect.runPromise(Effect.map(RedisServer.getRaw(server, key), Option.getOrNull)),
    redisCpuSeconds: () => cpuSeconds([server.url])
  })
)

/** One server with one replica linked to it; the CPU counted is both servers'. */
const replicated = Effect.gen(function* () {
  const server = yield* RedisServer.start()
  const replica = yield* RedisServer.start({ extraArgs: ["--replicaof", "127.0.0.1", String(server.port)] })
  const deadline = performance.now() + 20_000
  while ((yield* Effect.orDie(replica.info("replication"))).master_link_status !== "up") {
    if (performance.now() > deadline) return yield* Effect.die("the replica did not link to the primary")
    yield* Effect.sleep(50)
  }
  return {
    url: server.url,
    pingUrl: server.url,
    read: (key) => Effect.runPromise(Effect.map(RedisServer.getRaw(server, key), Option.getOrNull)),
    redisCpuSeconds: () => cpuSeconds([server.url, replica.url])
  } satisfies Target
})

const cluster = Effect.gen(function* () {
  const cluster = yield* RedisCluster.start()
  const hotMaster = yield* Effect.orDie(cluster.nodeFor("{hot1}"))
  return {
    url: cluster.url,
    pingUrl: hotMaster.url,
    read: (key) =>
      Effect.runPromise(
        Effect.flatMap(Effect.orDie(cluster.nodeFor(key)), (node) =>
          Effect.map(RedisServer.getRaw(node, key), Option.getOrNull)
        )
      ),
    redisCpuSeconds: () => cpuSeconds(cluster.nodes.map((node) => node.url))
  } satisfies Target
})

const runCell = (
  { read, redisCpuSeconds, url }: Target,
  impl: string,
  workers: number,
  conc: number,
  token: string,
  ack: number | null
) =>
  Effect.promise(async () => {
    const started = Array.from({ length: workers }, () =>
      startWorker({
        IMPL: impl,
        URL: url,
        TOKEN: token,
        CONC: String(conc),
        CLUSTER: onCluster ? "1" : "0",
        LEASEHOLD_MIN_REPLICAS_ACK: String(ack ?? 0)
      })
    )
    await Promise.all(started.map((w) => w.line((l) => l === "ready")))
    for (const w of started) {
      w.child.stdin!.write(
        `warm ${warmupSeconds * 1000} ${warmupOps} ${Math.max(warmupSeconds, warmupMaxSeconds) * 1000}\n`
      )
    }
    const warmedMs = await Promise.all(
      started.map((w) => w.line((l) => l.startsWith("warmed")).then((l) => Number(l.split(" ")[1])))
    )
    const redisBefore = await redisCpuSeconds()
    const t0 = performance.now()
    for (const w of started) w.child.stdin!.write(`go ${seconds * 1000}\n`)
    const reports = await Promise.all(
      started.map((w) => w.line((l) => l.startsWith("{")).then((l) => JSON.parse(l) as Report))
    )
    const elapsed = (performance.now() - t0) / 1000
    await Promise.all(
      started.map(
        (w) => new Promise((resolve) => (w.child.exitCode !== null ? resolve(null) : w.child.once("exit", resolve)))
      )
    )
    // after the workers exit: their shutdown (the last release, closing connections) is part of the cell
    const redisUsed = (await redisCpuSeconds()) - redisBefore
    const raw = await read(`leasehold:{${token}}:s:counter`)
    const stored = raw === null ? 0 : (JSON.parse(raw) as { n: number }).n
    const ok = reports.reduce((sum, r) => sum + r.ok, 0)
    const warmOk = reports.reduce((sum, r) => sum + r.warm_ok, 0)
    const lat = reports.flatMap((r) => r.lat).sort((a, b) => a - b)
    return {
      impl,
      workers,
      conc,
      ...(withReplica ? { min_replicas_ack: ack } : {}),
      ops_per_s: Math.round(ok / Math.max(elapsed, seconds)),
      p50_ms: percentile(lat, 50),
      p99_ms: percentile(lat, 99),
      p999_ms: percentile(lat, 99.9),
      max_ms: lat.length === 0 ? 0 : lat[lat.length - 1]!,
      stalls: lat.filter((l) => l > 500).length,
      exact: stored === ok + warmOk && reports.every((r) => r.failed === 0),
      cpu_us_per_op: Math.round((reports.reduce((sum, r) => sum + r.cpu_ms, 0) * 1000) / Math.max(1, ok)),
      redis_cpu_us_per_op: Math.round((redisUsed * 1_000_000) / Math.max(1, ok)),
      warmup_s: Math.round(Math.max(...warmedMs) / 100) / 10
    }
  })

const pingP50 = (url: string) =>
  Effect.promise(async () => {
    const client = new Redis(url)
    for (let i = 0; i < 200; i++) await client.ping()
    const lat: Array<number> = []
    for (let i = 0; i < 2000; i++) {
      const t = performance.now()
      await client.ping()
      lat.push(performance.now() - t)
    }
    await client.quit()
    lat.sort((a, b) => a - b)
    return Math.round(percentile(lat, 50) * 1000) / 1000
  })

/**
 * The two scripts of an uncontended modification, back to back, with the arguments RedisStore
 * passes (single server, default expirations): the queued grant with its read, then the queued
 * commit-and-release.
 */
const scriptsFloorP50 = (url: string) =>
  Effect.promise(async () => {
    const client = new Redis(url)
    defineAll(client, Scripts.all, singleServer)
    const keys = makeKeys("leasehold")
    const token = "floor"
    const instanceId = "floor"
    const queueKeys = {
      lock: keys.lock(token),
      fence: keys.fence(token),
      queue: keys.queue(token),
      deadlines: keys.queueDeadlines(token),
      ids: keys.queueIds(token)
    }
    const expirations = { lockMs: 10_000, tokenMs: 3_600_000, handoffMs: 1_000 }
    // a single server's notice channels: one per worker, its id appended by the scripts
    const notices = { noticePrefix: keys.workerNotices(""), granted: encodeNotice(token, { _tag: "Granted" }) }
    const once = async (i: number) => {
      const lockId = `${instanceId}:${i}`
      const grant = Scripts.acquireQueued.decode(
        await invoke(client, Scripts.acquireQueued, {
          keys: queueKeys,
          restKeys: [keys.slice(token, "counter")],
          args: {
            lockId,
            ...expirations,
            instanceId,
            claim: "",
            ...notices,
            contended: encodeNotice(token, { _tag: "Contended" })
          }
        })
      )
      const value = grant?._tag === "Acquired" ? grant.values[0] : null
      const n = typeof value === "string" ? (JSON.parse(value) as { n: number }).n : 0
      await invoke(client, Scripts.commitAndReleaseQueued, {
        keys: queueKeys,
        restKeys: [keys.slice(token, "counter")],
        args: { lockId, claim: "", ...expirations, instanceId, requeue: "0", queueAs: "", ...notices },
        restArgs: [JSON.stringify({ n: n + 1 })]
      })
    }
    for (let i = 0; i < 200; i++) await once(i)
    const lat: Array<number> = []
    for (let i = 0; i < 2000; i++) {
      const t = performance.now()
      await once(i)
      lat.push(performance.now() - t)
    }
    await client.quit()
    lat.sort((a, b) => a - b)
    return Math.round(percentile(lat, 50) * 1000) / 1000
  })

const program = Effect.gen(function* () {
  const target = yield* onCluster ? cluster : withReplica ? replicated : single
  const rows: Array<Record<string, unknown>> = []
  const ping = yield* pingP50(target.pingUrl)
  rows.push({ impl: "ping", p50_ms: ping })
  // On a cluster the floor's token may live on another master than the one pinged: not measured there.
  const floor = onCluster ? null : yield* scriptsFloorP50(target.pingUrl)
  if (floor !== null) rows.push({ impl: "scripts-floor", p50_ms: floor })
  let n = 0
  for (const [workers, conc] of cells) {
    for (const impl of impls) {
      for (const ack of impl.startsWith("leasehold") ? acks : [null]) {
        const row = yield* runCell(target, impl, workers, conc, `hot${++n}`, ack)
        rows.push(row)
        if (!json) {
          console.log(
            [
              row.impl.padEnd(17),
              ...(withReplica ? [`ack ${ack ?? "-"}`.padEnd(6)] : []),
              `${workers}x${conc}`.padEnd(5),
              `${row.ops_per_s} ops/s`.padStart(12),
              `p50 ${row.p50_ms}`.padStart(10),
              `p99 ${row.p99_ms}`.padStart(10),
              `p99.9 ${row.p999_ms}`.padStart(12),
              `max ${row.max_ms}`.padStart(11),
              `stalls ${row.stalls}`.padStart(10),
              `cpu/op ${row.cpu_us_per_op}us`.padStart(14),
              `redis/op ${row.redis_cpu_us_per_op}us`.padStart(16),
              row.exact ? "exact" : "NOT EXACT"
            ].join("  ")
          )
        }
      }
    }
  }
  if (impls.includes("leasehold")) {
    const uncontended = rows.find(
      (r) => r.impl === "leasehold" && r.workers === 1 && r.conc === 1 && (r.min_replicas_ack ?? 0) === 0
    )
    if (uncontended !== undefined)
      rows.push({ impl: "leasehold-uncontended", p50_ms: uncontended.p50_ms, ping_p50_ms: ping, floor_p50_ms: floor })
  }
  if (json) console.log(JSON.stringify(rows))
  else console.log(`ping p50 ${ping} ms, scripts-floor p50 ${floor} ms`)
})

NodeRuntime.runMain(Effect.scoped(program))
