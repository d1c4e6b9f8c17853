/**
 * A dead owner is not a duplicate (memory store, time on the TestClock): a record whose
 * worker is absent, silent, or says its socket is gone is taken over and the tab keeps its
 * token; a live owner's socket still makes a duplicate; two takeovers at once have one
 * winner; a store outage is not taken for death; a worker whose presence lapsed finds the
 * records taken from it and reports their sockets as lost.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/testing/TestClock"
import { makeKeys } from "../src/internal/keys.js"
import type { SocketRecord } from "../src/Store.js"
import { StoreUnavailable } from "../src/StoreError.js"
import * as TokenManager from "../src/TokenManager.js"
import { untilOnTestClock } from "./support/poll.js"
import { settle } from "./support/testClock.js"
import { memoryCluster, type TokenWorker } from "./tokens/cluster.js"

const presenceMs = 600
const input = { presenceExpiration: presenceMs }

const mine = (worker: TokenWorker, connectionId: string): SocketRecord => ({ instanceId: worker.id, connectionId })

/** A record left by a worker that was SIGKILLed: its presence entry lives on until it expires. */
const dead: SocketRecord = { instanceId: "dead-worker", connectionId: "c-dead" }

/** Move the TestClock in small steps until `fiber` is done (at most `limitMs`). */
const runFor = <A, E>(fiber: Fiber.Fiber<A, E>, limitMs: number) =>
  Effect.andThen(
    untilOnTestClock(
      "the fiber is done",
      Effect.map(
        Effect.sync(() => Option.fromNullishOr(fiber.pollUnsafe())),
        Option.isSome
      ),
      advanceOptions(limitMs)
    ),
    Fiber.join(fiber)
  )

/** Move the TestClock 50 ms at a time until `done` (at most `limitMs` of it). */
const advanceOptions = (limitMs: number) => ({ step: 50, every: 0, clockLimit: limitMs, within: 20_000 })

/** Whether the record of `token` is `record`. */
const recordIs = (
  cluster: { readonly record: (token: string) => Effect.Effect<Option.Option<SocketRecord>> },
  token: string,
  record: SocketRecord
) =>
  Effect.map(
    cluster.record(token),
    (found) => Option.isSome(found) && JSON.stringify(found.value) === JSON.stringify(record)
  )

/** Let a worker's presence loop become steady (a whole presence expiration). */
const steady = Effect.andThen(TestClock.adjust(presenceMs + 100), settle)

/**
 * The tab of a SIGKILLed worker (its record `dead` there, no presence) reconnects to `b`
 * while the store is down, `b` having been steady before: linked locally, `RecordNotStored`;
 * then the store returns.
 */
const linkDuringOutage = (
  cluster: {
    readonly overwrite: (token: string, record: SocketRecord) => Effect.Effect<void>
    readonly outage: { readonly begin: Effect.Effect<void>; readonly end: Effect.Effect<void> }
  },
  b: TokenWorker
) =>
  Effect.gen(function* () {
    yield* cluster.overwrite("tab-1", dead)
    yield* steady
    yield* cluster.outage.begin
    yield* settle
    assert.strictEqual((yield* Effect.flip(b.tokens.link("tab-1", "cb")))._tag, "RecordNotStored")
    yield* cluster.outage.end
    yield* settle
  })

/** The INFO line of a take-over of tab-1's dead record. */
const takingOver = "tab-1: the socket of dead-worker is gone"

