/**
 * `Lock.withLock`, the public lock: one holder at a time across workers, in the order they
 * asked, with fences that grow; on one worker a turn queues with the token's modifications;
 * an invalid token is refused before any store call.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/testing/TestClock"
import { Counter, memoryCluster } from "./state/workers.js"
import { withoutClockTime } from "./support/poll.js"
import { settle } from "./support/testClock.js"

describe("Lock.withLock", () => {
  it.effect("two workers: the second runs once the first has released, under a greater fence", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: false })
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      const entered = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const log: Array<string> = []
      const first = yield* Effect.forkChild(
        a.lock.withLock("t", (grant) =>
          Effect.gen(function* () {
            log.push("a in")
            yield* Deferred.succeed(entered, undefined)
            yield* Deferred.await(gate)
            log.push("a out")
            return grant.fence
          })
        )
      )
      yield* Deferred.await(entered)
      const second = yield* Effect.forkChild(
        b.lock.withLock("t", (grant) => Effect.sync(() => log.push("b in")).pipe(Effect.as(grant.fence)))
      )
      yield* settle
      yield* TestClock.adjust(50)
      yield* settle
      assert.deepStrictEqual(log, ["a in"], "b entered while a held the lock")
      yield* Deferred.succeed(gate, undefined)
      const fenceA = yield* Fiber.join(first)
      const fenceB = yield* Fiber.join(second)
      assert.deepStrictEqual(log, ["a in", "a out", "b in"])
      assert.isAbove(fenceB, fenceA)
      assert.strictEqual(yield* cluster.grants("t"), fenceB)
    })
  )

  it.effect("on one worker, a modification of the token waits for the turn to end", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const a = yield* cluster.worker()
      const entered = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const turn = yield* Effect.forkChild(
        a.lock.withLock("t", () => Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)))
      )
      yield* Deferred.await(entered)
      const bump = yield* Effect.forkChild(a.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }] as const))
      yield* settle
      assert.isUndefined(bump.pollUnsafe(), "the modification ran during the turn")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(turn)
      assert.strictEqual(yield* Fiber.join(bump), 1)
      yield* withoutClockTime(
        "stored",
        Effect.map(a.states.get("t", Counter), (s) => s.n === 1)
      )
    })
  )

  it.effect("an invalid token fails with InvalidToken, and the effect does not run", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const a = yield* cluster.worker()
      let ran = false
      const error = yield* Effect.flip(a.lock.withLock("bad token*", () => Effect.sync(() => (ran = true))))
      assert.strictEqual(error._tag, "InvalidToken")
      assert.isFalse(ran)
    })
  )
})
