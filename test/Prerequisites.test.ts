/**
 * The check that runs once before the suite: a machine without redis-server or chromium
 * gets one line naming what is missing and how to install it, and a non-zero exit,
 * instead of one error per test.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { check } from "./support/prerequisites.js"

const root = path.resolve(import.meta.dirname, "..")

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** `node <args>` in the repository, with `PATH` set to a directory that holds nothing. */
const withoutTools = (args: ReadonlyArray<string>): Effect.Effect<Run> =>
  Effect.acquireUseRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "leasehold-empty-path-"))),
    (empty) =>
      Effect.promise(
        () =>
          new Promise<Run>((resolve) => {
            execFile(
              process.execPath,
              [...args],
              // a run directory of this run must not be inherited: the child's is its own
              { cwd: root, env: { ...process.env, PATH: empty, LEASEHOLD_TEST_REDIS_RUN_DIR: "" }, timeout: 60_000 },
              (error, stdout, stderr) =>
                resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })
            )
          })
      ),
    (empty) => Effect.sync(() => fs.rmSync(empty, { recursive: true, force: true }))
  )

const lines = (text: string) => text.split("\n").filter((line) => line.length > 0)

describe("test prerequisites", () => {
  it.effect("without redis-server on PATH: one line naming it and how to install it, exit 1", () =>
    Effect.gen(function* () {
      const run = yield* withoutTools([
        "--import",
        "tsx",
        "test/support/prerequisites.ts",
        "test/Store.redis.test.ts",
        "test/Supervisor.test.ts"
      ])
      assert.strictEqual(run.code, 1)
      const [line, ...rest] = lines(run.stderr)
      assert.deepStrictEqual(rest, [])
      assert.include(line, "missing redis-server (needed by 1 test file)")
      assert.include(line, "apt-get install redis-server")
      assert.strictEqual(run.stdout, "")
    })
  )

  it.effect("files that start no server need no redis-server", () =>
    Effect.gen(function* () {
      const run = yield* withoutTools(["--import", "tsx", "test/support/prerequisites.ts", "test/Supervisor.test.ts"])
      assert.deepStrictEqual(run, { code: 0, stdout: "", stderr: "" })
    })
  )

  it.effect("vitest stops before any test file, with the one line", () =>
    Effect.gen(function* () {
      const run = yield* withoutTools(["node_modules/vitest/vitest.mjs", "run", "test/Store.redis.test.ts"])
      assert.notStrictEqual(run.code, 0)
      const found = lines(run.stderr).filter((line) => line.includes("redis-server"))
      assert.strictEqual(found.length, 1)
      assert.include(
        found[0],
        "missing redis-server (needed by 1 test file): install with `apt-get install redis-server`"
      )
      // no test ran, so none failed one by one
      assert.notInclude(run.stdout + run.stderr, "could not be spawned")
      assert.notInclude(run.stdout, "Test Files")
    })
  )

  it("the browser test needs chromium, found where it launches it", () => {
    const browser = path.join(root, "test/app/browser.test.ts")
    const line = check([browser], { PATH: process.env.PATH ?? "", chromium: "/nonexistent/chromium" })
    assert.isDefined(line)
    assert.include(line, "chromium (needed by 1 test file)")
    assert.include(line, "apt-get install chromium")
    assert.isUndefined(check([path.join(root, "test/Supervisor.test.ts")], { PATH: "", chromium: "/nonexistent" }))
  })
})
