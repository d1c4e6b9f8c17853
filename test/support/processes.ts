/**
 * Bookkeeping of the redis-server processes the test harness starts, so that none
 * survives a run: every pid is recorded in the run directory that `globalSetup.ts`
 * creates; its teardown (and the next run's setup, for a run whose main process died)
 * SIGKILLs every recorded process that is still alive.
 *
 * Plain Node on purpose: `globalSetup` runs in Vitest's main process.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** The environment variable through which test workers find the run directory. */
export const RUN_DIR_ENV = "LEASEHOLD_TEST_REDIS_RUN_DIR"

const RUN_DIR_PREFIX = "leasehold-redis-run-"
const OWNER_FILE = "owner"

/** One recorded server process. */
export interface ProcessRecord {
  readonly pid: number
  readonly port: number
  /** The pid of the test worker that started it. */
  readonly worker: number
}

/** Create a fresh run directory owned by this process. */
export const createRunDir = (): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), RUN_DIR_PREFIX))
  fs.writeFileSync(path.join(dir, OWNER_FILE), String(process.pid))
  return dir
}

const recordPath = (dir: string, pid: number) => path.join(dir, `${pid}.json`)

/** Record a started process (synchronously: it must be on disk before anything can fail). */
export const recordProcess = (dir: string, record: ProcessRecord): void => {
  fs.writeFileSync(recordPath(dir, record.pid), JSON.stringify(record))
}

/** Forget a process that is known to have exited. */
export const forgetProcess = (dir: string, pid: number): void => {
  fs.rmSync(recordPath(dir, pid), { force: true })
}

/** The processes recorded in a run directory. */
export const recordedProcesses = (dir: string): ReadonlyArray<ProcessRecord> => {
  let names: ReadonlyArray<string>
  try {
    names = fs.readdirSync(dir)
  } catch {
    return []
  }
  const records: Array<ProcessRecord> = []
  for (const name of names) {
    if (!name.endsWith(".json")) continue
    try {
      const parsed = JSON.parse(fs.readFileSync(path.join(dir, name), "utf8")) as ProcessRecord
      if (Number.isInteger(parsed.pid) && Number.isInteger(parsed.port)) records.push(parsed)
    } catch {
      // a half-written record: its process is also in the worker's own bookkeeping
    }
  }
  return records
}

/** Whether a process with this pid exists (a stopped or zombie process counts). */
export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * The command line of a process, to make sure a recorded pid was not reused by an
 * unrelated process before it is killed. `undefined` when it cannot be read.
 */
const commandLine = (pid: number): string | undefined => {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ")
  } catch {
    if (fs.existsSync("/proc/self")) return undefined
  }
  try {
    return execFileSync("ps", ["-p", String(pid), "-o", "command="], { encoding: "utf8" })
  } catch {
    return undefined
  }
}

/** Whether `pid` is (still) the redis-server this record describes. */
export const isRecordedServer = (record: ProcessRecord): boolean => {
  if (!isAlive(record.pid)) return false
  const cmd = commandLine(record.pid)
  return cmd?.includes("redis-server") === true && cmd.includes(String(record.port))
}

/**
 * SIGKILL every recorded server of a run directory that is still alive; returns the pids
 * it killed. Records are removed.
 */
export const reapRunDir = (dir: string): ReadonlyArray<number> => {
  const killed: Array<number> = []
  for (const record of recordedProcesses(dir)) {
    if (isRecordedServer(record)) {
      try {
        process.kill(record.pid, "SIGKILL")
        killed.push(record.pid)
      } catch {
        // exited meanwhile
      }
    }
    forgetProcess(dir, record.pid)
  }
  return killed
}

/**
 * Reap the run directories of earlier runs whose main process is gone (a run killed
 * before its teardown), and remove them.
 */
export const reapStaleRunDirs = (): ReadonlyArray<number> => {
  const killed: Array<number> = []
  let names: ReadonlyArray<string>
  try {
    names = fs.readdirSync(os.tmpdir())
  } catch {
    return killed
  }
  for (const name of names) {
    if (!name.startsWith(RUN_DIR_PREFIX)) continue
    const dir = path.join(os.tmpdir(), name)
    let owner: number
    try {
      owner = Number(fs.readFileSync(path.join(dir, OWNER_FILE), "utf8"))
    } catch {
      continue
    }
    if (!Number.isInteger(owner) || owner === process.pid || isAlive(owner)) continue
    killed.push(...reapRunDir(dir))
    fs.rmSync(dir, { recursive: true, force: true })
  }
  return killed
}

/** Remove a run directory after reaping it. */
export const removeRunDir = (dir: string): ReadonlyArray<number> => {
  const killed = reapRunDir(dir)
  fs.rmSync(dir, { recursive: true, force: true })
  return killed
}
