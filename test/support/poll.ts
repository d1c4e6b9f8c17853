/**
 * The polling helpers of the tests: wait until a check holds, looking again and again.
 *
 * - `untilReal`: on real time, a look every `every` ms (50 by default), for at most `within` ms.
 * - `untilOnTestClock`: on the `TestClock`, each look letting the fibers run first, the clock
 *   moving `step` ms between looks, for at most `within` ms of real time.
 *
 * Both die after the limit with the label and the last failure of the check (a check that
 * fails is looked at again, like one that answers `false`). `succeedsReal` is `untilReal` for
 * an effect retried until it succeeds, answering its first success.
 *
 * `withoutClockTime` is not a polling helper: it asserts that something happens in no clock
 * time at all, the clock standing while the event loop turns.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as TestClock from "effect/testing/TestClock"
import { liveNow, liveSleep } from "../conformance/helpers.js"
import { settle } from "./testClock.js"

/** Options of the polling helpers. */
export interface UntilOptions {
  /** The limit, in milliseconds of real time (5 s by default). */
  readonly within?: number | undefined
  /** The pause between two looks, in milliseconds of real time. */
  readonly every?: number | undefined
}

/** Options of `untilOnTestClock`. */
export interface UntilOnTestClockOptions extends UntilOptions {
  /** How far the clock moves between two looks, in its milliseconds (1 by default). */
  readonly step?: number | undefined
  /** A limit on the clock as well: dies once it has moved this many milliseconds. */
  readonly clockLimit?: number | undefined
}

const defaultWithin = 5_000

class NotYet {
  readonly _tag = "NotYet"
}

/** Retry `effect` until it succeeds; `onMiss` runs after each failure and may end the wait. */
const poll = <A, E, R>(
  label: string,
  effect: Effect.Effect<A, E | NotYet, R>,
  within: number,
  every: number,
  onMiss: Effect.Effect<void, never, R> = Effect.void
): Effect.Effect<A, never, R> =>
  Effect.gen(function* () {
    const deadline = (yield* liveNow) + within
    while (true) {
      const exit = yield* Effect.exit(effect)
      if (Exit.isSuccess(exit)) return exit.value
      if ((yield* liveNow) > deadline) {
        const stillFalse = Cause.hasFails(exit.cause) && Cause.squash(exit.cause) instanceof NotYet
        return yield* Effect.die(
          new Error(
            `${label}: not within ${within} ms: ${stillFalse ? "the check still false" : Cause.pretty(exit.cause)}`
          )
        )
      }
      yield* onMiss
      if (every > 0) yield* liveSleep(every)
    }
  })

const holds = <E, R>(check: Effect.Effect<boolean, E, R>): Effect.Effect<void, E | NotYet, R> =>
  Effect.flatMap(check, (ok) => (ok ? Effect.void : Effect.fail(new NotYet())))

/** Until `check` holds, on real time (whatever clock the test runs on; `check` keeps the test's). */
export const untilReal = <E, R>(
  label: string,
  check: Effect.Effect<boolean, E, R>,
  options: UntilOptions = {}
): Effect.Effect<void, never, R> => poll(label, holds(check), options.within ?? defaultWithin, options.every ?? 50)

/** `untilReal` for an effect retried until it succeeds: its first success. */
export const succeedsReal = <A, E, R>(
  label: string,
  effect: Effect.Effect<A, E, R>,
  options: UntilOptions = {}
): Effect.Effect<A, never, R> => poll(label, effect, options.within ?? defaultWithin, options.every ?? 50)

/**
 * Until `check` holds, on the `TestClock`: let the fibers run, look, move the clock `step` ms,
 * pausing `every` ms of real time (50 by default) between looks.
 */
export const untilOnTestClock = <E, R>(
  label: string,
  check: Effect.Effect<boolean, E, R>,
  options: UntilOnTestClockOptions = {}
): Effect.Effect<void, never, R> =>
  Effect.gen(function* () {
    const step = options.step ?? 1
    let moved = 0
    return yield* poll(
      label,
      Effect.andThen(settle, holds(check)),
      options.within ?? defaultWithin,
      options.every ?? 50,
      Effect.gen(function* () {
        if (options.clockLimit !== undefined && moved >= options.clockLimit) {
          return yield* Effect.die(new Error(`${label}: not within ${options.clockLimit} ms of the clock`))
        }
        yield* TestClock.adjust(step)
        moved += step
      })
    )
  })

/** One turn of the real event loop (what a hold gives its callers before it releases). */
const macrotask = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/**
 * Asserts that `check` comes to hold in no clock time: lets the fibers run and the event loop
 * turn, the clock standing, and dies after `turns` turns. Not a polling helper: the clock
 * never moves, and a check that needs it to is a failure.
 */
export const withoutClockTime = <E, R>(label: string, check: Effect.Effect<boolean, E, R>, turns = 200) =>
  Effect.gen(function* () {
    for (let i = 0; i < turns; i++) {
      yield* settle
      if (yield* check) return
      yield* macrotask
    }
    return yield* Effect.die(`${label}: not within ${turns} turns of the event loop, the clock standing`)
  })
