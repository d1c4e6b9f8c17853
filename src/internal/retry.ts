/**
 * Driving a retry `Schedule` whose wait the caller serves itself: the supervisor races it
 * with the store's connection coming back, a lease's keep-alive hands it to the worker's
 * timers. The schedule decides every delay and when to give up; `Schedule.driver` keeps
 * its state, and `reset` starts it over.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as ScheduleDecision from "effect/ScheduleDecision"
import * as ScheduleInterval from "effect/ScheduleInterval"
import * as ScheduleIntervals from "effect/ScheduleIntervals"

/**
 * `self`, answering each step with the delay it decided and recurring at once: the wait is
 * left to whoever drives it. Done when `self` is.
 *
 * @internal
 */
export const decided = <Out, In, R>(self: Schedule.Schedule<Out, In, R>): Schedule.Schedule<Duration.Duration, In, R> =>
  Schedule.makeWithState(self.initial, (now, input, state) =>
    Effect.map(self.step(now, input, state), ([next, _, decision]) =>
      ScheduleDecision.isDone(decision)
        ? ([next, Duration.zero, decision] as const)
        : ([
            next,
            Duration.millis(Math.max(0, ScheduleIntervals.start(decision.intervals) - now)),
            ScheduleDecision.continueWith(ScheduleInterval.after(now))
          ] as const)
    )
  )

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

/** @internal */
export const driver = <Out, In, R>(schedule: Schedule.Schedule<Out, In, R>): Effect.Effect<Retry<In, R>> =>
  Effect.map(Schedule.driver(decided(schedule)), (driven) => ({
    next: (input: In) => Effect.option(driven.next(input)),
    reset: driven.reset
  }))
