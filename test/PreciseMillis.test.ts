import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/testing/TestClock"
import { currentPreciseMillis, preciseMillis } from "../src/internal/timers.js"

// A hold's quantum (2 ms by default) is timed with this clock: read in whole milliseconds,
// a hold that began late in one lost up to a millisecond of it.
describe("preciseMillis", () => {
  it.effect("under TestClock it reads the test clock's milliseconds, no more", () =>
    Effect.gen(function* () {
      assert.strictEqual(yield* currentPreciseMillis, yield* Clock.currentTimeMillis)
      yield* TestClock.adjust("1234 millis")
      const clock = yield* Clock.Clock
      assert.strictEqual(preciseMillis(clock), clock.currentTimeMillisUnsafe())
      assert.strictEqual(yield* currentPreciseMillis, 1234)
    })
  )

  it.live("on the live clock it reads fractions of a millisecond, close to the wall clock", () =>
    Effect.gen(function* () {
      const clock = yield* Clock.Clock
      const reads: Array<number> = []
      for (let i = 0; i < 1000; i++) reads.push(preciseMillis(clock))
      assert.isTrue(
        reads.some((read) => !Number.isInteger(read)),
        "every read a whole millisecond"
      )
      for (let i = 1; i < reads.length; i++) assert.isAtLeast(reads[i]!, reads[i - 1]!)
      // aligned with the wall clock when it was first read; generous for a clock slewed since
      assert.isBelow(Math.abs(preciseMillis(clock) - Date.now()), 1_000)
    })
  )

  it.live("on the live clock it reads what the clock's own nanoseconds read, without a bigint", () =>
    Effect.gen(function* () {
      const clock = yield* Clock.Clock
      const before = Number(clock.currentTimeNanosUnsafe()) / 1_000_000
      const read = preciseMillis(clock)
      const after = Number(clock.currentTimeNanosUnsafe()) / 1_000_000
      // the two timelines start from wall-clock origins taken at different moments: a few ms apart at most
      assert.isAtLeast(read, before - 5)
      assert.isAtMost(read, after + 5)
    })
  )
})
