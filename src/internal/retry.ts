/**
 * Driving a retry `Schedule` whose wait the caller serves itself: the supervisor races it
 * with the store's connection coming back, a lease's keep-alive hands it to the worker's
 * timers. The schedule decides every delay and when to give up; its step function
 * (`Schedule.toStep`) keeps its state, and `reset` takes a fresh one.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Pull from "effect/Pull"
import * as Schedule from "effect/Schedule"

/**
 * The state of one run of a retry schedule.
 *
 * @internal
 */
export interface Retry<In, R> {
  /** The delay before the next try after `input` (an error), or none: the schedule gave up. */
  readonly next: (input: In) => Effect.Effect<Option.Option<Duration.Duration>, never, R>
  /** Start the schedule over: the next delay is its first one again. */
  readonly reset: Effect.Effect<void>
}

/**
 * A schedule that fails gives up as one that is done: a retry policy decides delays, and
 * an error of its own is no reason to retry sooner.
 *
 * @internal
 */
export const driver = <Out, In, E, R>(
  schedule: Schedule.Schedule<Out, In, E, R>
): Effect.Effect<Retry<In, R>, never, R> =>
  Effect.gen(function* () {
    const context = yield* Effect.context<R>()
    const fresh = Effect.provideContext(Schedule.toStep(schedule), context)
    let step = yield* fresh
    return {
      next: (input: In) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          step(now, input).pipe(
            Effect.map(([, delay]): Option.Option<Duration.Duration> => Option.some(delay)),
            Pull.catchDone(() => Effect.succeed(Option.none<Duration.Duration>())),
            Effect.orElseSucceed(() => Option.none<Duration.Duration>())
          )
        ),
      reset: Effect.map(fresh, (fresh) => {
        step = fresh
      })
    }
  })
