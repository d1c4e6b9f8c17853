/**
 * Vitest global setup: checks first that the machine has what the selected test files need
 * (`prerequisites.ts`: one line and exit 1 if not, instead of one error per test); then
 * creates the run directory in which every test worker records the
 * pid of each redis-server it starts, and SIGKILLs every one still alive at teardown —
 * whatever happened to the worker that started it.
 */
import type { TestProject } from "vitest/node"
import { CHROMIUM, check } from "./prerequisites.js"
import { createRunDir, RUN_DIR_ENV, reapStaleRunDirs, removeRunDir } from "./processes.js"

export default async function setup(project: TestProject) {
  // The files of this run: those matching the command line's filters (Vitest keeps them
  // as `filenamePattern`; without it, every file is checked).
  const filters = (project.vitest as { readonly filenamePattern?: ReadonlyArray<string> }).filenamePattern
  const { testFiles } = await project.globTestFiles(filters === undefined ? [] : [...filters])
  const line = check(testFiles, { PATH: process.env.PATH ?? "", chromium: CHROMIUM })
  if (line !== undefined) {
    process.stderr.write(`${line}\n`)
    process.exit(1)
  }
  const stale = reapStaleRunDirs()
  if (stale.length > 0) {
    console.warn(
      `leasehold test setup: killed ${stale.length} redis-server(s) left by an earlier run: ${stale.join(", ")}`
    )
  }
  const dir = createRunDir()
  // Workers are forked after this point and inherit the environment.
  process.env[RUN_DIR_ENV] = dir
  // If the main process exits without running the teardown (it does when a worker dies
  // abruptly), reap on the way out.
  const onExit = () => removeRunDir(dir)
  process.prependOnceListener("exit", onExit)
  return () => {
    process.off("exit", onExit)
    const killed = removeRunDir(dir)
    if (killed.length > 0) {
      console.warn(`leasehold test teardown: killed ${killed.length} leftover redis-server(s): ${killed.join(", ")}`)
    }
  }
}
