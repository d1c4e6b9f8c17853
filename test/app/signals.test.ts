/**
 * Stopping the counter app the way users' systems do: Ctrl-C in a terminal (SIGINT to npm
 * and node together), systemd (SIGTERM to the whole group), a cluster primary forwarding
 * SIGTERM on top of a signal to the group, and a peer that never completes a close (frozen,
 * as SIGSTOP leaves it). The first signal starts the graceful shutdown; no later signal
 * cuts it short, and the deadline ends one that hangs.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as RedisServer from "../support/RedisServer.js"
import { bump, connect, root, socketRecords, startApp, state, tempDir } from "./support.js"

/**
 * A WebSocket client in a process of its own, connected with `token` and then frozen with
 * SIGSTOP: it never answers the server's close. Killed with the scope.
 */
const frozenPeer = (port: number, token: string) =>
  Effect.gen(function* () {
    const script = `
      const WebSocket = require("ws")
      const ws = new WebSocket("ws://127.0.0.1:${port}/ws?token=${token}")
      ws.on("message", (data) => { if (JSON.parse(String(data)).type === "hello") console.log("hello") })
      setInterval(() => {}, 1000)`
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => spawn(process.execPath, ["-e", script], { cwd: root, stdio: ["ignore", "pipe", "inherit"] })),
      (child: ChildProcess) =>
        Effect.promise(async () => {
          if (child.exitCode !== null || child.signalCode !== null) return
          const exited = new Promise((resolve) => child.once("exit", resolve))
          child.kill("SIGKILL")
          await exited
        })
    )
    yield* Effect.callback<void>((resume) => {
      child.stdout!.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("hello")) resume(Effect.void)
      })
    }).pipe(
      Effect.timeoutOrElse({
        duration: "15 seconds",
        orElse: () => Effect.failSync(() => new Error("the peer got no hello"))
      })
    )
    yield* Effect.sync(() => child.kill("SIGSTOP"))
  })

