/**
 * Helpers of the conformance suite that work under both `TestClock` (memory) and the live
 * clock (Redis): every wait with a deadline is measured on the live clock, while the
 * awaited effect keeps the clock of the test.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import type * as TestClock from "effect/testing/TestClock"
import type { AcquireResult } from "../../src/Store.js"

/** `effect` on the live clock, whatever clock the test runs on (`TestClock` or the live one). */
export const live = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) => {
    const clock = fiber.getRef(Clock.Clock) as Clock.Clock & Partial<Pick<TestClock.TestClock, "withLive">>
    return clock.withLive === undefined ? effect : clock.withLive(effect)
  })

/** Milliseconds on the live clock, whatever clock the test runs on. */
export const liveNow: Effect.Effect<number> = live(Clock.currentTimeMillis)

/** Sleep in real time, whatever clock the test runs on. */
export const liveSleep = (ms: number): Effect.Effect<void> => live(Effect.sleep(ms))

/** Fail the test (as a defect) when `effect` does not complete within `ms` of real time; `effect` keeps the test's clock. */
export const within = <A, E, R>(label: string, ms: number, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.raceFirst(effect, Effect.andThen(liveSleep(ms), Effect.die(new Error(`${label}: not done within ${ms} ms`))))

/** Fork a fiber that collects the first `n` elements of a stream. */
export const collectFirst = <A, E, R>(stream: Stream.Stream<A, E, R>, n: number) =>
  Effect.forkChild(Stream.runCollect(Stream.take(stream, n)))

/** Join a fiber within `ms` of real time. */
export const joinWithin = <A, E>(label: string, ms: number, fiber: Fiber.Fiber<A, E>) =>
  within(label, ms, Fiber.join(fiber))

/** The `Acquired` case, or a defect naming what came instead. */
export const expectAcquired = <E, R>(effect: Effect.Effect<AcquireResult, E, R>) =>
  Effect.flatMap(effect, (result) =>
    result._tag === "Acquired"
      ? Effect.succeed(result)
      : Effect.die(new Error(`expected Acquired, got Held (remainingMs ${result.remainingMs})`))
  )

/** The `Held` case, or a defect naming what came instead. */
export const expectHeld = <E, R>(effect: Effect.Effect<AcquireResult, E, R>) =>
  Effect.flatMap(effect, (result) =>
    result._tag === "Held"
      ? Effect.succeed(result)
      : Effect.die(new Error(`expected Held, got Acquired (fence ${result.fence})`))
  )

/** Compare two mailbox ids `<ms>-<seq>`. */
export const compareStreamIds = (a: string, b: string): number => {
  const [aMs = 0, aSeq = 0] = a.split("-").map(Number)
  const [bMs = 0, bSeq = 0] = b.split("-").map(Number)
  return aMs !== bMs ? aMs - bMs : aSeq - bSeq
}

/** The failure of `effect`, which must be the error tagged `tag`; anything else is a defect. */
export const failsWith = <A, E extends { readonly _tag: string }, R, T extends E["_tag"]>(
  effect: Effect.Effect<A, E, R>,
  tag: T
): Effect.Effect<Extract<E, { readonly _tag: T }>, never, R> =>
  Effect.matchCauseEffect(effect, {
    onSuccess: (value) => Effect.die(new Error(`expected ${tag}, succeeded with ${safeJson(value)}`)),
    onFailure: (cause) => {
      const failure = Cause.findErrorOption(cause)
      if (failure._tag === "Some" && failure.value._tag === tag) {
        return Effect.succeed(failure.value as Extract<E, { readonly _tag: T }>)
      }
      return Effect.die(new Error(`expected ${tag}, got ${Cause.pretty(cause)}`))
    }
  })

const safeJson = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}
