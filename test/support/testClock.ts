/**
 * Waiting for a condition in a test that runs on the TestClock: let the fibers run, look,
 * and move the clock one millisecond at a time until it holds (or the real-time limit).
 */
import * as Effect from "effect/Effect"
import * as TestClock from "effect/testing/TestClock"
import { eventuallyTrue } from "../conformance/helpers.js"

/** Let every fiber that can run, run. */
export const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow, { discard: true })

/** Until `check` holds, within `ms` of real time. */
export const untilOnTestClock = <E>(label: string, check: Effect.Effect<boolean, E>, ms = 5_000) =>
  eventuallyTrue(
    label,
    ms,
    Effect.gen(function* () {
      yield* settle
      if (yield* check) return true
      yield* TestClock.adjust(1)
      return false
    })
  )

/** One turn of the real event loop (what a hold gives its callers before it releases). */
const macrotask = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/**
 * Until `check` holds, letting the fibers run and the event loop turn, without moving the
 * clock: for what must happen in no clock time. Fails after `turns` turns.
 */
export const untilWithoutTime = <E>(label: string, check: Effect.Effect<boolean, E>, turns = 200) =>
  Effect.gen(function* () {
    for (let i = 0; i < turns; i++) {
      yield* settle
      if (yield* check) return
      yield* macrotask
    }
    return yield* Effect.die(`${label}: not within ${turns} turns of the event loop, the clock standing`)
  })

/**
 * The deadlines (in the clock's milliseconds) of the sleeps registered with the fiber's
 * `TestClock`, which Effect's `TestClock` keeps without a public accessor.
 */
export const pendingSleeps: Effect.Effect<ReadonlyArray<number>> = TestClock.testClockWith((clock) =>
  Effect.sync(() =>
    (clock as unknown as { readonly sleeps: ReadonlyArray<{ readonly timestamp: number }> }).sleeps.map(
      (entry) => entry.timestamp
    )
  )
)
