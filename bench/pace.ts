/**
 * The CPU cost of a modification at a person's pace: one process modifies tokens picked at
 * random among many (`--tokens`, default 1,000) at a fixed rate (`--rate`, default 800 a
 * second: each token about once a second), each as its own caller (`runPromise`), on a
 * fresh redis-server of its own, with the oplock on (leases, batch durability) and off.
 * What `bench:cpu` does not show: there one token is modified back to back, its lease busy;
 * here a token's lease is mostly idle between its modifications (parked), as in the fleet.
 *
 *   npm run bench:pace -- --json             one JSON array of rows (below)
 *   --tokens 1000 --rate 800 --seconds 15 --warmup 10
 *   --src                                    leasehold from its sources (tsx) instead of
 *                                            the compiled build (`npm run build` first)
 *
 *   output: [{"oplock", "tokens", "rate", "done", "cpu_us_per_op", "fiber_ops_per_op",
 *             "fibers_per_op", "redis_commands_per_op"}]
 *
 * CPU is the process's (user + system, garbage collection and the compiler's threads
 * included) over the measured seconds, divided by the modifications answered in them,
 * after `--warmup` seconds of the same load. The process's idle cost (the 1 ms pacing tick)
 * is in both rows alike. `fiber_ops_per_op` counts what the fibers' run loops execute (as
 * `bench:cpu` does, through the tracer's `context`), and `fibers_per_op` the distinct fibers
 * that ran, per modification, both in the measured window of the same run: the counting
 * costs CPU too, so compare CPU between rows of one run, not with `bench:cpu`.
 */
import { execFileSync, spawn } from "node:child_process"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import { freePort } from "../test/app/support.js"
import { flag, has, json } from "./args.js"
import { counting } from "./counting.js"

const root = has("src") ? "../src" : "../dist"
const LeaseholdConfig: typeof import("../src/LeaseholdConfig.js") = await import(`${root}/LeaseholdConfig.js`)
const RedisStore: typeof import("../src/RedisStore.js") = await import(`${root}/RedisStore.js`)
const StateManager: typeof import("../src/StateManager.js") = await import(`${root}/StateManager.js`)
const Worker: typeof import("../src/Worker.js") = await import(`${root}/Worker.js`)

const tokenCount = Number(flag("tokens") ?? "1000")
const rate = Number(flag("rate") ?? "800")
const seconds = Number(flag("seconds") ?? "15")
const warmup = Number(flag("warmup") ?? "10")

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

/** What the fibers run, counted while `on`. */
const counted = { on: false, ops: 0, fibers: new Set<number>() }

/** Every fiber of the runtime counts its operations (see `bench/modify-cpu.ts`). */
const countingWhileOn = counting((fiber, ops) => {
  if (!counted.on) return
  counted.ops += ops
  counted.fibers.add(fiber.id)
})

const redisCommands = (port: number): number => {
  const stats = execFileSync("redis-cli", ["-p", String(port), "info", "commandstats"]).toString()
  let calls = 0
  for (const match of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    // what a client sent, not what scripts ran inside (their commands count apart in INFO)
    if (match[1] === "evalsha" || !/^[a-z|]+$/.test(match[1]!)) calls += Number(match[2])
  }
  return calls
}

/** One row: the load on a fresh server, with the oplock on or off. */
const measure = async (oplock: boolean) => {
  const port = await Effect.runPromise(freePort)
  const server = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", ""], {
    stdio: "ignore"
  })
  await new Promise((resolve) => setTimeout(resolve, 300))
  const runtime = ManagedRuntime.make(
    Worker.layerState.pipe(
      Layer.provideMerge(RedisStore.layer({ url: `redis://127.0.0.1:${port}` })),
      Layer.provideMerge(LeaseholdConfig.layer({ oplock, leaseDurability: "batch" })),
      Layer.merge(Layer.succeed(References.MinimumLogLevel, "Error")),
      Layer.provideMerge(countingWhileOn)
    )
  )
  const tokens = Array.from({ length: tokenCount }, () => crypto.randomUUID())
  const modify = (token: string) =>
    Effect.flatMap(StateManager.StateManager, (states) => states.modify(token, Counter, (s) => [null, { n: s.n + 1 }]))
  const load = async (forSeconds: number) => {
    let done = 0
    let sent = 0
    const started = performance.now()
    await new Promise<void>((resolve) => {
      const tick = setInterval(() => {
        const due = Math.floor(((performance.now() - started) / 1000) * rate)
        for (; sent < due; sent++) {
          const token = tokens[Math.floor(Math.random() * tokens.length)]!
          void runtime.runPromise(modify(token)).then(() => done++)
        }
        if (performance.now() - started > forSeconds * 1000) {
          clearInterval(tick)
          setTimeout(resolve, 500)
        }
      }, 1)
    })
    return done
  }
  try {
    await load(warmup)
    const commands = redisCommands(port)
    counted.ops = 0
    counted.fibers.clear()
    counted.on = true
    const cpu = process.cpuUsage()
    const done = await load(seconds)
    const used = process.cpuUsage(cpu)
    counted.on = false
    const round = (x: number) => Math.round(x * 10) / 10
    return {
      oplock,
      tokens: tokenCount,
      rate,
      done,
      cpu_us_per_op: round((used.user + used.system) / done),
      fiber_ops_per_op: round(counted.ops / done),
      fibers_per_op: Math.round((counted.fibers.size / done) * 100) / 100,
      redis_commands_per_op: Math.round(((redisCommands(port) - commands) / done) * 100) / 100
    }
  } finally {
    await runtime.dispose()
    server.kill()
  }
}

const rows = [await measure(true), await measure(false)]
console.log(
  json
    ? JSON.stringify(rows)
    : rows
        .map(
          (r) =>
            `oplock ${r.oplock}: ${r.cpu_us_per_op} µs CPU, ${r.fiber_ops_per_op} fiber operations, ` +
            `${r.fibers_per_op} fibers, ${r.redis_commands_per_op} requests to Redis per modification ` +
            `(${r.tokens} tokens, ${r.rate}/s)`
        )
        .join("\n")
)
