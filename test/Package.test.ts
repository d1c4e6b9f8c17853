/**
 * leasehold as a new user gets it: the packed library installed into a fresh application
 * beside `effect` and `@effect/platform-node`, with one copy of `effect` in the app (a peer
 * dependency, not a second copy under leasehold), and examples/minimal/main.ts copied in
 * unchanged: type-checked under strict `tsc`, then serving `POST /api/bump`. The tarball
 * holds the built library, its sources, the browser client, the README, the LICENSE and the
 * CHANGELOG, and nothing of the tests, benchmarks or examples.
 *
 * It packs with `npm pack` (which builds `dist/`) and installs from the npm registry.
 *
 * And one version throughout: package.json's, package-lock.json's, the command's
 * `--version`, the CHANGELOG's newest entry, and no `@since` in src/ beyond it.
 */
import { execFile, spawn } from "node:child_process"
import * as fsSync from "node:fs"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as RedisServer from "./support/RedisServer.js"

const run = promisify(execFile)
const root = path.resolve(import.meta.dirname, "..")
const npm = "npm"

const versionOf = async (name: string): Promise<string> =>
  JSON.parse(await fs.readFile(path.join(root, "node_modules", name, "package.json"), "utf8")).version

/** A fresh directory, removed with the test's scope. */
const tempDir = (prefix: string): Effect.Effect<string, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), prefix))),
    (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
  )

/** Run a command in `cwd`; its output is kept for the failure message. */
const sh = (cwd: string, command: string, args: ReadonlyArray<string>) =>
  Effect.tryPromise({
    try: () => run(command, [...args], { cwd, maxBuffer: 16 * 1024 * 1024 }),
    catch: (error) => {
      const e = error as { stdout?: string; stderr?: string; message: string }
      return new Error(`${command} ${args.join(" ")} in ${cwd}: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`)
    }
  }).pipe(Effect.orDie)

