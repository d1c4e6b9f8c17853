/**
 * The counter app as one real process on the embedded store: the HTTP API, the socket
 * protocol, health, metrics and graceful shutdown.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import { type App, bump, connect, request, startApp, updates } from "./support.js"

/** One app process shared by the tests below; each test uses tokens of its own. */
class Shared extends Context.Service<Shared, App>()("test/Shared") {}

const metric = (text: string, series: string) => {
  const line = text.split("\n").find((line) => line.startsWith(`${series} `))
  return line === undefined ? 0 : Number(line.slice(series.length + 1))
}

layer(Layer.effect(Shared, startApp()), { excludeTestServices: true })("counter app (embedded store)", (it) => {
  it.effect("the API bumps and reads a counter and answers bad input with 400", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      const first = yield* bump(app, "tab-1", 2)
      assert.strictEqual(first.status, 200)
      assert.strictEqual(first.body.n, 2)
      assert.isString(first.body.instanceId)
      assert.strictEqual((yield* bump(app, "tab-1")).body.n, 3)
      deepStrictEqual((yield* request("GET", `${app.url}/api/state?token=tab-1`)).body.n, 3)
      deepStrictEqual((yield* request("GET", `${app.url}/api/state?token=tab-2`)).body.n, 0)
      for (const query of ["token=a*b", "by=1", "token=tab-1&by=1.5", "token=tab-1&by=x", "token=tab-1&by=2000000"]) {
        const answer = yield* request("POST", `${app.url}/api/bump?${query}`)
        assert.strictEqual(answer.status, 400, query)
        assert.isString(answer.body.error, query)
      }
      assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=`)).status, 400)
      // nothing changed by the refused bumps
      assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-1`)).body.n, 3)
      assert.strictEqual((yield* request("GET", `${app.url}/nowhere`)).status, 404)
    })
  )

  it.effect("health and metrics", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      const before = (yield* request("GET", `${app.url}/metrics`)).body as string
      // no socket holds tab-h1: its update is dropped, and counted
      assert.strictEqual((yield* bump(app, "tab-h1")).body.delivery, "no-owner")
      yield* connect(app, "tab-h2")
      const health = yield* request("GET", `${app.url}/healthz`)
      assert.strictEqual(health.status, 200)
      assert.strictEqual(health.body.store, "memory")
      assert.isString(health.body.instanceId)
      assert.isAbove(health.body.loops.length, 0)
      for (const loop of health.body.loops) {
        assert.strictEqual(loop.state, "running", loop.name)
        assert.isFalse(Number.isNaN(Date.parse(loop.since)))
      }
      const metrics = yield* request("GET", `${app.url}/metrics`)
      assert.strictEqual(metrics.status, 200)
      assert.match(metrics.body, /^# TYPE leasehold_loop_state gauge$/m)
      assert.match(metrics.body, /^leasehold_loop_state\{loop="mailbox"\} 0$/m)
      const noOwner = 'leasehold_mailbox_dropped_total{reason="no-owner"}'
      assert.strictEqual(metric(metrics.body, noOwner) - metric(before, noOwner), 1)
      const open = "leasehold_session_sockets_open"
      assert.strictEqual(metric(metrics.body, open) - metric(before, open), 1)
    })
  )

  it.effect("a socket gets a token, its state, and one update per bump in the order sent", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      const client = yield* connect(app)
      deepStrictEqual(
        client.frames.slice(0, 2).map((frame) => frame.type),
        ["new_token", "hello"]
      )
      const token = yield* client.token
      assert.strictEqual(client.frames[0]!.token, token)
      assert.strictEqual((yield* client.waitFor((frame) => frame.type === "state")).n, 0)
      for (let i = 0; i < 30; i++) yield* client.send({ type: "bump", by: i % 3 === 2 ? -1 : 1 })
      yield* client.waitFor((frame) => frame.type === "update" && frame.v === 30)
      const expected: Array<number> = []
      let n = 0
      for (let i = 0; i < 30; i++) {
        n += i % 3 === 2 ? -1 : 1
        expected.push(n)
      }
      deepStrictEqual(updates(client), expected)
      // malformed frames: an error each, the socket stays open and keeps working
      for (const frame of ["not json", JSON.stringify({ type: "bump", by: "x" }), JSON.stringify({ type: "reset" })]) {
        yield* client.send(frame)
      }
      yield* client.send({ type: "bump", by: 5 })
      const last = yield* client.waitFor((frame) => frame.type === "update" && frame.v === 31)
      assert.strictEqual(last.n, expected.at(-1)! + 5)
      const errors = client.frames.filter((frame) => frame.type === "error")
      assert.strictEqual(errors.length, 3)
      for (const error of errors) assert.match(error.message, /^malformed message/)
      assert.isTrue(client.isOpen())
      // the API sees the same counter
      assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=${token}`)).body.n, last.n)
    })
  )

  it.effect("a burst of frames: an update for each bump and an error for each bad frame, in the order sent", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      const client = yield* connect(app, "tab-burst")
      yield* client.waitFor((frame) => frame.type === "state")
      const bump = (by: number) => JSON.stringify({ type: "bump", by })
      // sent at once: handled together, bumps of a run in one modification
      const burst = [bump(1), bump(2), "not json", bump(3), bump(2_000_000), bump(4)]
      for (const frame of burst) yield* client.send(frame)
      yield* client.waitFor((frame) => frame.type === "update" && frame.v === 4)
      const after = client.frames.slice(client.frames.findIndex((frame) => frame.type === "state") + 1)
      deepStrictEqual(
        after.map((frame) => (frame.type === "update" ? frame.n : frame.type)),
        [1, 3, "error", 6, "error", 10]
      )
      assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-burst`)).body.n, 10)
    })
  )

  it.effect("a bump with seq is applied once: its resend, on this socket or the next, is answered duplicate", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      const first = yield* connect(app, "tab-seq", "page-1")
      yield* first.waitFor((frame) => frame.type === "state")
      yield* first.send({ type: "bump", by: 2, seq: 1 })
      yield* first.send({ type: "bump", by: 2, seq: 1 })
      const applied = yield* first.waitFor((frame) => frame.type === "update" && frame.seq === 1)
      assert.strictEqual(applied.n, 2)
      const duplicate = yield* first.waitFor((frame) => frame.type === "state" && frame.seq === 1)
      assert.isTrue(duplicate.duplicate)
      assert.strictEqual(duplicate.n, 2)
      // a gap is not applied: the client is asked to resend from the next seq
      yield* first.send({ type: "bump", by: 5, seq: 3 })
      deepStrictEqual(yield* first.waitFor((frame) => frame.type === "resend"), { type: "resend", from: 2, seq: 3 })
      yield* first.close
      // the same page on a new socket: seq 1 again is a duplicate, seq 2 is applied
      const again = yield* connect(app, "tab-seq", "page-1")
      yield* again.send({ type: "bump", by: 2, seq: 1 })
      yield* again.send({ type: "bump", by: 3, seq: 2 })
      assert.isTrue((yield* again.waitFor((frame) => frame.seq === 1)).duplicate)
      assert.strictEqual((yield* again.waitFor((frame) => frame.type === "update" && frame.seq === 2)).n, 5)
      assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-seq`)).body.n, 5)
    })
  )

  it.effect("a reload keeps its token; a duplicate tab gets a new one; an API bump reaches the socket", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      const first = yield* connect(app, "tab-a")
      assert.isFalse(first.frames.some((frame) => frame.type === "new_token"))
      assert.strictEqual(yield* first.token, "tab-a")
      yield* bump(app, "tab-a", 4)
      assert.strictEqual((yield* first.waitFor((frame) => frame.type === "update")).n, 4)
      // a second tab presenting the same token
      const duplicate = yield* connect(app, "tab-a")
      const fresh = duplicate.frames[0]!
      assert.strictEqual(fresh.type, "new_token")
      assert.notStrictEqual(fresh.token, "tab-a")
      assert.strictEqual((yield* duplicate.waitFor((frame) => frame.type === "state")).n, 0)
      // an invalid token is replaced too
      const invalid = yield* connect(app, "bad token!")
      assert.strictEqual(invalid.frames[0]!.type, "new_token")
      // a reload: close, then the same token again
      yield* first.close
      const reloaded = yield* connect(app, "tab-a")
      assert.isFalse(reloaded.frames.some((frame) => frame.type === "new_token"))
      assert.strictEqual((yield* reloaded.waitFor((frame) => frame.type === "state")).n, 4)
    })
  )

  it.effect("a reload that reconnects before its old socket is closed keeps its token", () =>
    Effect.gen(function* () {
      const app = yield* Shared
      for (let i = 0; i < 5; i++) {
        const token = `tab-reload-${i}`
        const before = yield* connect(app, token)
        yield* bump(app, token, i + 1)
        yield* before.waitFor((frame) => frame.type === "update")
        // the new socket opens while the old one is still closing
        const closing = yield* Effect.forkChild(before.close)
        const after = yield* connect(app, token)
        yield* Fiber.join(closing)
        assert.isFalse(
          after.frames.some((frame) => frame.type === "new_token"),
          JSON.stringify(after.frames)
        )
        assert.strictEqual(yield* after.token, token)
        assert.strictEqual((yield* after.waitFor((frame) => frame.type === "state")).n, i + 1)
      }
    })
  )
})

describe("counter app (embedded store), shutdown", () => {
  it.live("SIGTERM closes the sockets and exits 0", () =>
    Effect.gen(function* () {
      const app = yield* startApp()
      const client = yield* connect(app)
      yield* app.kill("SIGTERM")
      assert.strictEqual(yield* app.exited, 0)
      assert.isFalse(client.isOpen())
      yield* app.waitFor(/closing/, 1_000)
    })
  )
})
