/**
 * Test harness: real `redis-server` processes on free loopback ports, one temp directory
 * each, no persistence. Never the shared Redis on 6379.
 *
 * A server belongs to the `Scope` it was started in and is SIGKILLed when that scope
 * closes. Two more nets catch a process whose scope never closes: a process `exit`
 * handler in the test worker, and the pid record in the run directory that
 * `globalSetup.ts` reaps at teardown (see `processes.ts`).
 *
 * ```ts
 * const server = yield* RedisServer.start()
 * yield* server.kill          // SIGKILL, waits until the process is gone
 * yield* server.restart       // same port, waits for PING
 * ```
 */

import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { setTimeout as sleep } from "node:timers/promises"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { createRunDir, forgetProcess, RUN_DIR_ENV, recordProcess } from "./processes.js"
import { type Access, type Reply, ReplyError, sendCommand } from "./resp.js"

export type { Reply } from "./resp.js"

/**
 * A harness operation failed: a raw command got an error reply or no reply.
 */
export class RedisServerError extends Data.TaggedError("RedisServerError")<{
  readonly operation: string
  readonly message: string
  readonly cause?: unknown
}> {}

/** Options of `start`. */
export interface StartOptions {
  /** Extra `redis-server` arguments, e.g. `["--maxmemory", "1mb"]`. */
  readonly extraArgs?: ReadonlyArray<string>
  /**
   * A Cluster node: a cluster bus port of its own (`--cluster-port`), picked with the data
   * port on every attempt (either may be taken between probing and binding), kept by
   * `restart`.
   */
  readonly clusterBus?: boolean
  /**
   * A configuration file's text, written to `server.conf` in the server's directory and
   * passed first (a Sentinel needs one: it rewrites it with what it learns). `restart`
   * reuses the file as the server left it.
   */
  readonly configFile?: string
  /**
   * Serve TLS only, on the server's port (`--port 0 --tls-port <port>`), with this
   * certificate and key, the certificate also the CA of `--tls-replication yes` (a replica,
   * or a Sentinel, reaches the servers with TLS) and of the harness's own commands;
   * clients present no certificate.
   */
  readonly tls?: { readonly cert: string; readonly key: string }
  /** `requirepass` and `masterauth`; the harness's commands authenticate with it. */
  readonly password?: string
}

/** A running (or deliberately stopped) redis-server owned by a test. */
export interface RedisServer {
  /** The loopback port; `restart` reuses it. */
  readonly port: number
  /** `redis://127.0.0.1:<port>` (`rediss://` with `tls`). */
  readonly url: string
  /** The temp directory the server runs in. */
  readonly dir: string
  /** The pid of the current process, `None` while stopped or killed. */
  readonly pid: Effect.Effect<Option.Option<number>>
  /** Graceful shutdown (SIGTERM, SIGCONT in case it is paused); waits for the exit. */
  readonly stop: Effect.Effect<void>
  /** SIGKILL; waits until the process is gone. */
  readonly kill: Effect.Effect<void>
  /** SIGSTOP: the process keeps its sockets but answers nothing. */
  readonly pause: Effect.Effect<void>
  /** SIGCONT after `pause` (nothing when the server is not running). */
  readonly resume: Effect.Effect<void>
  /**
   * Start again on the same port (stopping the current process first if there is one)
   * and wait until it answers PING. The data is gone: there is no persistence.
   */
  readonly restart: Effect.Effect<void>
  /** `CLIENT KILL TYPE <type>` over a separate connection; the number of clients killed. */
  readonly clientKill: (type: "normal" | "pubsub") => Effect.Effect<number, RedisServerError>
  /** Run a raw command over a separate connection (an error reply is a failure). */
  readonly command: (...args: ReadonlyArray<string | number>) => Effect.Effect<Reply, RedisServerError>
  /** `command` with an explicit reply timeout. */
  readonly commandWithTimeout: (
    timeoutMs: number,
    ...args: ReadonlyArray<string | number>
  ) => Effect.Effect<Reply, RedisServerError>
  /** Whether the server answers PING within `timeoutMs` (default 200). */
  readonly ping: (timeoutMs?: number) => Effect.Effect<boolean>
  /** `DBSIZE`. */
  readonly dbsize: Effect.Effect<number, RedisServerError>
  /** The number of subscribers of a channel (`PUBSUB NUMSUB`). */
  readonly numsub: (channel: string) => Effect.Effect<number, RedisServerError>
  /** One `INFO` section as key/value pairs. */
  readonly info: (section: string) => Effect.Effect<Readonly<Record<string, string>>, RedisServerError>
  /** The server's recent log output (for diagnostics). */
  readonly logs: Effect.Effect<string>
}

