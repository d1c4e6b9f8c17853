/**
 * The CPU cost of leasehold around the store: one fiber after another runs `modify` on one
 * token of the embedded store (no network), each as its own caller (`runPromise`), and the
 * process CPU time (user + system, garbage collection included) is divided by the number
 * of modifications. Oplock off: every modification takes the lock, decides and commits;
 * oplock on: served from the lease's memory and written per modification (batch durability).
 *
 *   npm run bench:cpu -- --json             one JSON array of rows (below)
 *   npm run bench:cpu -- --count 50000      modifications per measurement (default 20000)
 *   npm run bench:cpu -- --dist             leasehold from the compiled build (`npm run build`
 *                                           first): what an app runs, without the names the
 *                                           TypeScript loader gives each closure it creates
 *
 * By default leasehold is run from its sources, through the TypeScript loader (tsx), which
 * wraps every named closure in a call that sets its name each time the closure is made: a
 * share of each figure that the compiled build (`--dist`) does not pay.
 *
 * The `baseline` row is the same loop, one `runPromise` per modification, over an Effect
 * `Ref` holding a Map of the token's state (read, increment, write), no leasehold: what
 * the runtime alone costs a caller. Each leasehold row carries `over_baseline`, its CPU
 * over the baseline's.
 *
 *   output: [{"store": "memory" | "baseline", "oplock" (null for the baseline),
 *             "cpu_us_per_op", "fiber_ops_per_op", "over_baseline" (leasehold rows)}]
 *
 * Each figure is the lowest of three measurements: other work on the machine only adds.
 * They follow as many modifications again, not measured: the CPU time of a process
 * includes its compiler's threads, which optimise the path over the first tens of thousands
 * of modifications (after 2,000 only, the measured rounds are still compiling: a
 * figure then fell from round to round, by a quarter between the last two).
 * `fiber_ops_per_op` does not depend on the machine: the operations the fibers' run loops
 * execute per modification, every fiber's (a lease's hold fiber, the timers'), over 1,000
 * modifications after the CPU measurements, in a runtime of its own. It moves with the code
 * alone, so two versions compare on it where the CPU figures are within the machine's noise.
 *
 * An operation is what Effect's run loop counts in a fiber's `currentOpCount` (the counter
 * `MaxOpsBeforeYield` is compared with): each primitive the loop evaluates, and each
 * continuation a success value is handed to inline without going back to the loop (a
 * generator steps over a yielded effect that has already succeeded without either). This
 * replaces `runtime_ops_per_op`, counted on Effect 3 by a `Supervisor` under op supervision
 * (`RuntimeFlags`): Effect 4 has neither. The one hook its run loop calls for every
 * primitive of every fiber is the tracer's `context`, so the counting runtime's tracer is
 * the native one (its spans unchanged) with a `context` that evaluates the primitive and
 * counts it, plus the inline steps by which the fiber's counter advanced meanwhile (the
 * counter restarts at every slice of the loop, so it is read around each primitive, not
 * once per modification). The two figures do not compare: Effect 3 counted its own
 * instructions, which were not these.
 */
import { performance } from "node:perf_hooks"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Ref from "effect/Ref"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import { flag, has, json } from "./args.js"
import { counting } from "./counting.js"

/** Where leasehold is imported from: its sources, or the compiled build (`--dist`). */
const root = has("dist") ? "../dist" : "../src"
const LeaseholdConfig: typeof import("../src/LeaseholdConfig.js") = await import(`${root}/LeaseholdConfig.js`)
const MemoryStore: typeof import("../src/MemoryStore.js") = await import(`${root}/MemoryStore.js`)
const StateManager: typeof import("../src/StateManager.js") = await import(`${root}/StateManager.js`)
const Worker: typeof import("../src/Worker.js") = await import(`${root}/Worker.js`)

const count = Number(flag("count") ?? "20000")

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

/** Counts the operations of every fiber run under it. */
interface CountingOps {
  count: number
}

/** A layer that makes every fiber of its runtime count its operations into `counter`. */
const countingInto = (counter: CountingOps): Layer.Layer<never> =>
  counting((_fiber, ops) => {
    counter.count += ops
  })

/** Only errors are logged: the benches measure the path, not the console. */
const errorsOnly = Layer.succeed(References.MinimumLogLevel, "Error")

/** What a row runs on: its runtime, built over `under` (nothing, or the counting layer). */
type MakeRuntime<R> = (under: Layer.Layer<never>) => ManagedRuntime.ManagedRuntime<R, unknown>

/**
 * The fibers' operations per run of `modify`, over 1,000 runs after 100 not counted, in a
 * runtime of its own whose every fiber is counted (a lease's hold fiber, the timers').
 */
const opsPerRun = async <R>(makeRuntime: MakeRuntime<R>, modify: Effect.Effect<unknown, unknown, R>) => {
  const counter: CountingOps = { count: 0 }
  const runtime = makeRuntime(countingInto(counter))
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
  // warm: the compiler's threads are done with the path before it is measured
  for (let i = 0; i < count; i++) await runtime.runPromise(modify)
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
  const makeRuntime: MakeRuntime<import("../src/StateManager.js").StateManager> = (under) =>
    ManagedRuntime.make(
      Worker.layerState.pipe(
        Layer.provideMerge(MemoryStore.layer),
        Layer.provideMerge(LeaseholdConfig.layer({ oplock })),
        Layer.merge(errorsOnly),
        Layer.provideMerge(under)
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
  const makeRuntime: MakeRuntime<never> = (under) => ManagedRuntime.make(Layer.merge(errorsOnly, under))
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
    fiber_ops_per_op: number
    over_baseline?: number
  }> = []
  for (const oplock of [false, true]) {
    const { cpu, ops } = await measure(oplock)
    rows.push({
      store: "memory",
      oplock,
      cpu_us_per_op: cpu,
      fiber_ops_per_op: ops,
      over_baseline: Math.round((cpu / base.cpu) * 100) / 100
    })
  }
  rows.push({ store: "baseline", oplock: null, cpu_us_per_op: base.cpu, fiber_ops_per_op: base.ops })
  console.log(
    json
      ? JSON.stringify(rows)
      : rows
          .map((r) =>
            r.store === "baseline"
              ? `baseline (Ref of a Map): best ${r.cpu_us_per_op} µs CPU, ${r.fiber_ops_per_op} fiber operations per modification`
              : `oplock ${r.oplock}: best ${r.cpu_us_per_op} µs CPU, ${r.fiber_ops_per_op} fiber operations per modification, ${r.over_baseline}x the baseline`
          )
          .join("\n")
  )
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
