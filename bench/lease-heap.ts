/**
 * What a held lease keeps on the heap, by kind of object: one worker on the embedded store
 * (oplock on, a hold longer than the run) modifies `--leases` tokens once each and lets them
 * go idle (an idle lease parks); a heap snapshot is taken before and after, and the
 * difference is divided by the number of leases, per kind of object: closures and the
 * contexts they capture, each object shape (its constructor and its first property names),
 * strings, arrays.
 *
 *   npm run bench:lease-heap -- --json               one JSON document (below)
 *   npm run bench:lease-heap -- --leases 20000
 *
 *   output: {"leases", "heap_per_lease_bytes", "kinds": [{"kind", "count_per_lease",
 *            "bytes_per_lease"}, …] (largest first, the kinds above 16 bytes per lease)}
 *
 * `bench:scale --only leases` measures the heap per lease against its targets; this says
 * where it goes.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as StateManager from "../src/StateManager.js"
import * as Worker from "../src/Worker.js"
import { flag, json } from "./args.js"

const leases = Number(flag("leases") ?? 10_000)

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

interface Snapshot {
  readonly snapshot: {
    readonly meta: {
      readonly node_fields: ReadonlyArray<string>
      readonly node_types: readonly [ReadonlyArray<string>]
      readonly edge_fields: ReadonlyArray<string>
      readonly edge_types: readonly [ReadonlyArray<string>]
    }
  }
  readonly nodes: ReadonlyArray<number>
  readonly edges: ReadonlyArray<number>
  readonly strings: ReadonlyArray<string>
}

/** Count and bytes per kind of object in a heap snapshot written to `file`. */
const kindsOf = (file: string): Map<string, { count: number; bytes: number }> => {
  const s = JSON.parse(fs.readFileSync(file, "utf8")) as Snapshot
  const { node_fields, node_types, edge_fields, edge_types } = s.snapshot.meta
  const [types] = node_types
  const [edgeTypes] = edge_types
  const width = node_fields.length
  const edgeWidth = edge_fields.length
  const at = (name: string) => node_fields.indexOf(name)
  const [type, name, size, edgeCount] = [at("type"), at("name"), at("self_size"), at("edge_count")]
  const [edgeType, edgeName] = [edge_fields.indexOf("type"), edge_fields.indexOf("name_or_index")]
  const kinds = new Map<string, { count: number; bytes: number }>()
  let edge = 0
  for (let node = 0; node < s.nodes.length; node += width) {
    const nodeType = types[s.nodes[node + type]!]!
    const properties: Array<string> = []
    for (let k = 0; k < s.nodes[node + edgeCount]!; k++, edge += edgeWidth) {
      if (edgeTypes[s.edges[edge + edgeType]!] === "property" && properties.length < 8) {
        properties.push(s.strings[s.edges[edge + edgeName]!]!)
      }
    }
    const label = s.strings[s.nodes[node + name]!]!
    const kind = nodeType.includes("string")
      ? "string"
      : nodeType === "object"
        ? `object ${label}${label === "Object" ? ` {${properties.filter((p) => p !== "__proto__").join(",")}}` : ""}`
        : nodeType === "closure"
          ? "closure"
          : nodeType === "array"
            ? `array ${label}`
            : nodeType
    const entry = kinds.get(kind) ?? { count: 0, bytes: 0 }
    entry.count++
    entry.bytes += s.nodes[node + size]!
    kinds.set(kind, entry)
  }
  return kinds
}

const snapshot = (file: string) =>
  Effect.sync(() => {
    globalThis.gc?.()
    globalThis.gc?.()
    v8.writeHeapSnapshot(file)
  })

const program = Effect.scoped(
  Effect.gen(function* () {
    if (globalThis.gc === undefined) return yield* Effect.die(new Error("run with node --expose-gc"))
    const config = LeaseholdConfig.layer({
      oplock: true,
      lockExpiration: 120_000,
      leaseHoldTime: 110_000,
      lockWarningThreshold: 60_000
    })
    const context = yield* Layer.build(
      Layer.fresh(Worker.layerState).pipe(Layer.provide(MemoryStore.layer), Layer.provide(config))
    )
    const states = Context.get(context, StateManager.StateManager)
    const bump = (counter: { readonly n: number }) => [counter.n + 1, { n: counter.n + 1 }] as const
    // warm: the code paths and pools in place before the first snapshot
    yield* states.modify("warm", Counter, bump)
    yield* Effect.sleep("1 second")
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "lease-heap-"))
    const [before, after] = [path.join(dir, "before.heapsnapshot"), path.join(dir, "after.heapsnapshot")]
    yield* snapshot(before)
    const tokens = Array.from({ length: leases }, (_, i) => `lease-${i}`)
    yield* Effect.forEach(tokens, (token) => states.modify(token, Counter, bump), { concurrency: 256, discard: true })
    // read once the leases are idle, as held leases mostly are (an idle lease parks)
    yield* Effect.sleep("1 second")
    yield* snapshot(after)
    const [was, is] = [kindsOf(before), kindsOf(after)]
    fs.rmSync(dir, { recursive: true })
    const kinds = [...is]
      .map(([kind, { count, bytes }]) => ({
        kind,
        count_per_lease: Math.round(((count - (was.get(kind)?.count ?? 0)) / leases) * 100) / 100,
        bytes_per_lease: Math.round((bytes - (was.get(kind)?.bytes ?? 0)) / leases)
      }))
      .sort((a, b) => b.bytes_per_lease - a.bytes_per_lease)
    const total = kinds.reduce((sum, k) => sum + k.bytes_per_lease, 0)
    const report = { leases, heap_per_lease_bytes: total, kinds: kinds.filter((k) => k.bytes_per_lease > 16) }
    if (json) console.log(JSON.stringify(report))
    else {
      console.log(`${leases} leases held: ${total} bytes of heap per lease`)
      for (const k of report.kinds) {
        console.log(`${String(k.bytes_per_lease).padStart(6)} B  ${String(k.count_per_lease).padStart(6)} ×  ${k.kind}`)
      }
    }
  })
)

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
