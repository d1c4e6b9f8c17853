/**
 * The token manager's behaviour, once, for both stores: `TokenManager.memory.test.ts`
 * runs it on MemoryStore under TestClock, `TokenManager.redis.test.ts` on RedisStore
 * against a real redis-server, `TokenManager.cluster.test.ts` on RedisStore against a
 * real Redis Cluster. On Redis each worker has a store of its own (`cluster.ts`).
 */
import { assert, describe } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { isValidToken } from "../../src/internal/validate.js"
import type * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import type { SocketRecord } from "../../src/Store.js"
import * as TokenManager from "../../src/TokenManager.js"
import { within } from "../conformance/helpers.js"
import type { ClusterOptions, TokenCluster, TokenWorker } from "./cluster.js"

export interface Tools {
  /** Let `ms` pass: TestClock on memory, real time on Redis. */
  readonly advance: (ms: number) => Effect.Effect<void>
  /** Wait until `check` holds (polling; on memory the TestClock moves 1 ms a poll). */
  readonly until: (label: string, check: Effect.Effect<boolean, unknown>) => Effect.Effect<void>
}

export interface TokenBackend {
  readonly name: "memory" | "redis" | "redis-cluster"
  readonly test: (
    name: string,
    input: LeaseholdConfig.Input,
    options: ClusterOptions,
    body: (cluster: TokenCluster, tools: Tools) => Effect.Effect<void, unknown, Scope.Scope>
  ) => void
}

const counter = (metric: Metric.Counter<number>) => Effect.map(Metric.value(metric), (state) => state.count)

const mine = (w: TokenWorker, connectionId: string): SocketRecord => ({ instanceId: w.id, connectionId })

/** The failure of `effect`, which must be tagged `tag`. */
const failure = <A, E extends { readonly _tag: string }>(effect: Effect.Effect<A, E>) =>
  Effect.flatMap(Effect.exit(effect), (exit) =>
    Exit.isFailure(exit) && Option.isSome(Cause.findErrorOption(exit.cause))
      ? Effect.succeed(Option.getOrThrow(Cause.findErrorOption(exit.cause)))
      : Effect.die(`expected a failure, got ${JSON.stringify(exit)}`)
  )

const allTokens = (w: TokenWorker) =>
  Effect.map(Stream.runCollect(w.tokens.tokens), (chunk) => [...new Set([...chunk].map(([token]) => token))].sort())

/** Warnings of the token manager that a store write failed. */
const writeWarnings = (cluster: TokenCluster) =>
  cluster.logs.filter((line) => line.level === "WARN" && line.message.startsWith("socket records:")).length

/** A presence refreshed every 200 s: the presence loop's own commands stay out of a count of store operations. */
const quietPresence = { presenceExpiration: 600_000 }

