/**
 * End-to-end harness for the example apps: the app as a real process (as `npm start` runs
 * it, or `npm start` itself), plain HTTP requests on fresh connections, and WebSocket
 * clients that record every frame. Processes are killed when the test's scope closes.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import WebSocket from "ws"
import * as RedisServer from "../support/RedisServer.js"
import { waitUntil } from "../support/waitUntil.js"

export const root = path.resolve(import.meta.dirname, "../..")

/**
 * How node runs an example: TypeScript through tsx, and `from "leasehold"` resolved to
 * `src/` (the `leasehold-source` condition of package.json's exports), as `npm start` does.
 */
export const sourceFlags = ["--conditions=leasehold-source", "--import", "tsx"] as const

/** A free loopback port (the OS picks it; it is released before the app binds it). */
export const freePort: Effect.Effect<number> = Effect.promise(RedisServer.freePort)

export interface App {
  readonly pid: number
  readonly port: number
  readonly url: string
  /** Every line printed so far (stdout and stderr). */
  readonly lines: ReadonlyArray<string>
  readonly waitFor: (pattern: RegExp, ms?: number) => Effect.Effect<string>
  /** Wait until `count` lines match `pattern`. */
  readonly waitForCount: (pattern: RegExp, count: number, ms?: number) => Effect.Effect<void>
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<void>
  /**
   * Signal the app's whole process group, as a terminal's Ctrl-C (npm and node together),
   * systemd (`KillMode=control-group`) or a container runtime does.
   */
  readonly signalGroup: (signal: NodeJS.Signals) => Effect.Effect<void>
  /** The exit code (`null` when killed by a signal). */
  readonly exited: Effect.Effect<number | null>
}

export interface StartOptions {
  /** Added to the environment; `undefined` unsets a variable. */
  readonly env?: Record<string, string | undefined>
  readonly port?: number
  /** The app's entry point (default: the counter's `examples/counter/main.ts`). */
  readonly entry?: string
  /** Run `npm start` rather than node on the entry point. */
  readonly npm?: boolean
  /** Wait for this line before returning (default: the listening line of one or all workers). */
  readonly ready?: RegExp | false
}

// A test worker that exits without closing its scopes takes its apps with it.
const live = new Set<ChildProcess>()
let exitHook = false
const killGroup = (child: ChildProcess) => {
  try {
    // its own process group: npm, the app and cluster workers go together
    process.kill(-child.pid!, "SIGKILL")
  } catch {
    child.kill("SIGKILL")
  }
}

/** Start the app; it is SIGKILLed (with its workers) when the scope closes, if still running. */
export const startApp = (options: StartOptions = {}): Effect.Effect<App, never, Scope.Scope> =>
  Effect.gen(function* () {
    const port = options.port ?? (yield* freePort)
    const env: Record<string, string | undefined> = {
      ...process.env,
      LEASEHOLD_REDIS_URL: undefined,
      WORKERS: undefined,
      LEASEHOLD_DATA_DIR: "",
      PORT: String(port),
      HOST: "127.0.0.1",
      ...options.env
    }
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        options.npm === true
          ? spawn("npm", ["start", "--silent"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"], detached: true })
          : spawn(process.execPath, [...sourceFlags, options.entry ?? "examples/counter/main.ts"], {
              cwd: root,
              env,
              stdio: ["ignore", "pipe", "pipe"],
              detached: true
            })
      ),
      (child: ChildProcess) =>
        Effect.promise(async () => {
          live.delete(child)
          if (child.exitCode !== null || child.signalCode !== null) return
          const exited = new Promise((resolve) => child.once("exit", resolve))
          killGroup(child)
          await exited
        })
    )
    live.add(child)
    if (!exitHook) {
      exitHook = true
      process.on("exit", () => {
        for (const child of live) killGroup(child)
      })
    }
    const lines: Array<string> = []
    const listeners = new Set<() => void>()
    const collect = (stream: NodeJS.ReadableStream) => {
      let buffer = ""
      stream.setEncoding("utf8")
      stream.on("data", (chunk: string) => {
        buffer += chunk
        const parts = buffer.split("\n")
        buffer = parts.pop() ?? ""
        lines.push(...parts.filter((line) => line.trim().length > 0))
        for (const listener of [...listeners]) listener()
      })
    }
    collect(child.stdout!)
    collect(child.stderr!)
    const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
    exit.then(() => {
      for (const listener of [...listeners]) listener()
    })
    const waitFor = (pattern: RegExp, ms = 30_000) =>
      waitUntil(
        listeners,
        () => lines.find((line) => pattern.test(line)),
        ms,
        () => `app ${child.pid}: no line matching ${pattern} within ${ms} ms; output:\n${lines.slice(-30).join("\n")}`
      )
    const waitForCount = (pattern: RegExp, count: number, ms = 30_000) =>
      waitUntil(
        listeners,
        () => (lines.filter((line) => pattern.test(line)).length >= count ? true : undefined),
        ms,
        () =>
          `app ${child.pid}: fewer than ${count} lines matching ${pattern} within ${ms} ms; output:\n${lines.slice(-30).join("\n")}`
      ).pipe(Effect.asVoid)
    const app: App = {
      pid: child.pid!,
      port,
      url: `http://127.0.0.1:${port}`,
      lines,
      waitFor,
      waitForCount,
      kill: (signal) =>
        Effect.sync(() => {
          child.kill(signal)
        }),
      signalGroup: (signal) =>
        Effect.sync(() => {
          process.kill(-child.pid!, signal)
        }),
      exited: Effect.promise(() => exit)
    }
    const ready =
      options.ready ?? (Number(options.env?.WORKERS ?? "1") > 1 ? /workers listening on port/ : /counter: listening on/)
    if (ready !== false) {
      yield* Effect.raceFirst(
        waitFor(ready),
        Effect.flatMap(app.exited, (code) =>
          Effect.die(`app exited with ${code} before it was ready:\n${lines.join("\n")}`)
        )
      )
    }
    return app
  })

