/**
 * The CPU cost of leasehold around the store: one fiber after another runs `modify` on one
 * token of the embedded store (no network), each as its own caller (`runPromise`), and the
 * process CPU time (user + system, garbage collection included) is divided by the number
 * of modifications. Oplock off: every modification takes the lock, decides and commits;
 * oplock on: served from the lease's memory and written per modification (batch durability).
 *
 *   npm run bench:cpu -- --json             one JSON array of {"oplock", "cpu_us_per_op"}
 *   npm run bench:cpu -- --count 50000      modifications per measurement (default 20000)
 *
 * Each figure is the lowest of three measurements: other work on the machine only adds.
 */
import { performance } from "node:perf_hooks"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Schema from "effect/Schema"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as StateManager from "../src/StateManager.js"
import * as Worker from "../src/Worker.js"
import { flag, json } from "./args.js"

const count = Number(flag("count") ?? "20000")

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

const measure = async (oplock: boolean) => {
  const runtime = ManagedRuntime.make(
    Worker.layerState.pipe(
      Layer.provideMerge(MemoryStore.layer),
      Layer.provideMerge(LeaseholdConfig.layerWith({ oplock })),
      Layer.merge(Logger.minimumLogLevel(LogLevel.Error))
    )
  )
  const modify = Effect.flatMap(StateManager.StateManager, (states) =>
    states.modify("hot", Counter, (s) => [null, { n: s.n + 1 }])
  )
  for (let i = 0; i < 2_000; i++) await runtime.runPromise(modify)
  let best = Number.POSITIVE_INFINITY
  for (let round = 0; round < 3; round++) {
    const before = process.cpuUsage()
    const started = performance.now()
    for (let i = 0; i < count; i++) await runtime.runPromise(modify)
    const cpu = process.cpuUsage(before)
    const wall = performance.now() - started
    best = Math.min(best, (cpu.user + cpu.system) / count)
    if (!json)
      console.log(
        `oplock ${oplock}: ${((cpu.user + cpu.system) / count).toFixed(1)} µs CPU, ${((wall * 1000) / count).toFixed(1)} µs wall per modification`
      )
  }
  await runtime.dispose()
  return { oplock, cpu_us_per_op: Math.round(best * 10) / 10 }
}

const main = async () => {
  const rows = [await measure(false), await measure(true)]
  console.log(
    json
      ? JSON.stringify(rows)
      : rows.map((r) => `oplock ${r.oplock}: best ${r.cpu_us_per_op} µs CPU per modification`).join("\n")
  )
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