// --- worker-level bookkeeping ---------------------------------------------------------

const liveChildren = new Set<ChildProcess>()
let exitHookInstalled = false

const installExitHook = () => {
  if (exitHookInstalled) return
  exitHookInstalled = true
  // Runs when the worker exits normally or by process.exit; a worker killed by a signal
  // is covered by the run directory that globalSetup reaps.
  process.on("exit", () => {
    for (const child of liveChildren) {
      try {
        child.kill("SIGKILL")
      } catch {
        // already gone
      }
    }
  })
}

let runDirCache: string | undefined

/** The run directory of this test run (see `globalSetup.ts`). */
export const runDir = (): string => {
  if (runDirCache !== undefined) return runDirCache
  // Set by globalSetup before the workers are forked; the harness does not import vitest,
  // so benchmarks can use it too.
  let dir = process.env[RUN_DIR_ENV]
  if (dir === undefined || !fs.existsSync(dir)) {
    // Not started by our vitest config: keep records anyway; the exit hook still applies.
    dir = createRunDir()
  }
  runDirCache = dir
  return dir
}

// --- processes ------------------------------------------------------------------------

interface Running {
  readonly child: ChildProcess
  readonly pid: number
  readonly exited: Promise<void>
  isExited: () => boolean
}

const MAX_LOG_LINES = 200

/** A free loopback port (never 6379), as the kernel hands them out. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.unref()
    probe.on("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      probe.close(() => (port > 0 && port !== 6379 ? resolve(port) : reject(new Error(`unusable port ${port}`))))
    })
  })

let pdeathsigSupported: boolean | undefined

const pdeathsig = (): boolean => {
  if (pdeathsigSupported === undefined) {
    try {
      pdeathsigSupported =
        process.platform === "linux" &&
        execFileSync("setpriv", ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).includes(
          "--pdeathsig"
        )
    } catch {
      pdeathsigSupported = false
    }
  }
  return pdeathsigSupported
}

const spawnServer = (
  port: number,
  dir: string,
  extraArgs: ReadonlyArray<string>,
  log: Array<string>,
  configFile: string | undefined,
  options: StartOptions | undefined
): Running => {
  const tls = options?.tls
  const password = options?.password
  const args = [
    ...(configFile === undefined ? [] : [configFile]),
    ...(tls === undefined
      ? ["--port", String(port)]
      : [
          "--port",
          "0",
          "--tls-port",
          String(port),
          "--tls-cert-file",
          tls.cert,
          "--tls-key-file",
          tls.key,
          "--tls-ca-cert-file",
          tls.cert,
          "--tls-auth-clients",
          "no",
          "--tls-replication",
          "yes"
        ]),
    ...(password === undefined ? [] : ["--requirepass", password, "--masterauth", password]),
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    dir,
    "--daemonize",
    "no",
    "--logfile",
    "",
    ...extraArgs
  ]
  // With `setpriv --pdeathsig KILL` (Linux, util-linux) the kernel kills the server as soon
  // as the worker that started it dies, however it dies; setpriv execs redis-server, so the
  // pid stays the server's.
  const child = pdeathsig()
    ? spawn("setpriv", ["--pdeathsig", "KILL", "--", "redis-server", ...args], { stdio: ["ignore", "pipe", "pipe"] })
    : spawn("redis-server", args, { stdio: ["ignore", "pipe", "pipe"] })
  // a spawn failure is reported through `pid === undefined` below; without a listener the
  // 'error' event would crash the worker
  child.on("error", (error) => log.push(`spawn error: ${error.message}`))
  const pid = child.pid
  if (pid === undefined) {
    throw new Error("redis-server could not be spawned (is it on PATH?)")
  }
  recordProcess(runDir(), { pid, port, worker: process.pid })
  liveChildren.add(child)
  installExitHook()
  let exited = false
  const onOutput = (chunk: Buffer) => {
    for (const line of chunk.toString("utf8").split("\n")) {
      if (line.length === 0) continue
      log.push(`[${pid}] ${line}`)
      if (log.length > MAX_LOG_LINES) log.shift()
    }
  }
  child.stdout?.on("data", onOutput)
  child.stderr?.on("data", onOutput)
  const exitedPromise = new Promise<void>((resolve) => {
    child.once("exit", (code, signal) => {
      exited = true
      log.push(`[${pid}] exited (code ${code}, signal ${signal})`)
      liveChildren.delete(child)
      forgetProcess(runDir(), pid)
      resolve()
    })
  })
  // The worker must be able to exit even if a test leaks a server; the exit hook and the
  // run directory take care of the process then.
  child.unref()
  ;(child.stdout as unknown as { unref?: () => void } | null)?.unref?.()
  ;(child.stderr as unknown as { unref?: () => void } | null)?.unref?.()
  return { child, pid, exited: exitedPromise, isExited: () => exited }
}

const pingOnce = async (port: number, timeoutMs: number, access: Access): Promise<boolean> => {
  try {
    return (await sendCommand(port, ["PING"], timeoutMs, access)) === "PONG"
  } catch {
    return false
  }
}

const waitReady = async (
  running: Running,
  port: number,
  log: Array<string>,
  access: Access,
  timeoutMs = 10_000
): Promise<void> => {
  const deadline = performance.now() + timeoutMs
  while (performance.now() < deadline) {
    if (running.isExited()) {
      throw new Error(`redis-server on port ${port} exited during start:\n${log.join("\n")}`)
    }
    if (await pingOnce(port, 250, access)) return
    await sleep(10)
  }
  running.child.kill("SIGKILL")
  await running.exited
  throw new Error(`redis-server on port ${port} did not answer PING within ${timeoutMs} ms:\n${log.join("\n")}`)
}

const waitExit = async (running: Running, timeoutMs: number): Promise<boolean> => {
  if (running.isExited()) return true
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs)
  })
  const result = await Promise.race([running.exited.then(() => true as const), timedOut])
  clearTimeout(timer)
  return result
}

/** The scheduler state letter of a process (`R`, `S`, `T` for stopped, …), Linux only. */
export const processState = (pid: number): string | undefined => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    // pid (comm) state ...: comm may contain spaces, so read after the last ')'.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]
  } catch {
    return undefined
  }
}

