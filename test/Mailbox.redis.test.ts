import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import { type DeliveryBackend, deliverySuite } from "./delivery/suite.js"
import { handled, redisWorkers, update } from "./delivery/workers.js"
import { atLevels, type LogLine } from "./support/logs.js"
import * as Monitor from "./support/monitor.js"
import { untilReal } from "./support/poll.js"
import * as TcpProxy from "./support/proxy.js"
import * as RedisServer from "./support/RedisServer.js"

/** The reader's failure as logged: one ERROR when it starts, one INFO when it recovers. */
const assertOneFailureLogged = (logs: ReadonlyArray<LogLine>) => {
  const lines = atLevels(logs)
    .filter((line) => line.message.startsWith("mailbox: task"))
    .map((line) => `${line.level} ${line.message}`)
  assert.strictEqual(lines.length, 2, lines.join("\n"))
  assert.match(lines[0]!, /^ERROR mailbox: task error, retrying until it recovers: /)
  assert.strictEqual(lines[1], "INFO mailbox: task recovered")
}

const redis: DeliveryBackend = {
  name: "redis",
  test: (name, body) =>
    it.live(name, () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url)
        yield* fx.logged(body(fx, { until: (label, check) => untilReal(label, check, { within: 10_000 }) }))
      })
    )
}

deliverySuite(redis)

const fastRetries = { retryDelayInitial: 50, retryDelayMax: 200 }

describe("delivery through Redis outages", () => {
  it.live(
    "the mailbox reader survives seven failures in one outage: one ERROR, one INFO, and the next update arrives",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url, fastRetries)
        const a = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        yield* server.kill
        yield* untilReal(
          "seven failed reads",
          Effect.map(a.health.loops, (loops) =>
            loops.some((loop) => loop.name === "mailbox" && loop.state._tag === "Retrying" && loop.state.errors >= 7)
          ),
          { within: 10_000 }
        )
        yield* server.restart
        const b = yield* fx.worker()
        // The restart lost every key: A writes its record back once it is reconnected.
        yield* untilReal("A's record is back", Effect.map(b.tokens.owner("token1", { refresh: true }), Option.isSome), {
          within: 10_000
        })
        assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "sent")
        yield* untilReal(
          "A receives",
          Effect.sync(() => a.received.length === 1),
          { within: 10_000 }
        )
        assertOneFailureLogged(fx.logs)
      }),
    30_000
  )

  it.live(
    "after CLIENT KILL of its connections the reader logs one ERROR and one INFO, and the next update arrives",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url, fastRetries)
        const a = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        // The sender is the store itself here, so that A's is the only mailbox loop logging.
        const send = (n: number) =>
          fx.store.mailboxAppend(
            a.id,
            JSON.stringify({ token: "token1", update: { n, at: update(n).at.toISOString(), tags: [`t${n}`] } }),
            { maxLen: 100, ttlMs: 60_000 }
          )
        yield* send(1)
        yield* untilReal(
          "A receives the first",
          Effect.sync(() => a.received.length === 1),
          { within: 10_000 }
        )
        assert.isAtLeast(yield* server.clientKill("normal"), 2)
        yield* untilReal(
          "A's reader recovered",
          Effect.sync(() => fx.logs.some((line) => line.message === "mailbox: task recovered")),
          { within: 10_000 }
        )
        yield* untilReal("the store takes the second", Effect.map(Effect.option(send(2)), Option.isSome), {
          within: 10_000
        })
        yield* untilReal(
          "A receives the second",
          Effect.sync(() => a.received.length === 2),
          { within: 10_000 }
        )
        assertOneFailureLogged(fx.logs)
        deepStrictEqual(
          a.received.map(([, value]) => value.n),
          [1, 2]
        )
      }),
    20_000
  )

  it.live(
    "updates sent while the owner's connection is down for 10 s arrive after it returns, in order, once each",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const proxy = yield* TcpProxy.start(server.port)
        const fx = yield* redisWorkers(server.url, fastRetries)
        const a = yield* fx.worker({ url: proxy.url })
        const b = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        yield* proxy.cut
        for (let i = 1; i <= 20; i++) {
          assert.strictEqual(yield* b.mailbox.send("token1", update(i)), "sent")
          // Not a wait for something to happen: the outage lasting 10 s, the sends spread over
          // it, is the scenario (A's reader failing again and again meanwhile).
          yield* Effect.sleep(500)
        }
        assert.strictEqual(a.received.length, 0)
        yield* proxy.restore
        yield* untilReal(
          "A receives all",
          Effect.sync(() => a.received.length >= 20),
          { within: 10_000 }
        )
        // whatever A would deliver more (a copy), it has by now
        yield* handled(fx.store, (label, check) => untilReal(label, check, { within: 10_000 }), [a])
        deepStrictEqual(
          a.received.map(([, value]) => value.n),
          Array.from({ length: 20 }, (_, i) => i + 1)
        )
      }),
    40_000
  )

  it.live(
    "updates sent while the server is down for 10 s wait in the sender's outbox and all arrive, in order",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url, { ...fastRetries, commandTimeout: 500 })
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        yield* server.pause
        for (let i = 1; i <= 20; i++) {
          assert.strictEqual(yield* b.mailbox.send("token1", update(i)), "buffered")
          // Not a wait for something to happen: the outage lasting 10 s, the sends spread over
          // it, is the scenario (the outbox keeping them all meanwhile).
          yield* Effect.sleep(500)
        }
        assert.strictEqual(yield* b.mailbox.buffered, 20)
        yield* server.resume
        yield* untilReal(
          "A receives all",
          Effect.sync(() => a.received.length >= 20),
          { within: 10_000 }
        )
        // whatever A would deliver more (a copy), it has by now
        yield* handled(fx.store, (label, check) => untilReal(label, check, { within: 10_000 }), [a])
        deepStrictEqual(
          a.received.map(([, value]) => value.n),
          Array.from({ length: 20 }, (_, i) => i + 1)
        )
        // the outbox lets an update go once its append is answered, which A may read first
        yield* untilReal(
          "B's outbox is empty",
          Effect.map(b.mailbox.buffered, (n) => n === 0),
          { within: 10_000 }
        )
      }),
    40_000
  )
})

