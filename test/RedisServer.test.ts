import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import { Redis } from "ioredis"
import { untilReal } from "./support/poll.js"
import { createRunDir, isAlive, reapRunDir, recordProcess, removeRunDir } from "./support/processes.js"
import * as RedisCluster from "./support/RedisCluster.js"
import * as RedisServer from "./support/RedisServer.js"

const currentPid = (server: RedisServer.RedisServer) =>
  Effect.flatMap(server.pid, (pid) =>
    Option.match(pid, { onNone: () => Effect.die("server is not running"), onSome: Effect.succeed })
  )

const recordFile = (pid: number) => path.join(RedisServer.runDir(), `${pid}.json`)

/** An ioredis client that never reconnects, so a killed connection stays visible. */
const connect = (server: RedisServer.RedisServer) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Redis(server.port, "127.0.0.1", {
        lazyConnect: true,
        retryStrategy: () => null,
        maxRetriesPerRequest: 0
      })
      await client.connect()
      return client
    }),
    (client) => Effect.sync(() => client.disconnect())
  )

describe("RedisServer harness", () => {
  it.live("start: a fresh server on a free loopback port, no persistence, own dir; scope close removes it", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const server = yield* RedisServer.start().pipe(Scope.provide(scope))
      const pid = yield* currentPid(server)
      assert.notStrictEqual(server.port, 6379)
      assert.strictEqual(server.url, `redis://127.0.0.1:${server.port}`)
      assert.isTrue(yield* server.ping())
      assert.isTrue(fs.existsSync(recordFile(pid)))
      deepStrictEqual(yield* server.command("CONFIG", "GET", "save"), ["save", ""])
      deepStrictEqual(yield* server.command("CONFIG", "GET", "appendonly"), ["appendonly", "no"])
      deepStrictEqual(yield* server.command("CONFIG", "GET", "bind"), ["bind", "127.0.0.1"])
      deepStrictEqual(yield* server.command("CONFIG", "GET", "dir"), ["dir", fs.realpathSync(server.dir)])
      assert.strictEqual(yield* server.dbsize, 0)

      yield* Scope.close(scope, Exit.void)
      assert.isFalse(isAlive(pid))
      assert.isFalse(fs.existsSync(recordFile(pid)))
      assert.isFalse(fs.existsSync(server.dir))
      assert.isFalse(yield* server.ping())
    })
  )

  it.live("two servers get two ports", () =>
    Effect.gen(function* () {
      const a = yield* RedisServer.start()
      const b = yield* RedisServer.start()
      assert.notStrictEqual(a.port, b.port)
      yield* a.command("SET", "k", "a")
      assert.strictEqual(yield* b.command("GET", "k"), null)
      assert.strictEqual(yield* a.command("GET", "k"), "a")
    }).pipe(Effect.scoped)
  )

  it.live("kill: SIGKILL, returns once the process is gone", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const pid = yield* currentPid(server)
      yield* server.kill
      assert.isFalse(isAlive(pid))
      assert.isTrue(Option.isNone(yield* server.pid))
      assert.isFalse(fs.existsSync(recordFile(pid)))
      assert.isFalse(yield* server.ping())
      const failed = yield* Effect.flip(server.command("PING"))
      assert.strictEqual(failed._tag, "RedisServerError")
      // killing twice is harmless
      yield* server.kill
    })
  )

  it.live("restart: same port, new process, answers PING, data gone (no persistence)", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const first = yield* currentPid(server)
      yield* server.command("SET", "k", "v")
      yield* server.kill
      yield* server.restart
      const second = yield* currentPid(server)
      assert.notStrictEqual(second, first)
      assert.isTrue(yield* server.ping())
      assert.strictEqual(yield* server.command("GET", "k"), null)
      const config = yield* server.command("CONFIG", "GET", "port")
      deepStrictEqual(config, ["port", String(server.port)])

      // restarting a running server stops it gracefully first
      yield* server.command("SET", "k", "v")
      yield* server.restart
      const third = yield* currentPid(server)
      assert.isFalse(isAlive(second))
      assert.notStrictEqual(third, second)
      assert.strictEqual(yield* server.command("GET", "k"), null)
    })
  )

  it.live("stop: graceful shutdown", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const pid = yield* currentPid(server)
      yield* server.stop
      assert.isFalse(isAlive(pid))
      assert.include(yield* server.logs, "ready to exit")
      assert.isFalse(yield* server.ping())
    })
  )

  it.live("pause / resume: a paused server answers nothing, a resumed one answers again", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const pid = yield* currentPid(server)
      yield* server.pause
      assert.strictEqual(RedisServer.processState(pid), "T")
      assert.isFalse(yield* server.ping(200))
      yield* server.resume
      assert.notStrictEqual(RedisServer.processState(pid), "T")
      assert.isTrue(yield* server.ping(1_000))
    })
  )

  it.live("a paused server is still removed when its scope closes", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const server = yield* RedisServer.start().pipe(Scope.provide(scope))
      const pid = yield* currentPid(server)
      yield* server.pause
      yield* Scope.close(scope, Exit.void)
      assert.isFalse(isAlive(pid))
    })
  )

  it.live("clientKill: pubsub kills only subscribers, normal kills only normal clients", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const normal = yield* connect(server)
      const subscriber = yield* connect(server)
      yield* Effect.promise(() => subscriber.subscribe("ch"))
      assert.strictEqual(yield* server.numsub("ch"), 1)

      assert.strictEqual(yield* server.clientKill("pubsub"), 1)
      yield* untilReal(
        "the subscriber to close",
        Effect.sync(() => subscriber.status === "end"),
        { within: 2_000, every: 10 }
      )
      assert.strictEqual(yield* server.numsub("ch"), 0)
      assert.strictEqual(normal.status, "ready")
      assert.strictEqual(yield* Effect.promise(() => normal.ping()), "PONG")

      assert.strictEqual(yield* server.clientKill("normal"), 1)
      yield* untilReal(
        "the normal client to close",
        Effect.sync(() => normal.status === "end"),
        { within: 2_000, every: 10 }
      )
      // the harness's own connection is not among the killed
      assert.isTrue(yield* server.ping())
    })
  )

  it.live("command: raw replies and error replies", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      assert.strictEqual(yield* server.command("SET", "a b", "x\r\ny"), "OK")
      assert.strictEqual(yield* server.command("GET", "a b"), "x\r\ny")
      assert.strictEqual(yield* server.command("INCR", "n"), 1)
      deepStrictEqual(yield* server.command("MGET", "a b", "missing"), ["x\r\ny", null])
      const error = yield* Effect.flip(server.command("INCR", "a b"))
      assert.include(error.message, "not an integer")
      const info = yield* server.info("server")
      assert.strictEqual(info.tcp_port, String(server.port))
    })
  )

  it.live("reapRunDir kills a recorded redis-server, and nothing that is not one", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const pid = yield* currentPid(server)
      const dir = createRunDir()
      yield* Effect.addFinalizer(() => Effect.sync(() => removeRunDir(dir)))
      const bystander = spawn("sleep", ["30"], { stdio: "ignore" })
      yield* Effect.addFinalizer(() => Effect.sync(() => bystander.kill("SIGKILL")))
      const bystanderPid = bystander.pid
      assert.isDefined(bystanderPid)
      recordProcess(dir, { pid, port: server.port, worker: process.pid })
      recordProcess(dir, { pid: bystanderPid ?? -1, port: server.port, worker: process.pid })

      const killed = reapRunDir(dir)
      deepStrictEqual(killed, [pid])
      yield* untilReal(
        "the reaped server to exit",
        Effect.sync(() => !isAlive(pid)),
        { within: 2_000, every: 10 }
      )
      assert.isTrue(isAlive(bystanderPid ?? -1))
      deepStrictEqual(fs.readdirSync(dir).sort(), ["owner"])
      assert.isTrue(Option.isNone(yield* server.pid))
    })
  )
})