export const tokenSuite = (backend: TokenBackend) => {
  const test = (
    name: string,
    body: (cluster: TokenCluster, tools: Tools) => Effect.Effect<void, unknown, Scope.Scope>,
    input: LeaseholdConfig.Input = {},
    options: ClusterOptions = {}
  ) => backend.test(name, input, options, body)

  describe(`TokenManager (${backend.name})`, () => {
    test("link claims the record: stored, local and owner agree (TM2, TM4)", (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        deepStrictEqual(yield* a.tokens.link("tab-1", "c1"), { token: "tab-1", fresh: false, takenOver: false })
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("c1"))
        deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.some(mine(a, "c1")))
        deepStrictEqual(yield* a.tokens.owner("tab-1", { refresh: true }), Option.some(mine(a, "c1")))
        deepStrictEqual(yield* a.tokens.local("tab-2"), Option.none())
        assert.strictEqual(a.tokens.instanceId, a.id)
      }))

    test(
      "the same token and connection again: the same answer and no store operation (TM5)",
      (cluster) =>
        Effect.gen(function* () {
          const a = yield* cluster.worker()
          yield* a.tokens.link("tab-1", "c1")
          const before = yield* cluster.operations
          deepStrictEqual(yield* a.tokens.link("tab-1", "c1"), { token: "tab-1", fresh: false, takenOver: false })
          deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.some(mine(a, "c1")))
          deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("c1"))
          assert.strictEqual(yield* cluster.operations, before)
        }),
      quietPresence
    )

    test("a token linked elsewhere gets a fresh token; the original record stays (TM6)", (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-1", "c1")
        const other = yield* b.tokens.link("tab-1", "c2")
        assert.isTrue(other.fresh)
        assert.notStrictEqual(other.token, "tab-1")
        assert.isTrue(isValidToken(other.token))
        assert.strictEqual(other.token.length, 36)
        deepStrictEqual(yield* cluster.record(other.token), Option.some(mine(b, "c2")))
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
        deepStrictEqual(yield* b.tokens.local(other.token), Option.some("c2"))
        deepStrictEqual(yield* b.tokens.local("tab-1"), Option.none())
        // this very instance with another connection is a duplicate too
        const again = yield* a.tokens.link("tab-1", "c3")
        assert.isTrue(again.fresh)
        assert.notStrictEqual(again.token, other.token)
        deepStrictEqual(yield* cluster.record(again.token), Option.some(mine(a, "c3")))
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("c1"))
      }))

    test("two workers linking one token at once: exactly one keeps it", (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        for (const token of ["race-1", "race-2", "race-3", "race-4", "race-5"]) {
          const [fromA, fromB] = yield* Effect.all([a.tokens.link(token, "ca"), b.tokens.link(token, "cb")], {
            concurrency: "unbounded"
          })
          assert.strictEqual([fromA, fromB].filter((linked) => !linked.fresh).length, 1, token)
          const [winner, connection] = fromA.fresh ? [b, "cb"] : [a, "ca"]
          deepStrictEqual(yield* cluster.record(token), Option.some(mine(winner, connection)))
          const loser = fromA.fresh ? fromA : fromB
          assert.isTrue(loser.fresh && loser.token !== token)
        }
      }))

    test(
      "disconnect deletes our record only; unknown or foreign disconnects do nothing (TM9)",
      (cluster) =>
        Effect.gen(function* () {
          const a = yield* cluster.worker()
          const b = yield* cluster.worker()
          yield* a.tokens.link("tab-1", "c1")
          yield* b.tokens.link("tab-2", "c2")
          const before = yield* cluster.operations
          yield* a.tokens.disconnect("unknown", "c9")
          yield* a.tokens.disconnect("tab-1", "c-other")
          yield* a.tokens.disconnect("tab-2", "c2")
          assert.strictEqual(yield* cluster.operations, before)
          deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
          deepStrictEqual(yield* cluster.record("tab-2"), Option.some(mine(b, "c2")))

          yield* a.tokens.disconnect("tab-1", "c1")
          deepStrictEqual(yield* cluster.record("tab-1"), Option.none())
          deepStrictEqual(yield* a.tokens.local("tab-1"), Option.none())
          deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.none())
          // a second disconnect is a no-op
          yield* a.tokens.disconnect("tab-1", "c1")
        }),
      quietPresence
    )

    test("owners are seen from either worker (TM12), tokens of every worker are enumerated (TM11)", (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("token1", "sid1")
        yield* b.tokens.link("token2", "sid2")
        for (const w of [a, b]) {
          deepStrictEqual(yield* w.tokens.owner("token1"), Option.some(mine(a, "sid1")))
          deepStrictEqual(yield* w.tokens.owner("token2"), Option.some(mine(b, "sid2")))
          deepStrictEqual(yield* w.tokens.owner("token3"), Option.none())
        }
        deepStrictEqual(yield* allTokens(a), ["token1", "token2"])
        yield* a.tokens.disconnectAll
        deepStrictEqual(yield* allTokens(a), ["token2"])
        yield* b.tokens.disconnectAll
        deepStrictEqual(yield* allTokens(b), [])
      }))

    test("closing a worker removes its records and none of another's", (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        for (const token of ["a-1", "a-2", "a-3"]) yield* a.tokens.link(token, `conn-${token}`)
        yield* b.tokens.link("b-1", "conn-b")
        // a fresh token of a duplicate tab belongs to a as well
        const fresh = yield* a.tokens.link("b-1", "conn-dup")
        assert.isTrue(fresh.fresh)
        yield* a.close
        deepStrictEqual(yield* allTokens(b), ["b-1"])
        deepStrictEqual(yield* cluster.record("b-1"), Option.some(mine(b, "conn-b")))
      }))

    test("a store error on link: linked locally, RecordNotStored, one warning; stored when the store returns (TM7, TM8)", (cluster, tools) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        yield* a.tokens.link("tab-0", "c0")
        yield* cluster.outage.begin
        yield* Effect.addFinalizer(() => cluster.outage.end)
        // the store knows it is down: every operation now waits for a reconnection, bounded by the command timeout
        yield* tools.until(
          "the store not ready",
          Effect.map(cluster.store.status, (status) => !status.ready)
        )
        yield* cluster.removeDuringOutage("tab-0")
        const error = yield* failure(a.tokens.link("tab-1", "c1"))
        assert.strictEqual(error._tag, "RecordNotStored")
        if (error._tag === "RecordNotStored") {
          assert.strictEqual(error.token, "tab-1")
          assert.strictEqual(error.cause._tag, "StoreUnavailable")
          assert.isUndefined(error.fresh)
        }
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("c1"))
        deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.some(mine(a, "c1")))
        assert.strictEqual((yield* failure(a.tokens.link("tab-2", "c2")))._tag, "RecordNotStored")
        // a disconnect during the outage: the local entry goes, the error is logged in the same episode
        yield* a.tokens.disconnect("tab-2", "c2")
        deepStrictEqual(yield* a.tokens.local("tab-2"), Option.none())
        assert.strictEqual(writeWarnings(cluster), 1, JSON.stringify(cluster.logs))

        yield* cluster.outage.end
        // Redis restarts empty: every record of a live socket is written back
        yield* tools.until(
          "the records of live sockets stored again",
          Effect.gen(function* () {
            const one = yield* cluster.record("tab-1")
            const zero = yield* cluster.record("tab-0")
            return Option.isSome(one) && Option.isSome(zero)
          })
        )
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
        deepStrictEqual(yield* cluster.record("tab-0"), Option.some(mine(a, "c0")))
        deepStrictEqual(yield* cluster.record("tab-2"), Option.none())
        deepStrictEqual(yield* a.tokens.link("tab-3", "c3"), { token: "tab-3", fresh: false, takenOver: false })
        assert.strictEqual(writeWarnings(cluster), 1)
      }))

    test("a record another worker won while we were not listening is adopted, and our disconnect leaves it", (cluster, tools) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-1", "c1")
        yield* a.tokens.link("tab-2", "c2")
        // b's socket now holds tab-1; a plain overwrite reports no deletion, so only the
        // restore after a resubscription can notice
        yield* cluster.overwrite("tab-1", mine(b, "cb"))
        yield* cluster.remove("tab-2")
        yield* tools.until("tab-2 claimed again", Effect.map(cluster.record("tab-2"), Option.isSome))
        deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.some(mine(a, "c1")))
        yield* cluster.dropSubscriptions
        yield* tools.until(
          "tab-1 adopted",
          Effect.map(a.tokens.owner("tab-1"), (owner) => Option.isSome(owner) && owner.value.instanceId === b.id)
        )
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.none())
        deepStrictEqual(yield* a.tokens.local("tab-2"), Option.some("c2"))
        yield* a.tokens.disconnect("tab-1", "c1")
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
        deepStrictEqual(yield* cluster.record("tab-2"), Option.some(mine(a, "c2")))
      }))

    test("a worker built while the store is down links locally and stores its records when it returns", (cluster, tools) =>
      Effect.gen(function* () {
        const later = yield* cluster.storeFirst
        yield* cluster.outage.begin
        yield* Effect.addFinalizer(() => cluster.outage.end)
        const a = yield* later
        deepStrictEqual(yield* a.tokens.keepAlive, Option.none())
        assert.strictEqual((yield* failure(a.tokens.link("tab-1", "c1")))._tag, "RecordNotStored")
        yield* cluster.outage.end
        yield* tools.until("tab-1 stored", Effect.map(cluster.record("tab-1"), Option.isSome))
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
        deepStrictEqual(yield* a.tokens.keepAlive, Option.some("events" as const))
      }))

    test("closing a worker while the store is down ends promptly; its records expire", (cluster, tools) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        for (const token of ["tab-1", "tab-2", "tab-3"]) yield* a.tokens.link(token, `c-${token}`)
        yield* cluster.outage.begin
        yield* Effect.addFinalizer(() => cluster.outage.end)
        yield* tools.until(
          "the store not ready",
          Effect.map(cluster.store.status, (status) => !status.ready)
        )
        yield* within("closing the worker", 10_000, a.close)
      }))

    test("a disconnect before the adoption still leaves another worker's record alone", (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-1", "c1")
        yield* cluster.overwrite("tab-1", mine(b, "cb"))
        // a has not noticed: its local entry still names its own socket
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("c1"))
        yield* a.tokens.disconnect("tab-1", "c1")
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
      }))

    test("a deleted record of a live socket is claimed again; another worker's claim in between is adopted", (cluster, tools) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-1", "c1")
        const restored = yield* counter(TokenManager.recordsRestored)
        const adopted = yield* counter(TokenManager.recordsAdopted)
        yield* cluster.remove("tab-1")
        yield* tools.until(
          "tab-1 claimed again",
          Effect.map(cluster.record("tab-1"), (record) => Option.isSome(record))
        )
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
        assert.isTrue((yield* counter(TokenManager.recordsRestored)) > restored)
        // refresh reads the store and adopts what is there
        yield* cluster.overwrite("tab-1", mine(b, "cb"))
        deepStrictEqual(yield* a.tokens.owner("tab-1", { refresh: true }), Option.some(mine(b, "cb")))
        assert.isTrue((yield* counter(TokenManager.recordsAdopted)) > adopted)
        deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.some(mine(b, "cb")))
        yield* a.tokens.disconnect("tab-1", "c1")
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
      }))

    test(
      "a dead owner's record is taken over and the tab keeps its token: an absent owner at once, a silent one after the presence expiration",
      (cluster, tools) =>
        Effect.gen(function* () {
          const dead: SocketRecord = { instanceId: "dead-worker", connectionId: "c-dead" }
          const b = yield* cluster.worker()
          // b judges others dead only once it has been steady for a whole expiration
          yield* tools.advance(800)
          yield* cluster.overwrite("tab-d", dead)
          deepStrictEqual(yield* b.tokens.link("tab-d", "cb"), { token: "tab-d", fresh: false, takenOver: true })
          deepStrictEqual(yield* cluster.record("tab-d"), Option.some(mine(b, "cb")))
          // present (its entry outlives it) but silent: its presence lives in another slot than the record
          yield* Effect.orDie(cluster.store.refreshPresence(dead.instanceId, 60_000))
          yield* cluster.overwrite("tab-e", dead)
          const link = yield* Effect.forkChild(b.tokens.link("tab-e", "cb2"))
          yield* tools.advance(800)
          yield* tools.until(
            "the silent owner's record taken over",
            Effect.map(
              Effect.sync(() => Option.fromNullishOr(link.pollUnsafe())),
              Option.isSome
            )
          )
          deepStrictEqual(yield* Fiber.join(link), { token: "tab-e", fresh: false, takenOver: true })
          deepStrictEqual(yield* cluster.record("tab-e"), Option.some(mine(b, "cb2")))
        }),
      { presenceExpiration: 600 }
    )

    test(
      "keyspace mode: the expired record of a live socket is claimed again",
      (cluster, tools) =>
        Effect.gen(function* () {
          const a = yield* cluster.worker()
          yield* tools.until("the sockets loop subscribed", Effect.map(a.tokens.keepAlive, Option.isSome))
          deepStrictEqual(yield* a.tokens.keepAlive, Option.some("events" as const))
          yield* a.tokens.link("tab-1", "c1")
          yield* a.tokens.link("tab-2", "c2")
          yield* a.tokens.disconnect("tab-2", "c2")
          yield* tools.advance(2_500)
          yield* tools.until("tab-1 stored again", Effect.map(cluster.record("tab-1"), Option.isSome))
          deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
          deepStrictEqual(yield* cluster.record("tab-2"), Option.none())
          yield* tools.advance(2_500)
          yield* tools.until("tab-1 stored again", Effect.map(cluster.record("tab-1"), Option.isSome))
        }),
      { tokenExpiration: 2_000 }
    )

    test(
      "refresh mode: CONFIG refused, logged exactly once; records survive expiry and deletion by refresh",
      (cluster, tools) =>
        Effect.gen(function* () {
          const a = yield* cluster.worker()
          yield* tools.until("the sockets loop subscribed", Effect.map(a.tokens.keepAlive, Option.isSome))
          deepStrictEqual(yield* a.tokens.keepAlive, Option.some("refresh" as const))
          yield* a.tokens.link("tab-1", "c1")
          // several token expirations pass: the record is refreshed every quarter of one
          for (let i = 0; i < 10; i++) {
            yield* tools.advance(500)
            deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
          }
          // a resubscription asks again; the refusal is not logged again
          yield* cluster.dropSubscriptions
          yield* tools.advance(1_100)
          yield* cluster.remove("tab-1")
          yield* tools.advance(600)
          yield* tools.until("tab-1 stored again by the refresh", Effect.map(cluster.record("tab-1"), Option.isSome))
          deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "c1")))
          const refusals = cluster.logs.filter(
            (line) => line.level === "WARN" && line.message.includes("refused to enable keyspace notifications")
          )
          assert.strictEqual(refusals.length, 1, JSON.stringify(cluster.logs))
          assert.include(refusals[0]!.message, "refresh every 500ms")
        }),
      { tokenExpiration: 2_000 },
      { refuseEvents: true }
    )
  })
}