describe("counter app: stopped by signals", () => {
  it.live(
    "Ctrl-C on npm start (SIGINT to npm and node at once): the shutdown completes and the acknowledged bump survives a restart",
    () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const env = { LEASEHOLD_DATA_DIR: dir }
        const first = yield* startApp({ env, npm: true })
        const answer = yield* bump(first, "ctrlc", 1)
        assert.strictEqual(answer.status, 200)
        assert.strictEqual(answer.body.n, 1)
        yield* first.signalGroup("SIGINT")
        // npm's code is its child's: node ended by itself, not by the second signal
        assert.strictEqual(yield* first.exited, 0)
        yield* first.waitFor(/closing/, 1_000)

        const second = yield* startApp({ env, npm: true, port: first.port })
        assert.strictEqual(yield* state(second, "ctrlc"), 1)
        yield* second.signalGroup("SIGINT")
        assert.strictEqual(yield* second.exited, 0)
      }),
    60_000
  )

  it.live(
    "Redis, two processes: SIGTERM to one's process group removes its socket records, a frozen peer's too, and the tab keeps its token on the other",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const env = { LEASEHOLD_REDIS_URL: server.url }
        const [a, b] = yield* Effect.all([startApp({ env, npm: true }), startApp({ env })], { concurrency: 2 })
        const tab = yield* connect(a, "tab-1")
        const idA = (yield* tab.waitFor((frame) => frame.type === "hello")).instanceId
        yield* tab.waitFor((frame) => frame.type === "state")
        for (let i = 0; i < 5; i++) yield* bump(a, "tab-1")
        yield* tab.waitFor((frame) => frame.type === "update" && frame.n === 5)
        yield* frozenPeer(a.port, "tab-frozen")
        assert.strictEqual((yield* socketRecords(server)).filter(([, id]) => id === idA).length, 2)

        // as systemd stops a service: SIGTERM to npm and node together
        yield* a.signalGroup("SIGTERM")
        assert.strictEqual(yield* a.exited, 0)
        yield* a.waitFor(/closing/, 1_000)
        assert.isFalse(
          a.lines.some((line) => /did not finish/.test(line)),
          a.lines.join("\n")
        )
        deepStrictEqual(
          (yield* socketRecords(server)).filter(([, id]) => id === idA),
          []
        )

        // the tab's page reconnects to the other process with its token, and keeps it
        const again = yield* connect(b, "tab-1")
        assert.strictEqual(yield* again.token, "tab-1")
        const current = yield* again.waitFor((frame) => frame.type === "state")
        assert.isFalse(
          again.frames.some((frame) => frame.type === "new_token"),
          JSON.stringify(again.frames)
        )
        assert.strictEqual(current.n, 5)
      }),
    90_000
  )

  it.live(
    "WORKERS=2: Ctrl-C reaches npm, the primary and both workers (and the primary forwards SIGTERM): every worker shuts down completely",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const app = yield* startApp({ env: { LEASEHOLD_REDIS_URL: server.url, WORKERS: "2" }, npm: true })
        const tabs = yield* Effect.all([connect(app, "c-1"), connect(app, "c-2"), connect(app, "c-3")])
        for (const tab of tabs) yield* tab.waitFor((frame) => frame.type === "state")
        assert.strictEqual((yield* socketRecords(server)).length, 3)
        yield* app.signalGroup("SIGINT")
        // the primary too ended by itself, once its workers had
        assert.strictEqual(yield* app.exited, 0)
        // both workers ran their shutdown to the end: their records are gone
        yield* app.waitForCount(/pid \d+ closing/, 2, 1_000)
        assert.isFalse(
          app.lines.some((line) => /did not finish|killing them/.test(line)),
          app.lines.join("\n")
        )
        deepStrictEqual(yield* socketRecords(server), [])
        for (const tab of tabs) assert.isFalse(tab.isOpen())
      }),
    90_000
  )

  it.live(
    "WORKERS=2: a primary killed outright (SIGKILL) leaves workers that still shut down completely",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const app = yield* startApp({ env: { LEASEHOLD_REDIS_URL: server.url, WORKERS: "2" } })
        const tabs = yield* Effect.all([connect(app, "k-1"), connect(app, "k-2"), connect(app, "k-3")])
        for (const tab of tabs) yield* tab.waitFor((frame) => frame.type === "state")
        assert.strictEqual((yield* socketRecords(server)).length, 3)
        yield* app.kill("SIGKILL")
        yield* app.exited
        // the workers write to the same output: both ran their shutdown to its end
        yield* app.waitForCount(/pid \d+ closing/, 2, 20_000)
        yield* Effect.gen(function* () {
          while ((yield* socketRecords(server)).length > 0) yield* Effect.sleep("100 millis")
        }).pipe(
          Effect.timeoutOrElse({
            duration: "20 seconds",
            orElse: () => Effect.failSync(() => new Error("records left"))
          })
        )
      }),
    90_000
  )

  it.live(
    "a shutdown slower than the deadline (a frozen peer, a 1 s deadline) ends at the deadline, whatever signals follow",
    () =>
      Effect.gen(function* () {
        const app = yield* startApp({ env: { LEASEHOLD_SHUTDOWN_TIMEOUT_MS: "1000" } })
        yield* frozenPeer(app.port, "frozen")
        const [took, code] = yield* Effect.timed(
          Effect.gen(function* () {
            yield* app.kill("SIGTERM")
            yield* Effect.sleep("200 millis")
            yield* app.signalGroup("SIGINT")
            yield* Effect.sleep("200 millis")
            yield* app.signalGroup("SIGTERM")
            return yield* app.exited
          })
        )
        // exits by itself (not killed by a signal), with the deadline's code and line
        assert.strictEqual(code, 124)
        assert.isAtLeast(Duration.toMillis(took), 900)
        assert.isBelow(Duration.toMillis(took), 8_000)
        yield* app.waitFor(/did not finish within 1s: exiting/, 1_000)
      }),
    60_000
  )

  it.live("a deadline that is not a number: the app does not start, and says why on one line", () =>
    Effect.gen(function* () {
      const app = yield* startApp({ env: { LEASEHOLD_SHUTDOWN_TIMEOUT_MS: "soon" }, ready: false })
      assert.strictEqual(yield* app.exited, 1)
      yield* app.waitFor(/^leasehold: invalid configuration: LEASEHOLD_SHUTDOWN_TIMEOUT_MS=soon/, 1_000)
    })
  )

  it.live("a frozen peer does not hold the shutdown: its connection is cut after the grace", () =>
    Effect.gen(function* () {
      const app = yield* startApp()
      yield* frozenPeer(app.port, "frozen")
      yield* app.kill("SIGTERM")
      assert.strictEqual(yield* app.exited, 0)
      assert.isFalse(
        app.lines.some((line) => /did not finish/.test(line)),
        app.lines.join("\n")
      )
    })
  )
})
