/**
 * The metrics table of docs/operations.md against the metrics the library defines: every
 * metric a module of `src/` exports is a row of the table, with its kind, and every row
 * names a metric that exists. The metrics are the `Metric` values the modules export, read
 * by importing every module; a scan of the sources for metric constructors checks that the
 * import found them all (a metric kept private to its module would otherwise go unseen).
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Metric from "effect/Metric"

const root = path.resolve(import.meta.dirname, "..")
const src = path.join(root, "src")

const sourceFiles = async (): Promise<ReadonlyArray<string>> => {
  const entries = await fs.readdir(src, { recursive: true, withFileTypes: true })
  return entries
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => path.join(entry.parentPath, entry.name))
    .sort()
}

/** Name to kind (`counter`, `gauge`, `histogram`…), of every metric named `leasehold_…`. */
type Kinds = ReadonlyMap<string, string>

const exportedMetrics = async (files: ReadonlyArray<string>): Promise<Kinds> => {
  const found = new Map<string, string>()
  for (const file of files) {
    // an entry point (`bin.ts`) runs when imported: it defines no metric of its own
    if ((await fs.readFile(file, "utf8")).startsWith("#!")) continue
    const module: Record<string, unknown> = await import(file)
    for (const value of Object.values(module)) {
      if (Metric.isMetric(value) && value.id.startsWith("leasehold_")) found.set(value.id, value.type.toLowerCase())
    }
  }
  return found
}

const definedInSource = async (files: ReadonlyArray<string>): Promise<ReadonlyArray<string>> => {
  const names = new Set<string>()
  for (const file of files) {
    const text = await fs.readFile(file, "utf8")
    for (const match of text.matchAll(
      /Metric\.(?:counter|gauge|histogram|summary|frequency)\(\s*"(leasehold_[^"]+)"/g
    )) {
      names.add(match[1]!)
    }
  }
  return [...names].sort()
}

/** The rows of the first table under `## Metrics`: each name of the first cell (labels left out), and the kind. */
const documented = async (): Promise<Kinds> => {
  const text = await fs.readFile(path.join(root, "docs/operations.md"), "utf8")
  const section = text.split(/^## /m).find((part) => part.startsWith("Metrics\n"))
  assert.isDefined(section, "docs/operations.md has no ## Metrics section")
  const lines = section!.split("\n")
  const first = lines.findIndex((line) => line.startsWith("|"))
  const end = lines.findIndex((line, i) => i > first && !line.startsWith("|"))
  const rows = lines.slice(first + 2, end < 0 ? undefined : end)
  assert.isAbove(rows.length, 0, "the metrics table has no rows")
  const rowsByName = new Map<string, string>()
  for (const row of rows) {
    const [names, kind] = row
      .split("|")
      .slice(1, 3)
      .map((cell) => cell.trim())
    const spans = [...names!.matchAll(/`([^`]+)`/g)].map((match) => match[1]!.replace(/\{.*\}$/, ""))
    assert.isAbove(spans.length, 0, `a row of the metrics table names no metric: ${row}`)
    for (const name of spans) {
      assert.isFalse(rowsByName.has(name), `${name} is in the metrics table twice`)
      rowsByName.set(name, kind!)
    }
  }
  return rowsByName
}

const sorted = (kinds: Kinds) => [...kinds].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))

describe("docs/operations.md, Metrics", () => {
  it("lists every metric the library defines, with its kind, and nothing else", async () => {
    const files = await sourceFiles()
    const [exported, inSource, table] = await Promise.all([
      exportedMetrics(files),
      definedInSource(files),
      documented()
    ])
    // the import saw every metric the sources define
    deepStrictEqual([...exported.keys()].sort(), inSource)
    assert.isAbove(exported.size, 20)
    deepStrictEqual(
      sorted(table),
      sorted(exported),
      "the table of docs/operations.md (left) against the metrics of src/ (right)"
    )
  })
})
