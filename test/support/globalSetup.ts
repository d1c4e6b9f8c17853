/**
 * Vitest global setup: creates the run directory in which every test worker records the
 * pid of each redis-server it starts, and SIGKILLs every one still alive at teardown —
 * whatever happened to the worker that started it.
 */
import { createRunDir, RUN_DIR_ENV, reapStaleRunDirs, removeRunDir } from "./processes.js"

export default function setup() {
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
