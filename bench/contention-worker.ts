/**
 * One worker process of `bench/contention.ts`: C concurrent fibers doing
 * "read the counter, add 1, write it" on one hot token with one implementation, until the
 * parent's deadline, warmed up first (see `main`). Prints one JSON line `{"ok": <measured
 * successes>, "warm_ok": <successes while warming up>, "failed": <failures>, "lat": [<ms>, …],
 * "cpu_ms": <process CPU time while measured>}`.
 *
 * IMPL: leasehold-oplock | leasehold-oplock-memory | leasehold | redis-semaphore | redlock | poll
 * (`leasehold-oplock-memory`: leases with `leaseDurability: "memory"`, acknowledged before
 * they are written, as Reflex does; not crash-safe, shown for the analysis of the bound)
 * CLUSTER: "1" when URL lists the seed nodes of a Redis Cluster.
 */
import { randomUUID } from "node:crypto"
import { performance } from "node:perf_hooks"
import * as readline from "node:readline"
import { setTimeout as sleep } from "node:timers/promises"
import { Redlock } from "@sesamecare-oss/redlock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import { Cluster, Redis } from "ioredis"
import { Mutex } from "redis-semaphore"
import * as StateManager from "../src/StateManager.js"
import * as Worker from "../src/Worker.js"

const impl = process.env.IMPL ?? "leasehold"
const url = process.env.URL ?? "redis://127.0.0.1:6379"
const token = process.env.TOKEN ?? "hot"
const conc = Number(process.env.CONC ?? "1")
const onCluster = process.env.CLUSTER === "1"

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
/** The peers keep the same state in the same key as leasehold does. */
const stateKey = `leasehold:{${token}}:s:counter`
const lockKey = `bench:{${token}}:lock`

type Op = () => Promise<void>

const readIncrementWrite = async (client: Redis | Cluster) => {
  const raw = await client.get(stateKey)
  const n = raw === null ? 0 : (JSON.parse(raw) as { n: number }).n
  await client.set(stateKey, JSON.stringify({ n: n + 1 }))
}

