/**
 * A sketch, not a product path: the floor of an uncontended modification on the embedded
 * store if it were made as one chain of the store's own two steps (`acquireQueued`, the
 * slice's decode, the function, its encode, `commitAndReleaseQueued`, one yield), with no
 * session, no request and no turn: what fusing the modification's path could reach at most
 * with the store as it is. Beside it, in the same process and interleaved round by round:
 * the two store steps alone, `StateManager.modify` (oplock off), and the `Ref` baseline of
 * `bench:cpu`. And "one step": the floor of a single synchronous step of the embedded store
 * that takes the lock, decides and commits (the same twins, the front's checks, one yield,
 * in a key space of its own). CPU per modification (user + system, one `runPromise` each), lowest of four
 * rounds of `--count` (default 20000).
 *
 *   npm run bench:fused-floor -- --json   [{"row", "cpu_us_per_op", "over_baseline"}]
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as References from "effect/References"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { makeKeys } from "../src/internal/keys.js"
import { cachedKeys } from "../src/internal/memory/keyCache.js"
import { Keyspace } from "../src/internal/memory/keyspace.js"
import type { Space } from "../src/internal/memory/space.js"
import * as Operations from "../src/internal/operations/index.js"
import { codecOf } from "../src/internal/state/codec.js"
import { instanceIdError, sliceNamesError, tokenError } from "../src/internal/validate.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as StateManager from "../src/StateManager.js"
import { Store } from "../src/Store.js"
import * as Worker from "../src/Worker.js"
import { flag, json } from "./args.js"

const count = Number(flag("count") ?? "20000")
const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

type Run = Effect.Effect<unknown, unknown, StateManager.StateManager | Store>

const measure = async (
  runtime: ManagedRuntime.ManagedRuntime<StateManager.StateManager | Store, unknown>,
  run: Run
) => {
  const before = process.cpuUsage()
  for (let i = 0; i < count; i++) await runtime.runPromise(run)
  const cpu = process.cpuUsage(before)
  return (cpu.user + cpu.system) / count
}

const main = async () => {
  const runtime = ManagedRuntime.make(
    Worker.layerState.pipe(
      Layer.provideMerge(MemoryStore.layer),
      Layer.provideMerge(LeaseholdConfig.layer({ oplock: false })),
      Layer.merge(Layer.succeed(References.MinimumLogLevel, "Error"))
    )
  )
  const states = Effect.runSync(Ref.make(new Map<string, { readonly n: number }>()))
  const baseline: Run = Ref.modify(states, (map) => {
    const state = map.get("hot") ?? { n: 0 }
    map.set("hot", { n: state.n + 1 })
    return [null, map] as const
  })
  const modify: Run = Effect.flatMap(StateManager.StateManager, (states) =>
    states.modify("hot", Counter, (s) => [null, { n: s.n + 1 }])
  )
  let next = 0
  const steps: Run = Effect.flatMap(Store, (store) =>
    Effect.suspend(() => {
      const lockId = `bench:${next++}`
      return Effect.flatMap(store.acquireQueued("steps", lockId, ["counter"], { instanceId: "bench" }), () =>
        store.commitAndReleaseQueued("steps", lockId, [["counter", `{"n":${next}}`]], { instanceId: "bench" })
      )
    })
  )
  const fused: Run = Effect.flatMap(Store, (store) =>
    Effect.suspend(() => {
      const lockId = `bench:${next++}`
      return Effect.flatMap(store.acquireQueued("fused", lockId, ["counter"], { instanceId: "bench" }), (got) => {
        if (got._tag !== "Acquired") return Effect.die("the sketch's token is contended")
        const stored = Option.flatMap(got.values[0] ?? Option.none(), (raw) =>
          Result.getSuccess(codecOf(Counter).decode(raw))
        )
        const value = Option.getOrElse(stored, () => Counter.initial)
        const encoded = Result.getOrThrow(codecOf(Counter).encode({ n: value.n + 1 }))
        return Effect.andThen(
          store.commitAndReleaseQueued("fused", lockId, [["counter", encoded]], { instanceId: "bench" }),
          Effect.yieldNow
        )
      })
    })
  )
  // The single step the 4x target needs, as its floor: the same twins the embedded store's
  // two steps run, called in one synchronous block of a key space of the sketch's own
  // (the front's checks of token, worker and slice names included), then one yield.
  const clockNow = Date.now()
  const space: Space = {
    ks: new Keyspace(1_000, clockNow),
    // the store's own key names, each made once per token
    keys: cachedKeys(makeKeys("sketch")),
    lockMs: 30_000,
    tokenMs: 3_600_000,
    handoffMs: 1_000,
    publish: () => undefined,
    keyEvent: () => undefined,
    appended: () => undefined
  }
  const notices = { granted: "granted:one", contended: "contended:one" }
  const release = { instanceId: "bench", requeue: false, queueAs: undefined, carry: [], notices }
  const oneStep: Run = Effect.andThen(
    Effect.clockWith((clock) => {
      const invalid = tokenError("one") ?? instanceIdError("bench") ?? sliceNamesError(["counter"])
      if (invalid !== undefined) return Effect.fail(invalid)
      const now = clock.currentTimeMillisUnsafe()
      const lockId = `bench:${next++}`
      const got = Operations.acquireQueued.memory(space, now, {
        token: "one",
        lockId,
        slices: ["counter"],
        instanceId: "bench",
        claim: undefined,
        notices
      })
      if (got._tag !== "Acquired") return Effect.die("the sketch's token is contended")
      const stored = Option.flatMap(Option.fromNullishOr(got.values[0]), (raw) =>
        Result.getSuccess(codecOf(Counter).decode(raw))
      )
      const value = Option.getOrElse(stored, () => Counter.initial)
      const encoded = Result.getOrThrow(codecOf(Counter).encode({ n: value.n + 1 }))
      Operations.commitAndReleaseQueued.memory(space, now, {
        ...release,
        token: "one",
        lockId,
        entries: [["counter", encoded]],
        claim: undefined
      })
      return Effect.void
    }),
    Effect.yieldNow
  )
  const rows: Array<readonly [string, Run]> = [
    ["baseline", baseline],
    ["store steps", steps],
    ["fused", fused],
    ["one step", oneStep],
    ["modify", modify]
  ]
  for (let i = 0; i < 2_000; i++) for (const [, run] of rows) await runtime.runPromise(run)
  const best = new Map<string, number>()
  for (let round = 0; round < 4; round++) {
    for (const [row, run] of rows)
      best.set(row, Math.min(best.get(row) ?? Number.POSITIVE_INFINITY, await measure(runtime, run)))
  }
  await runtime.dispose()
  const base = best.get("baseline")!
  const out = rows.map(([row]) => ({
    row,
    cpu_us_per_op: Math.round(best.get(row)! * 10) / 10,
    over_baseline: Math.round((best.get(row)! / base) * 100) / 100
  }))
  console.log(
    json
      ? JSON.stringify(out)
      : out.map((r) => `${r.row}: ${r.cpu_us_per_op} µs CPU, ${r.over_baseline}x the baseline`).join("\n")
  )
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