const waitState = async (pid: number, wanted: (state: string) => boolean): Promise<void> => {
  if (!fs.existsSync("/proc/self")) {
    await sleep(20)
    return
  }
  const deadline = performance.now() + 2_000
  while (performance.now() < deadline) {
    const state = processState(pid)
    if (state === undefined || wanted(state)) return
    await sleep(2)
  }
  throw new Error(`process ${pid} did not reach the expected state (now ${processState(pid)})`)
}

const parseInfo = (text: string): Record<string, string> => {
  const result: Record<string, string> = {}
  for (const line of text.split("\r\n")) {
    if (line.length === 0 || line.startsWith("#")) continue
    const colon = line.indexOf(":")
    if (colon > 0) result[line.slice(0, colon)] = line.slice(colon + 1)
  }
  return result
}

// --- the service ----------------------------------------------------------------------

const launch = async (options: StartOptions | undefined): Promise<RedisServer> => {
  let extraArgs = options?.extraArgs ?? []
  const access: Access = {
    tls: options?.tls === undefined ? undefined : { ca: fs.readFileSync(options.tls.cert, "utf8") },
    password: options?.password
  }
  // inside the run directory, so that the teardown removes it even if this scope never closes
  const dir = fs.mkdtempSync(path.join(runDir(), "server-"))
  const configText = options?.configFile
  const configFile = configText === undefined ? undefined : path.join(dir, "server.conf")
  if (configFile !== undefined) fs.writeFileSync(configFile, configText ?? "")
  const log: Array<string> = []
  let current: Running | undefined
  let port = 0
  let lastError: unknown
  for (let attempt = 0; attempt < 5 && current === undefined; attempt++) {
    port = await freePort()
    if (options?.clusterBus === true) {
      extraArgs = [...(options.extraArgs ?? []), "--cluster-port", String(await freePort())]
    }
    const running = spawnServer(port, dir, extraArgs, log, configFile, options)
    try {
      await waitReady(running, port, log, access)
      current = running
    } catch (error) {
      // most likely the port was taken between probing and binding: try another one
      lastError = error
    }
  }
  if (current === undefined) {
    fs.rmSync(dir, { recursive: true, force: true })
    throw lastError instanceof Error ? lastError : new Error(String(lastError))
  }

  const killNow = async () => {
    const running = current
    if (running === undefined) return
    current = undefined
    if (!running.isExited()) running.child.kill("SIGKILL")
    await running.exited
  }
  const stopNow = async () => {
    const running = current
    if (running === undefined) return
    current = undefined
    if (!running.isExited()) {
      running.child.kill("SIGTERM")
      running.child.kill("SIGCONT")
      if (!(await waitExit(running, 5_000))) running.child.kill("SIGKILL")
    }
    await running.exited
  }
  const requireRunning = (operation: string): Running => {
    if (current === undefined || current.isExited()) {
      throw new Error(`${operation}: redis-server on port ${port} is not running`)
    }
    return current
  }

  const commandWithTimeout = (timeoutMs: number, ...args: ReadonlyArray<string | number>) =>
    Effect.tryPromise({
      try: () => sendCommand(port, args, timeoutMs, access),
      catch: (cause) =>
        new RedisServerError({
          operation: String(args[0]),
          message: cause instanceof Error ? cause.message : String(cause),
          cause
        })
    }).pipe(
      Effect.flatMap((reply) =>
        reply instanceof ReplyError
          ? Effect.fail(new RedisServerError({ operation: String(args[0]), message: reply.message }))
          : Effect.succeed(reply)
      )
    )
  const command = (...args: ReadonlyArray<string | number>) => commandWithTimeout(2_000, ...args)
  const expectNumber = (operation: string) => (reply: Reply) =>
    typeof reply === "number"
      ? Effect.succeed(reply)
      : Effect.fail(new RedisServerError({ operation, message: `expected an integer, got ${JSON.stringify(reply)}` }))

  const server: RedisServer = {
    port,
    url: `${options?.tls === undefined ? "redis" : "rediss"}://127.0.0.1:${port}`,
    dir,
    pid: Effect.sync(() => (current === undefined || current.isExited() ? Option.none() : Option.some(current.pid))),
    stop: Effect.promise(stopNow),
    kill: Effect.promise(killNow),
    pause: Effect.promise(async () => {
      const running = requireRunning("pause")
      running.child.kill("SIGSTOP")
      await waitState(running.pid, (state) => state === "T")
    }),
    resume: Effect.promise(async () => {
      const running = current
      if (running === undefined || running.isExited()) return
      running.child.kill("SIGCONT")
      await waitState(running.pid, (state) => state !== "T")
    }),
    restart: Effect.promise(async () => {
      await stopNow()
      const running = spawnServer(port, dir, extraArgs, log, configFile, options)
      await waitReady(running, port, log, access)
      current = running
    }),
    clientKill: (type) => command("CLIENT", "KILL", "TYPE", type).pipe(Effect.flatMap(expectNumber("CLIENT KILL"))),
    command,
    commandWithTimeout,
    ping: (timeoutMs = 200) => Effect.promise(() => pingOnce(port, timeoutMs, access)),
    dbsize: command("DBSIZE").pipe(Effect.flatMap(expectNumber("DBSIZE"))),
    numsub: (channel) =>
      command("PUBSUB", "NUMSUB", channel).pipe(
        Effect.flatMap((reply) =>
          Array.isArray(reply) && typeof reply[1] === "number"
            ? Effect.succeed(reply[1])
            : Effect.fail(
                new RedisServerError({
                  operation: "PUBSUB NUMSUB",
                  message: `unexpected reply ${JSON.stringify(reply)}`
                })
              )
        )
      ),
    info: (section) =>
      command("INFO", section).pipe(
        Effect.flatMap((reply) =>
          typeof reply === "string"
            ? Effect.succeed(parseInfo(reply))
            : Effect.fail(
                new RedisServerError({ operation: "INFO", message: `unexpected reply ${JSON.stringify(reply)}` })
              )
        )
      ),
    logs: Effect.sync(() => log.join("\n"))
  }
  disposers.set(server, async () => {
    await killNow()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return server
}

const disposers = new WeakMap<RedisServer, () => Promise<void>>()

/**
 * Start a redis-server on a free loopback port and wait until it answers PING. It is
 * SIGKILLed and its directory removed when the scope closes.
 */
export const start = (options?: StartOptions): Effect.Effect<RedisServer, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => launch(options)),
    (server) => Effect.promise(() => disposers.get(server)?.() ?? Promise.resolve())
  )

/** The string stored under `key`, read raw (none when the key is missing). */
export const getRaw = (server: RedisServer, key: string): Effect.Effect<Option.Option<string>> =>
  Effect.map(Effect.orDie(server.command("GET", key)), (reply) =>
    typeof reply === "string" ? Option.some(reply) : Option.none()
  )

/**
 * The calls an `INFO commandstats` reply counts, leaving out the commands `skip` names
 * (as INFO does: `cmdstat_<command>`), such as the harness's own PING and INFO.
 */
export const commandCalls = (stats: Readonly<Record<string, string>>, skip: (name: string) => boolean): number => {
  let total = 0
  for (const [name, value] of Object.entries(stats)) {
    if (!name.startsWith("cmdstat_") || skip(name)) continue
    total += Number(/(?:^|,)calls=(\d+)/.exec(value)?.[1] ?? 0)
  }
  return total
}
