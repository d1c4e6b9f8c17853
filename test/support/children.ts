/**
 * Real Node worker processes for cross-process tests, run with tsx so they load the
 * TypeScript sources directly. Each child is killed when the test's scope closes.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { waitUntil } from "./waitUntil.js"

export interface Child {
  readonly pid: number
  /** Every line printed so far. */
  readonly lines: ReadonlyArray<string>
  /** Wait for a line matching `pattern` (fails the test after `ms`). */
  readonly waitFor: (pattern: RegExp, ms?: number) => Effect.Effect<string>
  readonly exited: Effect.Effect<number | null>
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<void>
}

const root = path.resolve(import.meta.dirname, "../..")

export const spawnChild = (script: string, env: Record<string, string>): Effect.Effect<Child, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", script], {
        cwd: root,
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "pipe"]
      })
      const lines: Array<string> = []
      const listeners = new Set<() => void>()
      let buffer = ""
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        buffer += chunk
        const parts = buffer.split("\n")
        buffer = parts.pop() ?? ""
        lines.push(...parts.map((line) => line.trim()).filter((line) => line.length > 0))
        for (const listener of listeners) listener()
      })
      let stderr = ""
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
        stderr += chunk
      })
      const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
      const waitFor = (pattern: RegExp, ms = 20_000) =>
        waitUntil(
          listeners,
          () => lines.find((line) => pattern.test(line)),
          ms,
          () => `child ${child.pid}: no line matching ${pattern} within ${ms} ms; stderr: ${stderr.slice(-2000)}`
        )
      return {
        pid: child.pid!,
        lines,
        waitFor,
        exited: Effect.promise(() => exit),
        kill: (signal: NodeJS.Signals) =>
          Effect.sync(() => {
            child.kill(signal)
          }),
        child
      }
    }),
    (child) =>
      Effect.promise(async () => {
        if (child.child.exitCode === null && child.child.signalCode === null) {
          child.child.kill("SIGKILL")
          await new Promise((resolve) => child.child.once("exit", resolve))
        }
      })
  )
