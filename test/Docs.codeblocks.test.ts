/**
 * Every `ts` code block of README.md and docs/*.md compiles against the library, as a user
 * would copy it: each block is a module of its own, importing `leasehold` by name, under
 * the project's strict compiler options.
 *
 * A block that is deliberately a fragment says so in its fence:
 * - ```` ```ts fragment ````: checked after a prelude that imports Effect's and leasehold's
 *   modules (and, when an HTML comment `<!-- prelude: … -->` stands on the line before the
 *   fence, that code too);
 * - ```` ```ts continued ````: checked after the file's previous `ts` block.
 *
 * The README has no fragments: each of its blocks is a whole file of `examples/`, quoted.
 */

import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import ts from "typescript"

const root = path.resolve(import.meta.dirname, "..")

interface Block {
  readonly file: string
  readonly line: number
  readonly kind: "whole" | "fragment" | "continued"
  readonly code: string
  readonly prelude: string
}

const fencePattern = /^(\s*)```(ts|typescript)\b\s*(.*)$/

/** The `ts` blocks of one markdown file, dedented to their fence. */
const blocksOf = (file: string): ReadonlyArray<Block> => {
  const lines = fs.readFileSync(path.join(root, file), "utf8").split("\n")
  const blocks: Array<Block> = []
  for (let i = 0; i < lines.length; i++) {
    const open = fencePattern.exec(lines[i] ?? "")
    if (open === null) continue
    const indent = open[1] ?? ""
    const info = (open[3] ?? "").trim()
    const kind = info === "fragment" ? "fragment" : info === "continued" ? "continued" : "whole"
    if (info !== "" && kind === "whole") throw new Error(`${file}:${i + 1}: unknown fence info "${info}"`)
    const preludeLine = /^\s*<!--\s*prelude:(.*)-->\s*$/.exec(lines[i - 1] ?? "")
    const body: Array<string> = []
    let j = i + 1
    for (; j < lines.length && !(lines[j] ?? "").trim().startsWith("```"); j++) {
      const text = lines[j] ?? ""
      body.push(text.startsWith(indent) ? text.slice(indent.length) : text.trimStart())
    }
    blocks.push({ file, line: i + 1, kind, code: `${body.join("\n")}\n`, prelude: preludeLine?.[1]?.trim() ?? "" })
    i = j
  }
  return blocks
}

const fragmentPrelude = [
  `import { Config, Duration, Effect, Layer, Option, Schedule, Schema, Stream } from "effect"`,
  `import { Health, InstanceId, LeaseholdConfig, Lock, Mailbox, MemoryStore, NodeMain, Prometheus, RedisStore, StateManager, TokenManager, Worker } from "leasehold"`
].join("\n")

/** The source a block is checked as: its own code, after what it presupposes. */
const sourceOf = (block: Block, previous: Block | undefined): string => {
  if (block.kind === "whole") return block.code
  if (block.kind === "continued") {
    if (previous === undefined) throw new Error(`${block.file}:${block.line}: "continued" with no block before it`)
    return `${sourceOf(previous, undefined)}\n${block.code}`
  }
  return `${fragmentPrelude}\n${block.prelude}\n${block.code}`
}

const markdownFiles = (): ReadonlyArray<string> => [
  "README.md",
  ...fs
    .readdirSync(path.join(root, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`)
]

/** Type-check the given sources as modules at the repository's root; the diagnostics per name. */
const typeCheck = (sources: ReadonlyMap<string, string>): Map<string, ReadonlyArray<string>> => {
  const configFile = ts.readConfigFile(path.join(root, "tsconfig.json"), ts.sys.readFile)
  const parsed = ts.parseJsonConfigFileContent(configFile.config, ts.sys, root)
  // A fragment's prelude imports more than it uses; the rest of the strict options stand.
  const options: ts.CompilerOptions = { ...parsed.options, noUnusedLocals: false, noEmit: true, declaration: false }
  const virtual = new Map([...sources].map(([name, text]) => [path.join(root, ".docblocks", name), text] as const))
  const host = ts.createCompilerHost(options)
  const { fileExists, readFile, getSourceFile } = host
  host.fileExists = (file) => virtual.has(file) || fileExists.call(host, file)
  host.readFile = (file) => virtual.get(file) ?? readFile.call(host, file)
  host.getSourceFile = (file, language, onError, create) => {
    const text = virtual.get(file)
    return text === undefined
      ? getSourceFile.call(host, file, language, onError, create)
      : ts.createSourceFile(file, text, language, true)
  }
  const program = ts.createProgram([...virtual.keys()], options, host)
  const result = new Map<string, ReadonlyArray<string>>()
  for (const [name] of sources) {
    const source = program.getSourceFile(path.join(root, ".docblocks", name))
    if (source === undefined) throw new Error(`not compiled: ${name}`)
    const diagnostics = [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)]
    result.set(
      name,
      diagnostics.map((d) => {
        const at = d.start === undefined ? "" : `${source.getLineAndCharacterOfPosition(d.start).line + 1}: `
        return `${at}${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`
      })
    )
  }
  return result
}

const exampleFiles = (dir: string): ReadonlyArray<string> =>
  fs
    .readdirSync(path.join(root, dir), { withFileTypes: true })
    .flatMap((entry) =>
      entry.isDirectory()
        ? exampleFiles(`${dir}/${entry.name}`)
        : entry.name.endsWith(".ts")
          ? [`${dir}/${entry.name}`]
          : []
    )

describe("the docs' code", () => {
  it("every ts block of README.md and docs/*.md compiles against the library", () => {
    const sources = new Map<string, string>()
    for (const file of markdownFiles()) {
      let previous: Block | undefined
      for (const block of blocksOf(file)) {
        sources.set(`${file.replace(/[/.]/g, "_")}_${block.line}.ts`, sourceOf(block, previous))
        previous = block
      }
    }
    assert.isAbove(sources.size, 5)
    const failures = [...typeCheck(sources)].filter(([, diagnostics]) => diagnostics.length > 0)
    assert.deepStrictEqual(
      failures.map(([name, diagnostics]) => `${name}\n  ${diagnostics.join("\n  ")}`),
      []
    )
  }, 180_000)

  it("the README's blocks are whole files of examples/, quoted as they are", () => {
    const examples = new Map(
      exampleFiles("examples").map((file) => [file, fs.readFileSync(path.join(root, file), "utf8")] as const)
    )
    const blocks = blocksOf("README.md")
    assert.isAbove(blocks.length, 0)
    for (const block of blocks) {
      assert.strictEqual(block.kind, "whole", `README.md:${block.line} is a fragment`)
      const quoted = [...examples].find(([, text]) => text === block.code)
      assert.isDefined(quoted, `README.md:${block.line} is not a whole file of examples/`)
    }
  })
})