describe("the packed library in a fresh Effect 4 application", () => {
  it.live(
    "one copy of effect; examples/minimal type-checks under strict tsc and serves POST /api/bump",
    () =>
      Effect.gen(function* () {
        const packs = yield* tempDir("leasehold-pack-")
        const app = yield* tempDir("leasehold-app-")
        const { stdout } = yield* sh(root, npm, ["pack", "--silent", "--pack-destination", packs])
        const tarball = path.join(packs, stdout.trim().split("\n").pop()!)

        // what the tarball holds, as npm wrote it (every entry under `package/`)
        const { stdout: listing } = yield* sh(packs, "tar", ["-tzf", tarball])
        const entries = listing
          .trim()
          .split("\n")
          .map((entry) => entry.replace(/^package\//, ""))
        const topLevel = [...new Set(entries.map((entry) => entry.split("/")[0]!))].sort()
        deepStrictEqual(topLevel, ["CHANGELOG.md", "LICENSE", "README.md", "client", "dist", "package.json", "src"])
        for (const file of [
          "dist/index.js",
          "dist/index.d.ts",
          "dist/bin.js",
          "client/index.js",
          "client/index.d.ts"
        ]) {
          assert.include(entries, file, `${file} is not in the tarball`)
        }
        assert.deepStrictEqual(
          entries.filter((entry) => /(^|\/)(test|bench|examples)\/|\.test\.[jt]s$/.test(entry)),
          [],
          "tests, benchmarks or examples in the tarball"
        )
        const [effect, platformNode, typesNode] = yield* Effect.promise(() =>
          Promise.all([versionOf("effect"), versionOf("@effect/platform-node"), versionOf("@types/node")])
        )
        yield* Effect.promise(async () => {
          await fs.writeFile(
            path.join(app, "package.json"),
            JSON.stringify({
              name: "fresh-app",
              private: true,
              type: "module",
              dependencies: {
                effect: effect,
                "@effect/platform-node": platformNode,
                leasehold: `file:${tarball}`
              },
              devDependencies: { "@types/node": typesNode }
            })
          )
          await fs.writeFile(
            path.join(app, "tsconfig.json"),
            JSON.stringify({
              compilerOptions: {
                target: "ES2022",
                module: "NodeNext",
                moduleResolution: "NodeNext",
                strict: true,
                exactOptionalPropertyTypes: true,
                noUncheckedIndexedAccess: true,
                skipLibCheck: false,
                types: ["node"],
                outDir: "out"
              },
              include: ["main.ts"]
            })
          )
          // unchanged: it imports leasehold by name, as any app does
          await fs.copyFile(path.join(root, "examples/minimal/main.ts"), path.join(app, "main.ts"))
        })
        yield* sh(app, npm, ["install", "--no-audit", "--no-fund", "--prefer-offline", "--ignore-scripts"])

        // one copy of effect, the app's
        const { stdout: copies } = yield* sh(app, npm, ["ls", "effect", "--all", "--parseable"])
        deepStrictEqual(
          [...new Set(copies.trim().split("\n"))].map((dir) => path.relative(app, dir)),
          [path.join("node_modules", "effect")]
        )

        // strict tsc, with the library's own declarations checked too (no skipLibCheck)
        yield* sh(app, process.execPath, [path.join(root, "node_modules/typescript/bin/tsc"), "-p", "."])

        const port = yield* Effect.promise(RedisServer.freePort)
        const child = yield* Effect.acquireRelease(
          Effect.sync(() =>
            spawn(process.execPath, ["out/main.js"], {
              cwd: app,
              env: { ...process.env, PORT: String(port), LEASEHOLD_REDIS_URL: "", LEASEHOLD_DATA_DIR: "" },
              stdio: ["ignore", "pipe", "pipe"]
            })
          ),
          (child) =>
            Effect.promise(async () => {
              if (child.exitCode !== null || child.signalCode !== null) return
              const exited = new Promise((resolve) => child.once("exit", resolve))
              child.kill("SIGKILL")
              await exited
            })
        )
        let output = ""
        child.stdout.on("data", (chunk) => (output += chunk))
        child.stderr.on("data", (chunk) => (output += chunk))
        const exited = new Promise<number | null>((resolve) => child.once("exit", resolve))
        yield* Effect.promise(async () => {
          const deadline = Date.now() + 30_000
          while (!/Listening on http/.test(output)) {
            if (Date.now() > deadline || child.exitCode !== null) {
              throw new Error(`the app did not start:\n${output}`)
            }
            await new Promise((resolve) => setTimeout(resolve, 50))
          }
        })
        const bump = () =>
          Effect.promise(async () => {
            const response = await fetch(`http://127.0.0.1:${port}/api/bump?token=pkg-1`, { method: "POST" })
            return [response.status, await response.json()] as const
          })
        deepStrictEqual(yield* bump(), [200, { token: "pkg-1", n: 1 }])
        deepStrictEqual(yield* bump(), [200, { token: "pkg-1", n: 2 }])
        child.kill("SIGINT")
        assert.strictEqual(yield* Effect.promise(() => exited), 0, output)
      }),
    300_000
  )
})

/** `major.minor.patch` as numbers, for comparison. */
const semver = (version: string): readonly [number, number, number] => {
  const match = /^(\d+)\.(\d+)\.(\d+)$/.exec(version)
  if (match === null) throw new Error(`not a version: ${version}`)
  return [Number(match[1]), Number(match[2]), Number(match[3])]
}

const atMost = (version: string, bound: string): boolean => {
  const [a, b] = [semver(version), semver(bound)]
  for (let i = 0; i < 3; i++) {
    if (a[i]! !== b[i]!) return a[i]! < b[i]!
  }
  return true
}

/** Every `.ts` file under a directory. */
const sources = (dir: string): ReadonlyArray<string> =>
  fsSync
    .readdirSync(path.join(root, dir), { recursive: true, encoding: "utf8" })
    .filter((file) => file.endsWith(".ts"))
    .map((file) => path.join(dir, file))

describe("the package's version", () => {
  const read = (file: string) => fsSync.readFileSync(path.join(root, file), "utf8")
  const version: string = JSON.parse(read("package.json")).version

  it("package-lock.json, the command's --version and the CHANGELOG's newest entry name package.json's", () => {
    const lock = JSON.parse(read("package-lock.json"))
    assert.strictEqual(lock.version, version, "package-lock.json's version")
    assert.strictEqual(lock.packages[""].version, version, "package-lock.json's root package")
    assert.include(read("src/bin.ts"), `version: "${version}"`, "src/bin.ts: the command's --version")
    const newest = /^## (\S+)/m.exec(read("CHANGELOG.md"))?.[1]
    assert.strictEqual(newest, version, "the CHANGELOG's newest entry")
  })

  it("no @since in src/ names a version after package.json's", () => {
    const tags = sources("src").flatMap((file) =>
      [...read(file).matchAll(/@since\s+(\S+)/g)].map((match) => ({ file, since: match[1]! }))
    )
    assert.isAbove(tags.length, 100, "the @since tags were found")
    assert.deepStrictEqual(
      tags.filter((tag) => !atMost(tag.since, version)),
      [],
      `@since after ${version}`
    )
  })
})
