/**
 * The counter app as real processes on one real redis-server: updates crossing processes,
 * duplicate tabs across processes, shutdown, a cluster of four workers, an
 * unreachable Redis, and a replica that does not acknowledge.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as RedisServer from "../support/RedisServer.js"
import { bump, connect, request, socketRecords, startApp, updates } from "./support.js"

describe("counter app (Redis, several processes)", () => {
  it.live(
    "two processes: every update of bumps made through B reaches A's socket in order; SIGTERM of A leaves none of its records",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const env = { LEASEHOLD_REDIS_URL: server.url }
        const [a, b] = yield* Effect.all([startApp({ env }), startApp({ env })], { concurrency: 2 })
        const client = yield* connect(a, "tab-1")
        const idA = (yield* client.waitFor((frame) => frame.type === "hello")).instanceId
        yield* client.waitFor((frame) => frame.type === "state")
        const answers: Array<number> = []
        for (let i = 0; i < 40; i++) {
          const answer = yield* bump(b, "tab-1")
          assert.strictEqual(answer.status, 200)
          assert.notStrictEqual(answer.body.instanceId, idA)
          assert.strictEqual(answer.body.delivery, "sent")
          answers.push(answer.body.n)
        }
        yield* client.waitFor((frame) => frame.type === "update" && frame.n === 40)
        deepStrictEqual(
          answers,
          Array.from({ length: 40 }, (_, i) => i + 1)
        )
        deepStrictEqual(updates(client), answers)

        // a duplicate tab on B gets a token of its own
        const duplicate = yield* connect(b, "tab-1")
        assert.strictEqual(duplicate.frames[0]!.type, "new_token")
        assert.notStrictEqual(duplicate.frames[0]!.token, "tab-1")

        // SIGTERM of A: its records go, B's stay
        const onA = [client, ...(yield* Effect.all([connect(a, "a-2"), connect(a, "a-3")]))]
        const onB = yield* connect(b, "b-1")
        const idB = (yield* onB.waitFor((frame) => frame.type === "hello")).instanceId
        assert.strictEqual((yield* socketRecords(server)).filter(([, id]) => id === idA).length, 3)
        yield* a.kill("SIGTERM")
        assert.strictEqual(yield* a.exited, 0)
        const records = yield* socketRecords(server)
        deepStrictEqual(
          records.filter(([, id]) => id === idA),
          []
        )
        deepStrictEqual(
          records.map(([key, id]) => [key, id === idB]).sort(),
          [
            [`leasehold:{${duplicate.frames[0]!.token}}:socket`, true],
            ["leasehold:{b-1}:socket", true]
          ].sort()
        )
        for (const socket of onA) assert.isFalse(socket.isOpen())
      }),
    60_000
  )

  it.live(
    "WORKERS=4: 100 bumps on fresh connections; the socket's last update equals the successful bumps; a worker that dies is replaced",
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

        // a worker killed outright (not the one holding the socket) is replaced, and the app serves on
        const owner = (yield* client.waitFor((frame) => frame.type === "hello")).instanceId
        let health = yield* request("GET", `${app.url}/healthz`)
        for (let i = 0; i < 50 && health.body.instanceId === owner; i++) {
          health = yield* request("GET", `${app.url}/healthz`)
        }
        assert.notStrictEqual(health.body.instanceId, owner)
        const victim = health.body.pid as number
        process.kill(victim, "SIGKILL")
        yield* app.waitFor(new RegExp(`worker pid ${victim} exited .*starting another`))
        yield* app.waitForCount(/counter: listening on/, 5)
        assert.strictEqual((yield* bump(app, "tab-c")).body.n, 101)
        yield* client.waitFor((frame) => frame.type === "update" && frame.n === 101)

        yield* client.close
        yield* app.kill("SIGTERM")
        assert.strictEqual(yield* app.exited, 0)
        deepStrictEqual(yield* socketRecords(server), [])
      }),
    // five processes starting on a shared 2-core machine
    120_000
  )

  it.live("WORKERS above 1 without Redis is refused with a clear message", () =>
    Effect.gen(function* () {
      const app = yield* startApp({ env: { WORKERS: "2" }, ready: false })
      assert.strictEqual(yield* app.exited, 1)
      assert.isTrue(app.lines.some((line) => /WORKERS=2 needs LEASEHOLD_REDIS_URL/.test(line)))
      // an empty URL is no URL, for the app as for leasehold
      const empty = yield* startApp({ env: { WORKERS: "2", LEASEHOLD_REDIS_URL: "" }, ready: false })
      assert.strictEqual(yield* empty.exited, 1)
      assert.isTrue(empty.lines.some((line) => /WORKERS=2 needs LEASEHOLD_REDIS_URL/.test(line)))
    })
  )

  it.live(
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
        // health turns 503 once a loop notices; watched meanwhile
        const unhealthy = yield* Effect.forkChild(
          Effect.gen(function* () {
            let health = yield* request("GET", `${app.url}/healthz`)
            for (let i = 0; i < 100 && health.status !== 503; i++) {
              yield* Effect.sleep(100)
              health = yield* request("GET", `${app.url}/healthz`)
            }
            return health
          })
        )
        const answer = yield* bump(app, "tab-u")
        assert.strictEqual(answer.status, 503)
        assert.isString(answer.body.error)
        assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-u`)).status, 503)
        const health = yield* Fiber.join(unhealthy)
        assert.strictEqual(health.status, 503)
        assert.isTrue(health.body.loops.some((loop: { state: string }) => loop.state === "retrying"))
        yield* server.resume
        // and it serves again once Redis is back
        let attempts = 1
        let after = yield* bump(app, "tab-u")
        for (; attempts < 50 && after.status !== 200; attempts++) {
          yield* Effect.sleep(100)
          after = yield* bump(app, "tab-u")
        }
        assert.strictEqual(after.status, 200)
        // A bump answered 503 may still have been stored (its commands reached the server
        // after their answer was given up on; a bump in one step is one command, the one
        // sent while Redis was paused included): the count is 2 plus at most those.
        assert.isAtLeast(after.body.n, 2)
        assert.isAtMost(after.body.n, 2 + attempts)
        assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-u`)).body.n, after.body.n)
      }),
    60_000
  )
  it.live(
    "with LEASEHOLD_MIN_REPLICAS_ACK and a frozen replica: 503 NotAcknowledged, not 500",
    () =>
      Effect.gen(function* () {
        const primary = yield* RedisServer.start()
        const replica = yield* RedisServer.start({ extraArgs: ["--replicaof", "127.0.0.1", String(primary.port)] })
        for (let i = 0; i < 400; i++) {
          if ((yield* Effect.orDie(replica.info("replication"))).master_link_status === "up") break
          yield* Effect.sleep(50)
        }
        const app = yield* startApp({
          env: {
            LEASEHOLD_REDIS_URL: primary.url,
            LEASEHOLD_MIN_REPLICAS_ACK: "1",
            LEASEHOLD_REPLICA_ACK_TIMEOUT_MS: "1500"
          }
        })
        assert.strictEqual((yield* bump(app, "tab-ack")).status, 200)
        yield* replica.pause
        const answer = yield* bump(app, "tab-ack")
        yield* replica.resume
        // the store could not promise the bump: its outcome is unknown, as on a timeout
        assert.strictEqual(answer.status, 503, JSON.stringify(answer.body))
        assert.strictEqual(answer.body.code, "NotAcknowledged")
      }),
    60_000
  )
})