describe("RedisCluster harness", () => {
  it.live(
    "start: three masters covering every slot, each recorded in the run directory; restart keeps the slots; scope close removes them",
    () =>
      Effect.gen(function* () {
        const scope = yield* Scope.make()
        const cluster = yield* RedisCluster.start().pipe(Scope.provide(scope))
        assert.strictEqual(cluster.nodes.length, 3)
        assert.strictEqual(cluster.url, `redis://${cluster.nodes.map((n) => `127.0.0.1:${n.port}`).join(",")}`)
        const pids = yield* Effect.forEach(cluster.nodes, currentPid)
        for (const pid of pids) assert.isTrue(fs.existsSync(recordFile(pid)))
        for (const node of cluster.nodes) {
          const info = String(yield* node.command("CLUSTER", "INFO"))
          assert.include(info, "cluster_state:ok")
          assert.include(info, "cluster_slots_assigned:16384")
          assert.include(info, "cluster_known_nodes:3")
        }
        const owner = yield* cluster.nodeFor("{tok}:a")
        yield* owner.command("SET", "{tok}:a", "1")
        assert.strictEqual(yield* cluster.dbsize, 1)

        yield* cluster.kill
        for (const pid of pids) assert.isFalse(isAlive(pid))
        yield* cluster.restart
        // the same cluster (its nodes.conf), without the data
        assert.strictEqual((yield* cluster.nodeFor("{tok}:a")).port, owner.port)
        assert.strictEqual(yield* cluster.dbsize, 0)

        const restarted = yield* Effect.forEach(cluster.nodes, currentPid)
        yield* Scope.close(scope, Exit.void)
        for (const pid of restarted) {
          assert.isFalse(isAlive(pid))
          assert.isFalse(fs.existsSync(recordFile(pid)))
        }
        for (const node of cluster.nodes) assert.isFalse(fs.existsSync(node.dir))
      }),
    120_000
  )
})