describe("delivery across a restart that lost the store's data", () => {
  it.live(
    "an update sent while the server restarts, before the owner has written its record back, waits for the record and arrives",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const proxy = yield* TcpProxy.start(server.port)
        // A command timeout longer than the outage: a send that finds the connection down
        // waits for it and is answered by the restarted server.
        const fx = yield* redisWorkers(server.url, { ...fastRetries, commandTimeout: 5_000 })
        const a = yield* fx.worker({ url: proxy.url })
        const b = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "sent")
        yield* untilReal(
          "A receives the first",
          Effect.sync(() => a.received.length === 1),
          { within: 10_000 }
        )
        // The owner stays away until the end: the restarted server has no record of its socket.
        yield* proxy.cut
        yield* server.stop
        yield* untilReal(
          "B's connection is down",
          Effect.map(b.store.status, (status) => !status.ready),
          { within: 10_000 }
        )
        // Started at once, the send runs to its wait for the connection (nothing before it
        // waits for anything) before the restart begins.
        const during = yield* Effect.forkChild(b.mailbox.send("token1", update(2)), { startImmediately: true })
        assert.isUndefined(during.pollUnsafe(), "the send waits for the connection")
        yield* server.restart
        // Answered by the restarted server, which has no record yet: kept, not dropped.
        assert.strictEqual(yield* Fiber.join(during), "buffered")
        // Sent after the server is back, before the owner is: kept as well, behind the first.
        assert.strictEqual(yield* b.mailbox.send("token1", update(3)), "buffered")
        yield* proxy.restore
        yield* untilReal(
          "A receives all",
          Effect.sync(() => a.received.length >= 3),
          { within: 10_000 }
        )
        // whatever A would deliver more (a copy), it has by now
        yield* handled(fx.store, (label, check) => untilReal(label, check, { within: 10_000 }), [a])
        deepStrictEqual(
          a.received.map(([, value]) => value.n),
          [1, 2, 3]
        )
        // the outbox lets an update go once its append is answered, which A may read first
        yield* untilReal(
          "B's outbox is empty",
          Effect.map(b.mailbox.buffered, (n) => n === 0),
          { within: 10_000 }
        )
      }),
    30_000
  )
})

describe("round trips of a send", () => {
  it.live("an update for a socket of another worker is one command: the record read where it is appended", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const fx = yield* redisWorkers(server.url)
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      yield* a.tokens.link("token1", "sid1")
      // warm: B's scripts loaded, A's reader past its start
      assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "sent")
      yield* untilReal(
        "A receives the first",
        Effect.sync(() => a.received.length === 1),
        { within: 10_000 }
      )
      const m = yield* Monitor.monitor(server)
      // what was sent before the send is before this index
      const before = yield* Monitor.barrier(server, m)
      assert.strictEqual(yield* b.mailbox.send("token1", update(2)), "sent")
      yield* untilReal(
        "A receives the second",
        Effect.sync(() => a.received.length === 2),
        { within: 10_000 }
      )
      const after = yield* Monitor.barrier(server, m)
      // B's commands: the one script (its own GET and XADD run inside it)
      const scripts = m.commands
        .slice(before, after)
        .filter(
          (command) =>
            !command.fromScript && command.args[0] === "evalsha" && command.args[3] === "leasehold:{token1}:socket"
        )
      assert.strictEqual(scripts.length, 1)
      const direct = m.commands
        .slice(before, after)
        .filter((command) => !command.fromScript && command.args[0] === "get" && command.args[1]?.endsWith(":socket"))
      deepStrictEqual(direct, [])
      deepStrictEqual(
        a.received.map(([, value]) => value.n),
        [1, 2]
      )
    })
  )
})
