import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import { Counter, memoryCluster, type Worker } from "./state/workers.js"

const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow, { discard: true })
const advance = (ms: number) => Effect.andThen(TestClock.adjust(ms), settle)

// tokenExpiration 2 s, lockExpiration 1.5 s
const input = { tokenExpiration: 2_000, lockExpiration: 1_500, lockWarningThreshold: 1_400 } as const

/**
 * A modification of `t` that increments the counter once `gate` opens, forked: `entered`
 * completes when it holds the lock and runs; `fiber` gives the value it read.
 */
const slowIncrement = (w: Worker) =>
  Effect.gen(function* () {
    const gate = yield* Deferred.make<void>()
    const entered = yield* Deferred.make<void>()
    const fiber = yield* Effect.forkChild(
      w.states.modifyEffect("t", Counter, (s) =>
        Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
          s.n,
          { n: s.n + 1 }
        ] as const)
      )
    )
    return { entered, gate, fiber }
  })

describe("memory store expiry (TestClock)", () => {
  it.effect("an idle token is evicted after tokenExpiration; get then returns the initial value", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const w = yield* cluster.worker()
      yield* w.states.modify("t", Counter, () => [null, { n: 7 }])
      assert.isAbove(yield* cluster.control.keyCount, 0)
      yield* advance(1_999)
      deepStrictEqual(yield* w.states.get("t", Counter), { n: 7 })
      yield* advance(2_001)
      // the sweeper removed every key of the token, not just hid them
      assert.strictEqual(yield* cluster.control.keyCount, 0)
      deepStrictEqual(yield* w.states.get("t", Counter), { n: 0 })
      assert.strictEqual(yield* w.lease.sessions, 0)
    })
  )

  it.effect("reads and writes push the deadline", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const w = yield* cluster.worker()
      yield* w.states.modify("t", Counter, () => [null, { n: 1 }])
      yield* advance(1_500)
      deepStrictEqual(yield* w.states.get("t", Counter), { n: 1 })
      yield* advance(1_500)
      // 3 s after the write, 1.5 s after the read
      assert.strictEqual(yield* cluster.stored("t"), 1)
      yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      yield* advance(1_900)
      assert.strictEqual(yield* cluster.stored("t"), 2)
      yield* advance(200)
      assert.strictEqual(yield* cluster.stored("t"), 0)
    })
  )

  it.effect("a token whose lock is held is not evicted under the modification", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const w = yield* cluster.worker()
      yield* w.states.modify("t", Counter, () => [null, { n: 1 }])
      yield* advance(1_000)
      const { entered, gate, fiber } = yield* slowIncrement(w)
      yield* Deferred.await(entered)
      // past the first write's expiry (2 s), the lock still held
      yield* advance(1_400)
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(fiber), 1)
      assert.strictEqual(yield* cluster.stored("t"), 2)
    })
  )

  it.effect(
    "M7: a lock held past tokenExpiration from its grant keeps the slices it read and the fence (a lease kept alive under a slow modification)",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster({ ...input, oplock: true })
        const w = yield* cluster.worker()
        const reader = yield* cluster.worker()
        yield* w.states.modify("t", Counter, () => [null, { n: 1 }])
        const fenceBefore = yield* cluster.grants("t")
        // the lease of those two has ended and written them (TTL: 2 s from then)
        yield* advance(1_000)
        const { entered, gate, fiber } = yield* slowIncrement(w)
        while (!(yield* Deferred.isDone(entered))) yield* advance(10)
        yield* Effect.gen(function* () {
          // 2.9 s under the lock, kept alive: past tokenExpiration (2 s) from the grant's reads
          for (let i = 0; i < 29; i++) yield* advance(100)
          // the slice it read is still there
          assert.strictEqual(yield* cluster.stored("t"), 1)
        }).pipe(Effect.ensuring(Deferred.succeed(gate, undefined)))
        assert.strictEqual(yield* Fiber.join(fiber), 1)
        assert.strictEqual(yield* cluster.stored("t"), 2)
        // the fence lived on with them: the next grant's number is above every earlier one
        const next = yield* Effect.forkChild(reader.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]))
        // (the worker's lease ends when its hold does: let the TestClock reach it)
        while ((yield* Effect.sync(() => Option.fromNullishOr(next.pollUnsafe())))._tag === "None") yield* advance(50)
        assert.strictEqual(yield* cluster.grants("t"), fenceBefore + 2)
      })
  )
})
