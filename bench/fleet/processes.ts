/**
 * The processes of `bench:fleet`: each forked with an IPC channel in a process group of its
 * own, and SIGKILLed with that group when the scope that started it closes (or, failing
 * that, when the driver exits): the workers, the tabs' generators and the API caller never
 * outlive a run, an interrupted one (Ctrl-C) included.
 */
import { type ChildProcess, fork } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

/** A forked process and its IPC channel. */
export interface Child {
  readonly pid: number
  /** Every line it printed (stdout and stderr). */
  readonly lines: ReadonlyArray<string>
  readonly tell: (message: object) => Effect.Effect<void>
  /** Send `message` and wait for the first reply of `type`. */
  readonly ask: <A = any>(message: object, type: string) => Effect.Effect<A>
  /** Wait for a printed line matching `pattern` (dies on exit or after `ms`). */
  readonly waitFor: (pattern: RegExp, ms: number) => Effect.Effect<void>
  /** SIGTERM, and wait for the exit (its group SIGKILLed after 20 s): a CPU profile is written then. */
  readonly stop: Effect.Effect<void>
}

const live = new Set<ChildProcess>()
const killGroup = (child: ChildProcess) => {
  try {
    process.kill(-child.pid!, "SIGKILL")
  } catch {
    child.kill("SIGKILL")
  }
}
process.on("exit", () => {
  for (const child of live) killGroup(child)
})

/** Fork `entry` under node with `execArgv` and `env` added to the driver's. */
export const start = (
  entry: string,
  execArgv: ReadonlyArray<string>,
  env: Record<string, string | undefined>
): Effect.Effect<Child, never, Scope.Scope> =>
  Effect.gen(function* () {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = fork(entry, [], {
          execArgv: [...execArgv],
          env: { ...process.env, ...env },
          stdio: ["ignore", "pipe", "pipe", "ipc"],
          detached: true
        })
        live.add(child)
        return child
      }),
      (child) =>
        Effect.promise(async () => {
          live.delete(child)
          if (child.exitCode !== null || child.signalCode !== null) return
          const exited = new Promise((resolve) => child.once("exit", resolve))
          killGroup(child)
          await exited
        })
    )
    const lines: Array<string> = []
    const onLine = new Set<() => void>()
    // FLEET_LOG_DIR: every process's lines kept whole in a file of its own, for a diagnosis
    const logDir = process.env.FLEET_LOG_DIR
    const logFile =
      logDir === undefined || logDir === "" ? undefined : path.join(logDir, `${path.basename(entry)}-${child.pid}.log`)
    for (const stream of [child.stdout!, child.stderr!]) {
      if (logFile !== undefined) stream.on("data", (chunk: string) => fs.appendFileSync(logFile, chunk))
      let buffer = ""
      stream.setEncoding("utf8")
      stream.on("data", (chunk: string) => {
        buffer += chunk
        const parts = buffer.split("\n")
        buffer = parts.pop() ?? ""
        lines.push(...parts.filter((line) => line.trim() !== ""))
        if (lines.length > 500) lines.splice(0, lines.length - 500)
        for (const listener of [...onLine]) listener()
      })
    }
    const exitedEarly = (what: string) =>
      `${entry} (pid ${child.pid}) exited (${child.exitCode ?? child.signalCode}) ${what}:\n${lines.slice(-30).join("\n")}`
    const exited = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve()
      else child.once("exit", () => resolve())
    })
    return {
      pid: child.pid!,
      stop: Effect.promise(async () => {
        child.kill("SIGTERM")
        const timer = setTimeout(() => killGroup(child), 20_000)
        await exited
        clearTimeout(timer)
      }),
      lines,
      tell: (message) =>
        Effect.sync(() => {
          child.send(message)
        }),
      ask: <A>(message: object, type: string) =>
        Effect.callback<A>((resume) => {
          const onMessage = (reply: { type?: string }) => {
            if (reply.type !== type) return
            cleanup()
            resume(Effect.succeed(reply as A))
          }
          const onExit = () => {
            cleanup()
            resume(Effect.die(exitedEarly(`before its answer to ${JSON.stringify(message).slice(0, 80)}`)))
          }
          const cleanup = () => {
            child.off("message", onMessage)
            child.off("exit", onExit)
          }
          child.on("message", onMessage)
          child.once("exit", onExit)
          child.send(message)
          return Effect.sync(cleanup)
        }),
      waitFor: (pattern, ms) =>
        Effect.callback<void>((resume) => {
          const check = () => {
            if (lines.some((line) => pattern.test(line))) done(Effect.void)
            else if (child.exitCode !== null || child.signalCode !== null)
              done(Effect.die(exitedEarly(`before printing ${pattern}`)))
          }
          const timer = setTimeout(
            () => done(Effect.die(`${entry}: no line matching ${pattern} within ${ms} ms:\n${lines.join("\n")}`)),
            ms
          )
          const cleanup = () => {
            clearTimeout(timer)
            onLine.delete(check)
            child.off("exit", check)
          }
          const done = (effect: Effect.Effect<void>) => {
            cleanup()
            resume(effect)
          }
          onLine.add(check)
          child.on("exit", check)
          check()
          return Effect.sync(cleanup)
        })
    }
  })
