import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Inspect from "../src/Inspect.js"
import { Store } from "../src/Store.js"
import { redisWorkers, update } from "./delivery/workers.js"
import { Counter } from "./state/workers.js"
import { leasehold } from "./support/cli.js"
import * as Monitor from "./support/monitor.js"
import * as RedisServer from "./support/RedisServer.js"

/** Every command the server runs while `effect` runs (scripts' own commands included). */
const commandsDuring = <A, E, R>(server: RedisServer.RedisServer, effect: Effect.Effect<A, E, R>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const m = yield* Monitor.monitor(server)
      yield* Effect.sleep(50)
      const result = yield* effect
      yield* Effect.sleep(100)
      // a CLIENT command is named with its subcommand: naming a connection is no write
      return [
        result,
        m.commands.map(({ args: [name, sub] }) => (name === "client" ? `client ${sub?.toLowerCase()}` : name!))
      ] as const
    })
  )

const reads = new Set([
  "scan",
  "evalsha",
  "eval",
  "type",
  "strlen",
  "zcard",
  "time",
  "pttl",
  "get",
  "zrange",
  "zscore",
  "xlen",
  // the workers' own connections, read meanwhile: a mailbox's blocking read, a connection named
  "xread",
  "client setname",
  "client setinfo"
])

describe("inspect", () => {
  it.live(
    "a token: the holder with its fence and time left, the queued workers, the slices and the socket record; nothing is written",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url)
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* a.tokens.link("tab-1", "sid-1")
        // A holds tab-1's lock in a modification that waits for the gate; B is queued for it.
        const gate = yield* Deferred.make<void>()
        const entered = yield* Deferred.make<void>()
        const holding = yield* Effect.forkChild(
          a.states.modifyEffect("tab-1", Counter, (s) =>
            Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
              null,
              { n: s.n + 5 }
            ] as const)
          )
        )
        yield* Deferred.await(entered)
        const waiting = yield* Effect.forkChild(b.states.modify("tab-1", Counter, (s) => [null, { n: s.n + 1 }]))
        yield* Effect.sleep(50)
        const [report, commands] = yield* commandsDuring(
          server,
          Effect.provideService(Inspect.token("tab-1"), Store, fx.store)
        )
        const lock = Option.getOrThrow(report.lock)
        assert.isTrue(lock.fence >= 1)
        assert.isTrue(lock.remainingMs > 0)
        deepStrictEqual(
          report.socket.pipe(Option.map((socket) => (socket._tag === "Record" ? socket.instanceId : "corrupt"))),
          Option.some(a.id)
        )
        assert.includeMembers([...report.waiting], [b.id])
        const unexpected = commands.filter((command) => !reads.has(command))
        deepStrictEqual(unexpected, [], "inspection sends only reads")
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(holding)
        yield* Fiber.join(waiting)
        const after = yield* Effect.provideService(Inspect.token("tab-1"), Store, fx.store)
        deepStrictEqual(
          after.slices.map((slice) => slice.name),
          ["counter"]
        )
        assert.strictEqual(after.slices[0]!.bytes, JSON.stringify({ n: 6 }).length)
        assert.isTrue(Option.isSome(after.slices[0]!.ttlMs))
      }),
    30_000
  )

  it.live(
    "the command prints JSON for a token and an instance, and refuses a pattern before connecting",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url)
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* a.tokens.link("tab-1", "sid-1")
        yield* a.states.modify("tab-1", Counter, (s) => [null, { n: s.n + 1 }])
        for (let i = 1; i <= 3; i++) yield* b.mailbox.send("tab-1", update(i))
        yield* Effect.sleep(300)
        assert.strictEqual(a.received.length, 3)

        const token = yield* leasehold(["inspect", "token", "tab-1", "--url", server.url, "--json"])
        assert.strictEqual(token.code, 0, token.stderr)
        const parsed = JSON.parse(token.stdout) as ReturnType<typeof Inspect.tokenJson>
        assert.isNull(parsed.lock)
        deepStrictEqual(
          parsed.slices.map((slice) => [slice.name, slice.bytes]),
          [["counter", JSON.stringify({ n: 1 }).length]]
        )
        assert.deepInclude(parsed.socket ?? {}, { instance_id: a.id, connection_id: "sid-1" })

        const instance = yield* leasehold(["inspect", "instance", a.id, "--json"], { LEASEHOLD_REDIS_URL: server.url })
        assert.strictEqual(instance.code, 0, instance.stderr)
        const mailbox = JSON.parse(instance.stdout) as ReturnType<typeof Inspect.instanceJson>
        assert.strictEqual(mailbox.mailbox_length, 3)
        const entries = yield* fx.store.mailboxRead(a.id, "0-0", { count: 10 })
        assert.strictEqual(mailbox.last_delivered_id, entries[2]!.id)

        const connectionsBefore = Number((yield* server.info("stats")).total_connections_received)
        const pattern = yield* leasehold(["inspect", "token", "tab-*", "--url", server.url])
        assert.strictEqual(pattern.code, 2)
        assert.match(pattern.stderr, /invalid token "tab-\*"/)
        const connectionsAfter = Number((yield* server.info("stats")).total_connections_received)
        // (the info call itself is one connection)
        assert.strictEqual(connectionsAfter, connectionsBefore + 1)
      }),
    60_000
  )
})
