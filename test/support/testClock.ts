/**
 * What a test that runs on the TestClock needs beside waiting (see `poll.ts` for that): letting
 * the fibers run, and the sleeps the clock holds.
 */
import * as Effect from "effect/Effect"
import * as TestClock from "effect/testing/TestClock"

/** Let every fiber that can run, run. */
export const settle = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow, { discard: true })

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
