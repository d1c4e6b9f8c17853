import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TokenManager from "../src/TokenManager.js"
import * as Logs from "./support/logs.js"
import { untilReal } from "./support/poll.js"
import { redisCluster, type TokenWorker } from "./tokens/cluster.js"
import { deadRecordTakenOverAfterRefusedLink, maxmemory, probe } from "./tokens/refusedWrites.js"
import { type TokenBackend, tokenSuite } from "./tokens/suite.js"

const redis: TokenBackend = {
  name: "redis",
  test: (name, input, options, body) =>
    it.live(name, () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster(input, options)
        yield* body(cluster, {
          advance: (ms) => Effect.sleep(ms),
          until: (label, check) => untilReal(label, check, { within: 8_000 })
        }).pipe(Effect.provide(Logs.into(cluster.logs)))
      })
    )
}

tokenSuite(redis)

/** The server's leasehold connections, counted by their name (`leasehold:<role>`). */
const connectionsByName = (cluster: Effect.Success<ReturnType<typeof redisCluster>>) =>
  Effect.map(Effect.orDie(cluster.server.command("CLIENT", "LIST")), (list) => {
    const counts: Record<string, number> = {}
    for (const match of String(list).matchAll(/ name=(leasehold:\S+) /g))
      counts[match[1]!] = (counts[match[1]!] ?? 0) + 1
    return counts
  })

/** Two workers of one server, each with a tab linked: tab-a on a, tab-b on b. */
const twoLinked = Effect.gen(function* () {
  const cluster = yield* redisCluster()
  const a = yield* cluster.worker()
  const b = yield* cluster.worker()
  yield* a.tokens.link("tab-a", "ca")
  yield* b.tokens.link("tab-b", "cb")
  return { cluster, a, b }
})

describe("TokenManager (redis): workers", () => {
  it.live("each worker has its own command and subscriber connections, as separate processes do", () =>
    Effect.gen(function* () {
      const { cluster } = yield* twoLinked
      const before = yield* connectionsByName(cluster)
      const c = yield* cluster.worker()
      yield* c.tokens.link("tab-c", "cc")
      // one worker more: one connection more of each role the others have
      yield* untilReal(
        "a third worker's connections",
        Effect.map(connectionsByName(cluster), (after) =>
          ["leasehold:command", "leasehold:subscriber"].every((name) => (after[name] ?? 0) === (before[name] ?? 0) + 1)
        ),
        { within: 8_000 }
      )
      // the harness's store and the three workers' own
      assert.isAtLeast(before["leasehold:command"] ?? 0, 3, JSON.stringify(before))
    })
  )
})

const socketsLoop = (w: TokenWorker) =>
  Effect.map(w.health.loops, (loops) => loops.find((loop) => loop.name === TokenManager.loopName)?.state._tag)

describe("TokenManager (redis): refused writes and restarts", () => {
  it.live("a refused write (out of memory): linked locally; a refused restore is logged, the loop stays up", () =>
    Effect.gen(function* () {
      const cluster = yield* redisCluster()
      const a = yield* cluster.worker()
      yield* a.tokens.link("tab-0", "c0")
      yield* Effect.orDie(cluster.server.command("CONFIG", "SET", "maxmemory", "1"))
      const refused = yield* Effect.flip(a.tokens.link("tab-1", "c1"))
      assert.strictEqual(refused._tag, "RecordNotStored")
      if (refused._tag === "RecordNotStored") assert.strictEqual(refused.cause._tag, "StoreRefused")
      deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("c1"))

      // a resubscription restores: tab-0 is unchanged, tab-1's claim is refused and logged
      yield* cluster.dropSubscriptions
      yield* untilReal(
        "the refused restore logged",
        Effect.sync(() =>
          cluster.logs.some((line) => line.level === "WARN" && line.message.includes("cannot restore token tab-1"))
        ),
        { within: 8_000 }
      )
      yield* untilReal(
        "the sockets loop running",
        Effect.map(socketsLoop(a), (state) => state === "Running"),
        { within: 8_000 }
      )
      deepStrictEqual(yield* cluster.record("tab-1"), Option.none())

      yield* Effect.orDie(cluster.server.command("CONFIG", "SET", "maxmemory", "0"))
      yield* cluster.dropSubscriptions
      yield* untilReal("tab-1 stored", Effect.map(cluster.record("tab-1"), Option.isSome), { within: 8_000 })
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some({ instanceId: a.id, connectionId: "c1" }))
      deepStrictEqual(yield* cluster.record("tab-0"), Option.some({ instanceId: a.id, connectionId: "c0" }))
    })
  )

  it.live(
    "a tab linked while writes are refused, over a dead worker's record: taken over once they are accepted, not lost",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ presenceExpiration: 600 })
        yield* deadRecordTakenOverAfterRefusedLink(
          cluster,
          (refused) => Effect.asVoid(Effect.orDie(cluster.server.command(...maxmemory(refused)))),
          cluster.server.command(...probe),
          10_000
        )
      })
  )

  it.live("after a server restart the loop recovers, notifications are enabled again, records are back", () =>
    Effect.gen(function* () {
      const { cluster, a, b } = yield* twoLinked
      yield* cluster.server.restart
      yield* untilReal(
        "both records back",
        Effect.map(Effect.all([cluster.record("tab-a"), cluster.record("tab-b")]), (records) =>
          records.every(Option.isSome)
        ),
        { within: 8_000 }
      )
      const [, flags] = (yield* Effect.orDie(cluster.server.command("CONFIG", "GET", "notify-keyspace-events"))) as [
        string,
        string
      ]
      for (const flag of ["K", "g", "$", "x", "e"]) assert.include(flags, flag)
      // the restarted server's events work: a deletion is claimed again at once
      yield* cluster.remove("tab-a")
      yield* untilReal("tab-a claimed again", Effect.map(cluster.record("tab-a"), Option.isSome), { within: 8_000 })
      for (const w of [a, b]) {
        yield* untilReal(
          "the sockets loop running",
          Effect.map(socketsLoop(w), (state) => state === "Running"),
          { within: 8_000 }
        )
      }
      assert.isTrue(
        cluster.logs.some(
          (line) => line.level === "ERROR" && line.message.startsWith("sockets: task error, retrying until it recovers")
        )
      )
      assert.isTrue(cluster.logs.some((line) => line.level === "INFO" && line.message === "sockets: task recovered"))
    })
  )

  it.live("a link interrupted while its claim is in flight leaves no record behind", () =>
    Effect.gen(function* () {
      const cluster = yield* redisCluster()
      const a = yield* cluster.worker()
      yield* cluster.server.pause
      const linking = yield* Effect.forkChild(a.tokens.link("tab-cut", "c1"))
      // The claim is sent to the paused server, which applies it once it runs again.
      yield* Effect.sleep(100)
      yield* Effect.sync(() => linking.interruptUnsafe())
      yield* cluster.server.resume
      yield* Fiber.await(linking)
      deepStrictEqual(yield* a.tokens.local("tab-cut"), Option.none())
      deepStrictEqual(yield* cluster.record("tab-cut"), Option.none())
    })
  )
})
