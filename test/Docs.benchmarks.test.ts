/**
 * docs/benchmarks.md stays a page one reads: at most 600 lines, opening (after its title and
 * introduction) with the summary table, one row per bench with its command, what it
 * measures, the latest figures and when and where they were taken. Rounds of measurements
 * go to docs/benchmarks/history.md. Every `npm run` command it names is a script of
 * package.json, and every link into it (from the README, docs/ and src/) or out of it into
 * the history names a heading that is there.
 */

import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"

const root = path.resolve(import.meta.dirname, "..")
const read = (file: string) => fs.readFileSync(path.join(root, file), "utf8")

const page = "docs/benchmarks.md"
const history = "docs/benchmarks/history.md"

/** Lines outside code fences. */
const prose = (text: string): ReadonlyArray<string> => {
  const lines: Array<string> = []
  let fenced = false
  for (const line of text.split("\n")) {
    if (line.trimStart().startsWith("```")) fenced = !fenced
    else if (!fenced) lines.push(line)
  }
  return lines
}

/** The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens; repeats numbered. */
const anchorsOf = (file: string): ReadonlySet<string> => {
  const seen = new Map<string, number>()
  const anchors = new Set<string>()
  for (const line of prose(read(file))) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading === null) continue
    const base = heading[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-")
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    anchors.add(count === 0 ? base : `${base}-${count}`)
  }
  return anchors
}

/** Markdown and text files under a directory, as paths from the root. */
const filesUnder = (dir: string, pattern: RegExp): ReadonlyArray<string> =>
  fs
    .readdirSync(path.join(root, dir), { recursive: true, encoding: "utf8" })
    .filter((file) => pattern.test(file))
    .map((file) => path.join(dir, file))

describe("docs/benchmarks.md", () => {
  const text = read(page)
  const lines = text.replace(/\n$/, "").split("\n")

  it("has at most 600 lines", () => {
    assert.isAtMost(lines.length, 600, `${page} has ${lines.length} lines: move rounds of measurements to ${history}`)
  })

  it("opens, after its title and introduction, with the summary table: a row per bench with its command, figures and date", () => {
    const headings = prose(text)
      .map((line, index) => ({ line, index }))
      .filter(({ line }) => /^#{1,6}\s/.test(line))
    assert.match(headings[0]?.line ?? "", /^# /, "the title first")
    assert.strictEqual(headings[1]?.line, "## Summary", "the first section is the summary")
    const start = lines.indexOf("## Summary")
    const end = lines.findIndex((line, index) => index > start && /^#{1,6}\s/.test(line))
    const before = lines.slice(0, start)
    assert.isFalse(
      before.some((line) => line.startsWith("|")),
      "no table before the summary"
    )
    const section = lines.slice(start + 1, end === -1 ? undefined : end)
    const firstTable = section.findIndex((line) => line.startsWith("|"))
    assert.isAtLeast(firstTable, 0, "the summary holds a table")
    const header = section[firstTable]!.split("|").map((cell) => cell.trim().toLowerCase())
    for (const column of ["bench", "command", "what it measures", "latest figures", "when, where"]) {
      assert.include(header, column, `the summary table has a column "${column}"`)
    }
    const commandColumn = header.indexOf("command")
    const whenColumn = header.indexOf("when, where")
    const tableEnd = section.findIndex((line, index) => index > firstTable && !line.startsWith("|"))
    const rows = section.slice(firstTable + 2, tableEnd === -1 ? undefined : tableEnd)
    assert.isAtLeast(rows.length, 10, "a row per bench")
    for (const row of rows) {
      const cells = row.split("|").map((cell) => cell.trim())
      assert.match(cells[commandColumn] ?? "", /npm run|same|above/, `a command in: ${row.slice(0, 80)}`)
      assert.match(cells[whenColumn] ?? "", /\d{4}-\d{2}-\d{2}/, `a date in: ${row.slice(0, 80)}`)
    }
    // every bench of package.json has its row
    const scripts: Record<string, string> = JSON.parse(read("package.json")).scripts
    const summary = section.join("\n")
    for (const name of Object.keys(scripts).filter((name) => name.startsWith("bench:") || name === "soak")) {
      if (name === "bench:lease-heap") continue // a tool of the scale bench, described in its section
      assert.match(summary, new RegExp(`npm run (--silent )?${name}\\b`), `the summary names npm run ${name}`)
    }
  })

  it("names only npm scripts that package.json has", () => {
    const scripts: Record<string, string> = JSON.parse(read("package.json")).scripts
    const named = [...text.matchAll(/npm run (?:--silent )?([\w:.-]+)/g)].map((match) => match[1]!)
    assert.isAbove(named.length, 10)
    assert.deepStrictEqual(
      [...new Set(named)].filter((name) => !(name in scripts)),
      [],
      "npm run commands without a script"
    )
  })

  it("every link into it, and out of it into the history, names a heading that is there", () => {
    const targets = new Map<string, ReadonlySet<string>>([
      [page, anchorsOf(page)],
      [history, anchorsOf(history)]
    ])
    const sources = ["README.md", ...filesUnder("docs", /\.md$/), ...filesUnder("src", /\.ts$/)]
    const broken: Array<string> = []
    for (const source of sources) {
      for (const match of read(source).matchAll(/\]\(([^)\s]*?)#([^)\s]+)\)/g)) {
        const [link, file, anchor] = [match[0], match[1]!, match[2]!]
        const target = file === "" ? source : path.normalize(path.join(path.dirname(source), file))
        const anchors = targets.get(target)
        if (anchors === undefined) continue
        if (!anchors.has(anchor)) broken.push(`${source}: ${link}`)
      }
    }
    assert.deepStrictEqual(broken, [], "links to a heading that is not there")
  })
})
