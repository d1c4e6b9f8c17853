/**
 * The counter app as real processes on one real redis-server: updates crossing processes,
 * duplicate tabs across processes, shutdown, a cluster of four workers, and an
 * unreachable Redis.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as RedisServer from "../support/RedisServer.js"
import { bump, connect, request, startApp, updates } from "./support.js"

/** Every socket record in the server, as `[token, instanceId]`. */
const socketRecords = (server: RedisServer.RedisServer) =>
  Effect.gen(function* () {
    const keys = (yield* server.command("KEYS", "leasehold:{*}:socket")) as ReadonlyArray<string>
    const records: Array<readonly [string, string]> = []
    for (const key of keys) {
      const raw = yield* server.command("GET", key)
      if (typeof raw === "string") records.push([key, JSON.parse(raw).instanceId as string])
    }
    return records
  })

describe("counter app (Redis, several processes)", () => {
  it.scopedLive("a socket on A receives every update of bumps made through B, in order", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const env = { LEASEHOLD_REDIS_URL: server.url }
      const [a, b] = yield* Effect.all([startApp({ env }), startApp({ env })], { concurrency: 2 })
      const client = yield* connect(a, "tab-1")
      const hello = yield* client.waitFor((frame) => frame.type === "hello")
      yield* client.waitFor((frame) => frame.type === "state")
      const answers: Array<number> = []
      for (let i = 0; i < 40; i++) {
        const answer = yield* bump(b, "tab-1")
        assert.strictEqual(answer.status, 200)
        assert.notStrictEqual(answer.body.instanceId, hello.instanceId)
        assert.strictEqual(answer.body.delivery, "sent")
        answers.push(answer.body.n)
      }
      yield* client.waitFor((frame) => frame.type === "update" && frame.n === 40)
      deepStrictEqual(
        answers,
        Array.from({ length: 40 }, (_, i) => i + 1)
      )
      deepStrictEqual(updates(client), answers)
      // and a duplicate tab on B gets a token of its own
      const duplicate = yield* connect(b, "tab-1")
      assert.strictEqual(duplicate.frames[0]!.type, "new_token")
      assert.notStrictEqual(duplicate.frames[0]!.token, "tab-1")
    })
  )

  it.scopedLive("SIGTERM leaves no socket record of that worker in Redis", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const env = { LEASEHOLD_REDIS_URL: server.url }
      const [a, b] = yield* Effect.all([startApp({ env }), startApp({ env })], { concurrency: 2 })
      const onA = yield* Effect.all([connect(a, "a-1"), connect(a, "a-2"), connect(a, "a-3")])
      const onB = yield* connect(b, "b-1")
      const idA = (yield* onA[0].waitFor((frame) => frame.type === "hello")).instanceId
      const idB = (yield* onB.waitFor((frame) => frame.type === "hello")).instanceId
      assert.strictEqual((yield* socketRecords(server)).filter(([, id]) => id === idA).length, 3)
      yield* a.kill("SIGTERM")
      assert.strictEqual(yield* a.exited, 0)
      const records = yield* socketRecords(server)
      deepStrictEqual(
        records.filter(([, id]) => id === idA),
        []
      )
      deepStrictEqual(records, [["leasehold:{b-1}:socket", idB]])
      for (const client of onA) assert.isFalse(client.isOpen())
    })
  )

  it.scopedLive(
    "WORKERS=4: 100 bumps on fresh connections; the socket's last update equals the successful bumps",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const app = yield* startApp({
          env: { LEASEHOLD_REDIS_URL: server.url, LEASEHOLD_OPLOCK: "true", WORKERS: "4" }
        })
        const client = yield* connect(app, "tab-c")
        yield* client.waitFor((frame) => frame.type === "state")
        const answers = yield* Effect.forEach(Array.from({ length: 100 }), () => bump(app, "tab-c"), {
          concurrency: 4
        })
        const ok = answers.filter((answer) => answer.status === 200)
        const servedBy = new Set(ok.map((answer) => answer.body.instanceId))
        assert.isAbove(servedBy.size, 1, "requests spread over the workers")
        yield* client.waitFor((frame) => frame.type === "update" && frame.n === ok.length)
        // Let any straggler arrive: none may follow the final state.
        yield* Effect.sleep(300)
        assert.strictEqual(updates(client).at(-1), ok.length)
        assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-c`)).body.n, ok.length)
        assert.strictEqual(ok.length, 100)
        yield* app.kill("SIGTERM")
        assert.strictEqual(yield* app.exited, 0)
        deepStrictEqual(yield* socketRecords(server), [])
      }),
    60_000
  )

  it.scopedLive(
    "a cluster worker that dies is replaced; SIGTERM then stops them all",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const app = yield* startApp({ env: { LEASEHOLD_REDIS_URL: server.url, WORKERS: "2" } })
        const health = yield* request("GET", `${app.url}/healthz`)
        const victim = health.body.pid as number
        process.kill(victim, "SIGKILL")
        yield* app.waitFor(new RegExp(`worker pid ${victim} exited .*starting another`))
        // the replacement listens, and the app serves on
        yield* Effect.iterate(0, {
          while: (listening) => listening < 3,
          body: () =>
            Effect.as(Effect.sleep(100), app.lines.filter((line) => /counter: listening on/.test(line)).length)
        })
        assert.strictEqual((yield* bump(app, "tab-r")).status, 200)
        yield* app.kill("SIGTERM")
        assert.strictEqual(yield* app.exited, 0)
      }),
    60_000
  )

  it.scopedLive("WORKERS above 1 without Redis is refused with a clear message", () =>
    Effect.gen(function* () {
      const app = yield* startApp({ env: { WORKERS: "2" }, ready: false })
      assert.strictEqual(yield* app.exited, 1)
      assert.isTrue(app.lines.some((line) => /WORKERS=2 needs LEASEHOLD_REDIS_URL/.test(line)))
    })
  )

  it.scopedLive(
    "an unreachable Redis: 503 with a JSON error, not a hang; health says so",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const app = yield* startApp({
          env: {
            LEASEHOLD_REDIS_URL: server.url,
            LEASEHOLD_LOCK_EXPIRATION_MS: "2000",
            LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "500",
            LEASEHOLD_COMMAND_TIMEOUT_MS: "500"
          }
        })
        assert.strictEqual((yield* bump(app, "tab-u")).status, 200)
        yield* server.pause
        const answer = yield* bump(app, "tab-u")
        assert.strictEqual(answer.status, 503)
        assert.isString(answer.body.error)
        assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-u`)).status, 503)
        let health = yield* request("GET", `${app.url}/healthz`)
        for (let i = 0; i < 50 && health.status !== 503; i++) {
          yield* Effect.sleep(100)
          health = yield* request("GET", `${app.url}/healthz`)
        }
        assert.strictEqual(health.status, 503)
        assert.isTrue(health.body.loops.some((loop: { state: string }) => loop.state === "retrying"))
        yield* server.resume
        // and it serves again once Redis is back
        let after = yield* bump(app, "tab-u")
        for (let i = 0; i < 50 && after.status !== 200; i++) {
          yield* Effect.sleep(100)
          after = yield* bump(app, "tab-u")
        }
        assert.strictEqual(after.status, 200)
        assert.strictEqual(after.body.n, 2)
      }),
    30_000
  )
})
