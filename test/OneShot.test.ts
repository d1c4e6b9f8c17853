import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import { OneShot } from "../src/internal/oneShot.js"
import { tokenError, tokenProblem } from "../src/internal/validate.js"

// `OneShot` is on the path of every modification, in place of a `Deferred`: awaited once
// completed it gives the exit at once; awaited before, it waits, and an interrupted waiter
// leaves nothing behind.
describe("OneShot", () => {
  it.effect("awaited once completed: its value, or its failure, at once", () =>
    Effect.gen(function* () {
      const done = new OneShot<number, string>()
      assert.isTrue(done.done(Exit.succeed(1)))
      assert.isFalse(done.done(Exit.succeed(2)))
      assert.strictEqual(yield* done.await, 1)
      const failed = new OneShot<number, string>()
      failed.done(Exit.fail("no"))
      assert.deepStrictEqual(yield* Effect.exit(failed.await), Exit.fail("no"))
    })
  )

  it.effect("awaited before: the waiter gets the exit when it comes; an interrupted waiter is removed", () =>
    Effect.gen(function* () {
      const shot = new OneShot<number>()
      const waiting = () => (shot as unknown as { waiters?: Array<unknown> }).waiters?.length ?? 0
      const first = yield* Effect.forkChild(shot.await)
      const second = yield* Effect.forkChild(shot.await)
      yield* Effect.yieldNow
      assert.isUndefined(first.pollUnsafe(), "it waits: not completed yet")
      assert.strictEqual(waiting(), 2)
      yield* Fiber.interrupt(second)
      assert.strictEqual(waiting(), 1, "the interrupted waiter was removed")
      let heard: Exit.Exit<number> | undefined
      shot.listen((exit) => {
        heard = exit
      })
      shot.done(Exit.succeed(7))
      assert.strictEqual(yield* Fiber.join(first), 7)
      assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(second)))
      assert.deepStrictEqual(heard, Exit.succeed(7))
    })
  )
})

// Strings found valid are remembered, so that the checks of every step skip the pattern:
// what is remembered never lets an invalid string through, however many came before.
describe("validation's memory of valid strings", () => {
  it("refuses an invalid string after more valid ones than it remembers, and accepts a valid one again", () => {
    for (let i = 0; i < 3_000; i++) assert.isUndefined(tokenProblem(`tab-${i}`))
    // each twice: a refused string is not remembered as valid
    for (let twice = 0; twice < 2; twice++) {
      assert.strictEqual(tokenProblem("tab 1"), "characters outside [A-Za-z0-9_.:-]")
      assert.strictEqual(tokenProblem("x".repeat(129)), "longer than 128 characters (129)")
      assert.strictEqual(tokenProblem(""), "empty")
      assert.strictEqual(tokenProblem(42), "not a string")
    }
    assert.isUndefined(tokenProblem("tab-1"))
    assert.isUndefined(tokenProblem("tab-1"))
    assert.strictEqual(tokenError("tab{1}")?._tag, "InvalidToken")
  })
})