const makeOp = async (): Promise<{ op: Op; close: () => Promise<void> }> => {
  if (impl === "leasehold" || impl === "leasehold-oplock" || impl === "leasehold-oplock-memory") {
    process.env.LEASEHOLD_REDIS_URL = url
    process.env.LEASEHOLD_OPLOCK = impl === "leasehold" ? "false" : "true"
    process.env.LEASEHOLD_LEASE_DURABILITY = impl === "leasehold-oplock-memory" ? "memory" : "batch"
    process.env.LEASEHOLD_REDIS_CLUSTER = onCluster ? "true" : "false"
    // The log level is set once for the runtime: set per operation, it costs a change of the
    // fiber's context every time, which is the harness's cost, not the library's.
    const runtime = ManagedRuntime.make(
      Layer.merge(Worker.layerStateFromEnv, Layer.succeed(References.MinimumLogLevel, "Error"))
    )
    const modify = Effect.flatMap(StateManager.StateManager, (states) =>
      states.modify(token, Counter, (s) => [null, { n: s.n + 1 }])
    )
    await runtime.runPromise(Effect.void)
    return {
      op: async () => {
        const exit = await runtime.runPromiseExit(modify)
        if (Exit.isFailure(exit)) throw new Error(String(exit.cause))
      },
      close: () => runtime.dispose()
    }
  }
  // The bench's cluster URL is `redis://host:port,host:port,...`, without credentials.
  const seeds = url
    .slice(url.indexOf("//") + 2)
    .split(",")
    .map((address) => ({ host: address.split(":")[0]!, port: Number(address.split(":")[1]) }))
  const client = onCluster ? new Cluster(seeds) : new Redis(url)
  const close = async () => {
    await client.quit()
  }
  if (impl === "redis-semaphore") {
    return {
      op: async () => {
        const mutex = new Mutex(client, lockKey, { acquireTimeout: 60_000 })
        await mutex.acquire()
        try {
          await readIncrementWrite(client)
        } finally {
          await mutex.release()
        }
      },
      close
    }
  }
  if (impl === "redlock") {
    const redlock = new Redlock([client], { retryCount: -1 })
    redlock.on("error", () => undefined)
    return {
      op: async () => {
        const lock = await redlock.acquire([lockKey], 10_000)
        try {
          await readIncrementWrite(client)
        } finally {
          await lock.release()
        }
      },
      close
    }
  }
  if (impl === "poll") {
    const release = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`
    return {
      op: async () => {
        const id = randomUUID()
        while ((await client.set(lockKey, id, "PX", 10_000, "NX")) !== "OK") await sleep(5)
        try {
          await readIncrementWrite(client)
        } finally {
          await client.eval(release, 1, lockKey, id)
        }
      },
      close
    }
  }
  throw new Error(`unknown IMPL ${impl}`)
}

/**
 * The protocol with the parent: `ready`; then `warm`: the fibers start their loop, and
 * after `warm <ms>` the worker prints `warmed` and goes on looping (the token stays as
 * contended as it will be measured); then `go <ms>`: the operations started from then on,
 * for that long, are measured. Every success counts towards the stored counter
 * (`warm_ok` before the go, `ok` after it).
 */
const main = async () => {
  const { op, close } = await makeOp()
  console.log("ready")
  const lines = readline.createInterface({ input: process.stdin })
  // The parent gone (killed, or failed), its pipe closes: a worker left behind would go on
  // loading the machine, and retrying its store, for good.
  let reported = false
  lines.on("close", () => {
    if (!reported) process.exit(2)
  })
  const commands: Array<string> = []
  const waiting: Array<(line: string) => void> = []
  lines.on("line", (line) => {
    const wake = waiting.shift()
    if (wake === undefined) commands.push(line)
    else wake(line)
  })
  const next = () =>
    commands.length > 0 ? Promise.resolve(commands.shift()!) : new Promise<string>((resolve) => waiting.push(resolve))
  const warm = await next()
  const [, warmArg, minArg, maxArg] = warm.split(" ")
  const warmMs = Number(warmArg ?? "0")
  const warmMinOps = Number(minArg ?? "0")
  const warmMaxMs = Number(maxArg ?? warmArg ?? "0")
  let measuring = false
  let deadline = Number.POSITIVE_INFINITY
  const lat: Array<number> = []
  let ok = 0
  let warmOk = 0
  let failed = 0
  const loops = Promise.all(
    Array.from({ length: conc }, async () => {
      while (performance.now() < deadline) {
        const started = performance.now()
        const measured = measuring
        try {
          await op()
          if (measured) {
            ok++
            lat.push(Math.round((performance.now() - started) * 100) / 100)
          } else warmOk++
        } catch {
          failed++
        }
      }
    })
  )
  const warmStarted = performance.now()
  await sleep(warmMs)
  // The JIT compiles a path as it runs it: a process that did few operations in the time
  // given (a slow, contended cell) warms up until it did `warmMinOps`, within `warmMaxMs`.
  while (warmOk < warmMinOps && performance.now() - warmStarted < warmMaxMs) await sleep(100)
  console.log(`warmed ${Math.round(performance.now() - warmStarted)}`)
  const go = await next()
  const durationMs = Number(go.split(" ")[1] ?? "3000")
  const cpuBefore = process.cpuUsage()
  deadline = performance.now() + durationMs
  measuring = true
  await loops
  const cpu = process.cpuUsage(cpuBefore)
  // A pipe takes a long line in several writes: the exit below must not cut the report short.
  const report = JSON.stringify({ ok, warm_ok: warmOk, failed, lat, cpu_ms: (cpu.user + cpu.system) / 1000 })
  await new Promise<void>((resolve) => process.stdout.write(`${report}\n`, () => resolve()))
  reported = true
  lines.close()
  await close()
  process.exit(0)
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
