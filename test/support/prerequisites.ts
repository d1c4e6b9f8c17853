/**
 * What the test files need from the machine, checked once before they run (by
 * `globalSetup.ts`): `redis-server` on PATH for every file that starts a server, and
 * Debian's chromium for the browser test. A file's needs are read from its source and
 * the test modules it imports, so that a run of memory-only files needs neither.
 *
 * Plain Node on purpose: `globalSetup` runs in Vitest's main process. Run directly
 * (`node --import tsx test/support/prerequisites.ts [test files]`, every test file when
 * none is given), it prints the one line and exits 1 when something is missing.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** Where the browser test finds its browser (test/app/browser.test.ts). */
export const CHROMIUM = "/usr/bin/chromium"

interface Prerequisite {
  readonly name: string
  /** The Debian package that provides it. */
  readonly debian: string
  /** A source that needs it imports what uses it. */
  readonly marker: RegExp
  readonly present: (where: Where) => boolean
}

/** Where to look: the PATH, and the browser's path. */
export interface Where {
  readonly PATH: string
  readonly chromium: string
}

const onPath = (command: string, PATH: string) =>
  PATH.split(path.delimiter).some((dir) => {
    if (dir === "") return false
    try {
      fs.accessSync(path.join(dir, command), fs.constants.X_OK)
      return true
    } catch {
      return false
    }
  })

const prerequisites: ReadonlyArray<Prerequisite> = [
  {
    name: "redis-server",
    debian: "redis-server",
    marker: /from\s+"[^"]*\/(?:RedisServer|RedisCluster)\.js"/,
    present: (where) => onPath("redis-server", where.PATH)
  },
  {
    name: "chromium",
    debian: "chromium",
    marker: /from\s+"playwright-core"/,
    present: (where) => {
      try {
        fs.accessSync(where.chromium, fs.constants.X_OK)
        return true
      } catch {
        return false
      }
    }
  }
]

const importPattern = /(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g

/** The source of `file` and of the test modules it imports (relative imports outside src/). */
const sourcesOf = (file: string, seen: Set<string>): Array<string> => {
  if (seen.has(file)) return []
  seen.add(file)
  let text: string
  try {
    text = fs.readFileSync(file, "utf8")
  } catch {
    return []
  }
  const sources = [text]
  for (const match of text.matchAll(importPattern)) {
    const spec = match[1]!
    if (spec.includes("/src/")) continue
    const target = path.resolve(path.dirname(file), spec.replace(/\.js$/, ".ts"))
    sources.push(...sourcesOf(target, seen))
  }
  return sources
}

/** The prerequisites that `files` need and `where` lacks, each with the number of files that need it. */
export const missing = (
  files: ReadonlyArray<string>,
  where: Where
): Array<{ readonly name: string; readonly debian: string; readonly files: number }> => {
  const sources = files.map((file) => sourcesOf(path.resolve(file), new Set()).join("\n"))
  return prerequisites.flatMap((p) => {
    const needing = sources.filter((source) => p.marker.test(source)).length
    return needing > 0 && !p.present(where) ? [{ name: p.name, debian: p.debian, files: needing }] : []
  })
}

/** The one line that says what is missing and how to install it; undefined when nothing is. */
export const check = (files: ReadonlyArray<string>, where: Where): string | undefined => {
  const absent = missing(files, where)
  if (absent.length === 0) return undefined
  const what = absent.map((p) => `${p.name} (needed by ${p.files} test file${p.files === 1 ? "" : "s"})`).join(", ")
  return (
    `leasehold tests: missing ${what}: install with \`apt-get install ${absent.map((p) => p.debian).join(" ")}\`` +
    ` (redis-server on PATH, chromium at ${CHROMIUM}; .ci/run installs them)`
  )
}

/** Every test file of the repository. */
export const allTestFiles = (root: string): Array<string> =>
  (fs.readdirSync(path.join(root, "test"), { recursive: true, encoding: "utf8" }) as Array<string>)
    .filter((name) => name.endsWith(".test.ts"))
    .map((name) => path.join(root, "test", name))

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const given = process.argv.slice(2)
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
  const line = check(given.length > 0 ? given : allTestFiles(root), {
    PATH: process.env.PATH ?? "",
    chromium: CHROMIUM
  })
  if (line !== undefined) {
    process.stderr.write(`${line}\n`)
    process.exit(1)
  }
}