describe("TokenManager (memory): a dead owner is not a duplicate", () => {
  it.effect("an absent owner's record is taken over: same token, takenOver, the record is ours", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const b = yield* cluster.worker()
      yield* cluster.overwrite("tab-1", dead)
      yield* steady
      const linked = yield* b.tokens.link("tab-1", "cb")
      deepStrictEqual(linked, { token: "tab-1", fresh: false, takenOver: true })
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
      deepStrictEqual(yield* b.tokens.local("tab-1"), Option.some("cb"))
    })
  )

  it.effect("a present owner that does not answer is dead after the presence expiration, not before", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const b = yield* cluster.worker()
      yield* steady
      // the crashed worker's last refresh: its entry outlives it by up to an expiration
      yield* cluster.store.refreshPresence(dead.instanceId, presenceMs)
      yield* cluster.overwrite("tab-1", dead)
      const link = yield* Effect.forkChild(b.tokens.link("tab-1", "cb"))
      yield* settle
      yield* TestClock.adjust(presenceMs / 2)
      yield* settle
      assert.isTrue(
        Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(link.pollUnsafe()))),
        "answered before the presence expiration"
      )
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some(dead))
      const linked = yield* runFor(link, presenceMs * 3)
      deepStrictEqual(linked, { token: "tab-1", fresh: false, takenOver: true })
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
    })
  )

  it.effect(
    "a live owner that holds the socket: a duplicate, at once; one that no longer does: taken over, at once",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        yield* a.tokens.link("tab-1", "ca")
        const duplicate = yield* b.tokens.link("tab-1", "cb")
        assert.isTrue(duplicate.fresh && !duplicate.takenOver && duplicate.token !== "tab-1")
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "ca")))
        // a record of a's that no socket of a holds (its delete was lost): a says so, no wait
        yield* cluster.overwrite("tab-2", mine(a, "c-closed"))
        deepStrictEqual(yield* b.tokens.link("tab-2", "cb2"), { token: "tab-2", fresh: false, takenOver: true })
        deepStrictEqual(yield* cluster.record("tab-2"), Option.some(mine(b, "cb2")))
      })
  )

  it.effect("two workers taking the same dead record over at once: one wins, the other gets a fresh token", () =>
    Effect.gen(function* () {
      // Both take-overs wait for each other before they reach the store: each read the dead
      // record, each sends its compare-and-set.
      let arrived = 0
      let bothThere = yield* Deferred.make<void>()
      const cluster = yield* memoryCluster(input, {
        before: (operation) =>
          operation !== "takeOverSocket"
            ? Effect.void
            : Effect.suspend(() =>
                ++arrived === 2 ? Deferred.succeed(bothThere, undefined) : Deferred.await(bothThere)
              )
      })
      const b = yield* cluster.worker()
      const c = yield* cluster.worker()
      yield* steady
      for (const token of ["race-1", "race-2", "race-3"]) {
        arrived = 0
        bothThere = yield* Deferred.make<void>()
        yield* cluster.overwrite(token, dead)
        const both = yield* Effect.forkChild(
          Effect.all([b.tokens.link(token, "cb"), c.tokens.link(token, "cc")], { concurrency: "unbounded" })
        )
        const [fromB, fromC] = yield* runFor(both, presenceMs * 4)
        assert.strictEqual(arrived, 2, "both tried to take the record over")
        assert.strictEqual([fromB, fromC].filter((linked) => linked.takenOver).length, 1, token)
        const [winner, connection, loser] = fromB.takenOver ? [b, "cb", fromC] : [c, "cc", fromB]
        assert.isTrue(loser.fresh && loser.token !== token, token)
        deepStrictEqual(yield* cluster.record(token), Option.some(mine(winner, connection)))
      }
    })
  )

  it.effect("a store outage longer than the presence expiration takes no live tab over", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      yield* a.tokens.link("tab-1", "ca")
      yield* steady
      yield* cluster.outage.begin
      yield* TestClock.adjust(presenceMs * 4)
      yield* settle
      yield* cluster.outage.end
      yield* settle
      // a's presence is not back yet (the store lost it, a's next refresh is still to come)
      yield* cluster.control.setRaw(makeKeys("leasehold").presence(a.id), "", 0)
      const linked = yield* runFor(yield* Effect.forkChild(b.tokens.link("tab-1", "cb")), presenceMs * 6)
      assert.isTrue(linked.fresh && !linked.takenOver)
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "ca")))
      deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("ca"))
    })
  )

  it.effect(
    "a worker whose presence lapsed finds the record taken over, reports its socket lost, deletes nothing",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        const lost = yield* Effect.forkChild(Stream.runCollect(Stream.take(a.tokens.lost, 1)))
        yield* settle
        yield* a.tokens.link("tab-1", "ca")
        yield* b.tokens.link("tab-x", "cb")
        // As while a was paused: its presence expired and b's link took the record over.
        yield* cluster.control.setRaw(makeKeys("leasehold").presence(a.id), "", 0)
        yield* cluster.overwrite("tab-1", mine(b, "cb-new"))
        yield* TestClock.adjust(presenceMs)
        yield* settle
        const reported = yield* Fiber.join(lost)
        deepStrictEqual(reported, [{ token: "tab-1", connectionId: "ca", holder: mine(b, "cb-new") }])
        assert.isTrue(yield* a.tokens.isLost("tab-1"))
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.none())
        yield* a.tokens.disconnect("tab-1", "ca")
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb-new")))
        // linked here again: no longer lost
        yield* b.tokens.disconnect("tab-x", "cb")
        yield* a.tokens.link("tab-x", "ca2")
        assert.isFalse(yield* a.tokens.isLost("tab-x"))
      })
  )

  it.effect(
    "a tab linked during an outage over a dead worker's record keeps its token: taken over when the store returns, not lost",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        const b = yield* cluster.worker()
        const lost = yield* Effect.forkChild(Stream.runCollect(Stream.take(b.tokens.lost, 1)))
        yield* linkDuringOutage(cluster, b)
        // b is not steady yet: the dead worker's record is still there, and a lookup that
        // reads it answers b (the restore settles it), adopting nothing
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(dead))
        deepStrictEqual(yield* b.tokens.owner("tab-1", { refresh: true }), Option.some(mine(b, "cb")))
        deepStrictEqual(yield* b.tokens.local("tab-1"), Option.some("cb"))
        const ours = Option.some(mine(b, "cb"))
        yield* untilOnTestClock(
          "the record is ours or the socket lost",
          Effect.zipWith(
            Effect.sync(() => Option.fromNullishOr(lost.pollUnsafe())),
            recordIs(cluster, "tab-1", mine(b, "cb")),
            (l, r) => Option.isSome(l) || r
          ),
          advanceOptions(presenceMs * 8)
        )
        deepStrictEqual(yield* cluster.record("tab-1"), ours)
        deepStrictEqual(yield* b.tokens.local("tab-1"), Option.some("cb"))
        assert.isFalse(yield* b.tokens.isLost("tab-1"))
        assert.isTrue(
          Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(lost.pollUnsafe()))),
          "no socket reported lost"
        )
        assert.isTrue(
          cluster.logs.some((line) => line.message.includes(takingOver)),
          JSON.stringify(cluster.logs)
        )
      })
  )

  it.effect(
    "a tab linked during an outage while a live worker's socket holds the token: that record is adopted and the socket reported lost",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        const lost = yield* Effect.forkChild(Stream.runCollect(Stream.take(b.tokens.lost, 1)))
        yield* a.tokens.link("tab-1", "ca")
        yield* steady
        yield* cluster.outage.begin
        yield* settle
        assert.strictEqual((yield* Effect.flip(b.tokens.link("tab-1", "cb")))._tag, "RecordNotStored")
        yield* cluster.outage.end
        const reported = yield* runFor(lost, presenceMs * 8)
        deepStrictEqual(reported, [{ token: "tab-1", connectionId: "cb", holder: mine(a, "ca") }])
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(a, "ca")))
        deepStrictEqual(yield* a.tokens.local("tab-1"), Option.some("ca"))
        deepStrictEqual(yield* b.tokens.local("tab-1"), Option.none())
      })
  )

  it.effect("a take-over the store fails while a never-stored record is settled is tried again", () =>
    Effect.gen(function* () {
      let attempts = 0
      const cluster = yield* memoryCluster(input, {
        // the first take-over fails (its connection dropped, say): no loop notices, the
        // settle itself tries again
        before: (operation) =>
          operation !== "takeOverSocket"
            ? Effect.void
            : Effect.suspend(() =>
                ++attempts === 1
                  ? Effect.fail(new StoreUnavailable({ operation, reason: "connection reset (test)" }))
                  : Effect.void
              )
      })
      const b = yield* cluster.worker()
      yield* linkDuringOutage(cluster, b)
      yield* untilOnTestClock(
        "the take-over tried",
        Effect.sync(() => attempts > 0),
        advanceOptions(presenceMs * 8)
      )
      assert.strictEqual(attempts, 1, "the take-over was tried")
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some(dead))
      yield* untilOnTestClock("the record is ours", recordIs(cluster, "tab-1", mine(b, "cb")), advanceOptions(60_000))
      deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
      assert.isTrue(attempts >= 2)
      deepStrictEqual(yield* b.tokens.local("tab-1"), Option.some("cb"))
      assert.isFalse(yield* b.tokens.isLost("tab-1"))
    })
  )

  it.effect(
    "a never-stored record settled while the loops resubscribe and restore again: one take-over, logged and counted once",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        const b = yield* cluster.worker()
        const before = (yield* Metric.value(TokenManager.takeovers)).count
        yield* linkDuringOutage(cluster, b)
        // while the owner is judged (b is not steady yet), the loops resubscribe and restore again
        yield* cluster.dropSubscriptions
        yield* settle
        yield* cluster.dropSubscriptions
        yield* untilOnTestClock(
          "the record is ours",
          recordIs(cluster, "tab-1", mine(b, "cb")),
          advanceOptions(presenceMs * 10)
        )
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(mine(b, "cb")))
        assert.strictEqual((yield* Metric.value(TokenManager.takeovers)).count - before, 1)
        const taking = cluster.logs.filter((line) => line.message.includes(takingOver))
        assert.strictEqual(taking.length, 1, JSON.stringify(taking))
      })
  )

  it.effect(
    "a socket linked while the store failed that disconnects while its record is settled: nothing written",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        const b = yield* cluster.worker()
        yield* linkDuringOutage(cluster, b)
        yield* b.tokens.disconnect("tab-1", "cb")
        yield* TestClock.adjust(presenceMs * 6)
        yield* settle
        deepStrictEqual(yield* cluster.record("tab-1"), Option.some(dead))
        deepStrictEqual(yield* b.tokens.local("tab-1"), Option.none())
        assert.isFalse(cluster.logs.some((line) => line.message.includes(takingOver)))
      })
  )
})