export interface Response {
  readonly status: number
  readonly body: any
}

/** One HTTP request on a fresh connection (no keep-alive): under cluster, any worker may serve it. */
export const request = (method: "GET" | "POST", url: string): Effect.Effect<Response> =>
  Effect.callback<Response>((resume) => {
    const req = http.request(url, { method, agent: false }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        text += chunk
      })
      res.on("end", () => {
        let body: unknown = text
        try {
          body = JSON.parse(text)
        } catch {
          // not JSON: kept as text
        }
        resume(Effect.succeed({ status: res.statusCode ?? 0, body }))
      })
    })
    req.on("error", (error) => resume(Effect.die(`${method} ${url}: ${error.message}`)))
    req.end()
    return Effect.sync(() => req.destroy())
  })

export const bump = (app: { readonly url: string }, token: string, by = 1) =>
  request("POST", `${app.url}/api/bump?token=${encodeURIComponent(token)}&by=${by}`)

export interface Frame {
  readonly type: string
  readonly [key: string]: any
}

export interface Client {
  /** Every frame received, parsed. */
  readonly frames: ReadonlyArray<Frame>
  readonly send: (message: unknown) => Effect.Effect<void>
  /** Wait for a frame satisfying `predicate` (looking at every frame received so far too). */
  readonly waitFor: (predicate: (frame: Frame) => boolean, ms?: number) => Effect.Effect<Frame>
  /** The token in use: the `new_token` one when there was one, else the one asked for. */
  readonly token: Effect.Effect<string>
  readonly close: Effect.Effect<void>
  readonly isOpen: () => boolean
}

/** Open `/ws` (with `token` and `client` when given) and wait for the `hello` frame. Closed with the scope. */
export const connect = (
  app: { readonly port: number },
  token?: string,
  clientId?: string
): Effect.Effect<Client, never, Scope.Scope> =>
  Effect.gen(function* () {
    const params = new URLSearchParams()
    if (token !== undefined) params.set("token", token)
    if (clientId !== undefined) params.set("client", clientId)
    const query = params.size === 0 ? "" : `?${params}`
    const frames: Array<Frame> = []
    const listeners = new Set<() => void>()
    const socket = yield* Effect.acquireRelease(
      Effect.sync(() => new WebSocket(`ws://127.0.0.1:${app.port}/ws${query}`)),
      (socket) =>
        Effect.callback<void>((resume) => {
          if (socket.readyState === WebSocket.CLOSED) return resume(Effect.void)
          socket.once("close", () => resume(Effect.void))
          socket.terminate()
        })
    )
    socket.on("message", (data) => {
      frames.push(JSON.parse(data.toString()) as Frame)
      for (const listener of [...listeners]) listener()
    })
    socket.on("close", () => {
      for (const listener of [...listeners]) listener()
    })
    const waitFor = (predicate: (frame: Frame) => boolean, ms = 15_000) =>
      waitUntil(
        listeners,
        () => frames.find(predicate),
        ms,
        () => `no matching frame within ${ms} ms; frames: ${JSON.stringify(frames.slice(-20))}`
      )
    const client: Client = {
      frames,
      send: (message) =>
        Effect.sync(() => socket.send(typeof message === "string" ? message : JSON.stringify(message))),
      waitFor,
      token: Effect.map(
        waitFor((frame) => frame.type === "hello"),
        (hello) => hello.token as string
      ),
      close: Effect.callback<void>((resume) => {
        if (socket.readyState === WebSocket.CLOSED) return resume(Effect.void)
        socket.once("close", () => resume(Effect.void))
        socket.close()
      }),
      isOpen: () => socket.readyState === WebSocket.OPEN
    }
    yield* client.token
    return client
  })

/** The `n` of every `update` frame, in arrival order. */
export const updates = (client: Client): ReadonlyArray<number> =>
  client.frames.filter((frame) => frame.type === "update").map((frame) => frame.n as number)

/** A fresh temporary directory, removed with the scope. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "counter-data-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** The counter of `token`, read through the app's API. */
export const state = (app: { readonly url: string }, token: string) =>
  Effect.map(request("GET", `${app.url}/api/state?token=${token}`), (answer) => answer.body.n as number)

/** Every socket record in the server, as `[key, instanceId]`. */
export const socketRecords = (server: RedisServer.RedisServer) =>
  Effect.gen(function* () {
    const keys = (yield* server.command("KEYS", "leasehold:{*}:socket")) as ReadonlyArray<string>
    const records: Array<readonly [string, string]> = []
    for (const key of keys) {
      const raw = yield* server.command("GET", key)
      if (typeof raw === "string") records.push([key, JSON.parse(raw).instanceId as string])
    }
    return records
  })
