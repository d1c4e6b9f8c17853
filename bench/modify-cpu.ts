/**
 * The CPU cost of leasehold around the store: one fiber after another runs `modify` on one
 * token of the embedded store (no network), each as its own caller (`runPromise`), and the
 * process CPU time (user + system, garbage collection included) is divided by the number
 * of modifications. Oplock off: every modification takes the lock, decides and commits;
 * oplock on: served from the lease's memory and written per modification (batch durability).
 *
 *   npm run bench:cpu -- --json             one JSON array of rows (below)
 *   npm run bench:cpu -- --count 50000      modifications per measurement (default 20000)
 *
 * The `baseline` row is the same loop, one `runPromise` per modification, over an Effect
 * `Ref` holding a Map of the token's state (read, increment, write), no leasehold: what
 * the runtime alone costs a caller. Each leasehold row carries `over_baseline`, its CPU
 * over the baseline's.
 *
 *   output: [{"store": "memory" | "baseline", "oplock" (null for the baseline),
 *             "cpu_us_per_op", "runtime_ops_per_op", "over_baseline" (leasehold rows)}]
 *
 * Each figure is the lowest of three measurements: other work on the machine only adds.
 * `runtime_ops_per_op` does not depend on the machine: the instructions Effect's runtime
 * runs per modification, every fiber's (a lease's hold fiber, the timers'), counted by a
 * `Supervisor` under op supervision in a runtime of its own, over 1,000 modifications after
 * the CPU measurements. It moves with the code alone, so two versions compare on
 * it where the CPU figures are within the machine's noise.
 */
import { performance } from "node:perf_hooks"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Ref from "effect/Ref"
import * as RuntimeFlags from "effect/RuntimeFlags"
import * as Schema from "effect/Schema"
import * as Supervisor from "effect/Supervisor"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as StateManager from "../src/StateManager.js"
import * as Worker from "../src/Worker.js"
import { flag, json } from "./args.js"

const count = Number(flag("count") ?? "20000")

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

/** Counts the instructions of every fiber it supervises. */
class CountingOps extends Supervisor.AbstractSupervisor<void> {
  count = 0
  get value() {
    return Effect.void
  }
  override onEffect() {
    this.count++
  }
}

/** A layer made under it runs every fiber of its runtime counted by `counter`. */
const counting = (counter: CountingOps) =>
  Layer.merge(Supervisor.addSupervisor(counter), RuntimeFlags.enableOpSupervision)

/** What a row runs on: its runtime, built over `under` (nothing, or the counting layer). */
type MakeRuntime<R> = (under: Layer.Layer<never>) => ManagedRuntime.ManagedRuntime<R, unknown>

/**
 * The runtime's instructions per run of `modify`, over 1,000 runs after 100 not counted, in
 * a runtime of its own whose every fiber is counted (a lease's hold fiber, the timers').
 */
const opsPerRun = async <R>(makeRuntime: MakeRuntime<R>, modify: Effect.Effect<unknown, unknown, R>) => {
  const counter = new CountingOps()
  const runtime = makeRuntime(counting(counter))
  for (let i = 0; i < 100; i++) await runtime.runPromise(modify)
  counter.count = 0
  for (let i = 0; i < 1_000; i++) await runtime.runPromise(modify)
  const ops = counter.count / 1_000
  await runtime.dispose()
  return Math.round(ops * 10) / 10
}

/** The lowest CPU per run of `modify` over three measurements of `count` runs, one `runPromise` each. */
const lowest = async <R>(label: string, makeRuntime: MakeRuntime<R>, modify: Effect.Effect<unknown, unknown, R>) => {
  const runtime = makeRuntime(Layer.empty)
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
        `${label}: ${((cpu.user + cpu.system) / count).toFixed(1)} µs CPU, ${((wall * 1000) / count).toFixed(1)} µs wall per modification`
      )
  }
  await runtime.dispose()
  const ops = await opsPerRun(makeRuntime, modify)
  return { cpu: Math.round(best * 10) / 10, ops }
}

const measure = async (oplock: boolean) => {
  const makeRuntime: MakeRuntime<StateManager.StateManager> = (under) =>
    ManagedRuntime.make(
      Worker.layerState.pipe(
        Layer.provideMerge(MemoryStore.layer),
        Layer.provideMerge(LeaseholdConfig.layerWith({ oplock })),
        Layer.merge(Logger.minimumLogLevel(LogLevel.Error)),
        Layer.provide(under)
      )
    )
  const modify = Effect.flatMap(StateManager.StateManager, (states) =>
    states.modify("hot", Counter, (s) => [null, { n: s.n + 1 }])
  )
  return lowest(`oplock ${oplock}`, makeRuntime, modify)
}

/** The same loop over a `Ref` holding a Map: read, increment, write, no leasehold. */
const baseline = async () => {
  const states = Effect.runSync(Ref.make(new Map<string, { readonly n: number }>()))
  const makeRuntime: MakeRuntime<never> = (under) =>
    ManagedRuntime.make(Logger.minimumLogLevel(LogLevel.Error).pipe(Layer.provide(under)))
  const modify = Ref.modify(states, (map) => {
    const state = map.get("hot") ?? { n: 0 }
    map.set("hot", { n: state.n + 1 })
    return [null, map] as const
  })
  return lowest("baseline", makeRuntime, modify)
}

const main = async () => {
  const base = await baseline()
  const rows: Array<{
    store: string
    oplock: boolean | null
    cpu_us_per_op: number
    runtime_ops_per_op: number
    over_baseline?: number
  }> = []
  for (const oplock of [false, true]) {
    const { cpu, ops } = await measure(oplock)
    rows.push({
      store: "memory",
      oplock,
      cpu_us_per_op: cpu,
      runtime_ops_per_op: ops,
      over_baseline: Math.round((cpu / base.cpu) * 100) / 100
    })
  }
  rows.push({ store: "baseline", oplock: null, cpu_us_per_op: base.cpu, runtime_ops_per_op: base.ops })
  console.log(
    json
      ? JSON.stringify(rows)
      : rows
          .map((r) =>
            r.store === "baseline"
              ? `baseline (Ref of a Map): best ${r.cpu_us_per_op} µs CPU, ${r.runtime_ops_per_op} runtime instructions per modification`
              : `oplock ${r.oplock}: best ${r.cpu_us_per_op} µs CPU, ${r.runtime_ops_per_op} runtime instructions per modification, ${r.over_baseline}x the baseline`
          )
          .join("\n")
  )
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
