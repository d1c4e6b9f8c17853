/**
 * The `leasehold` command run as a real process (from the sources, through tsx).
 */
import { execFile } from "node:child_process"
import * as path from "node:path"
import * as Effect from "effect/Effect"

const root = path.resolve(import.meta.dirname, "../..")

export interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Run `leasehold <args>`; `LEASEHOLD_REDIS_URL` is unset unless `env` sets it. */
export const leasehold = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Effect.Effect<Run> =>
  Effect.promise(
    () =>
      new Promise<Run>((resolve) => {
        execFile(
          process.execPath,
          ["--import", "tsx", "src/bin.ts", ...args],
          { cwd: root, env: { ...process.env, LEASEHOLD_REDIS_URL: "", ...env }, timeout: 60_000 },
          (error, stdout, stderr) =>
            resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })
        )
      })
  )
