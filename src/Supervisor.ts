/**
 * A worker's background loops, kept running through errors and Redis outages until the
 * layer that owns them closes: the `Supervisor` service of every worker (its loops, and
 * an app's own, under `run`), and the policies a loop is retried under: `limited()`,
 * `untilRecovered()` (on `backoff`), or any `Schedule` of one's own.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"

/**
 * Retry a fixed number of times within a window, then give up (Reflex's `ensure_task`).
 *
 * @since 0.1.0
 * @category models
 */
export interface Limited<E> {
  readonly _tag: "Limited"
  readonly delay: Duration.Duration
  readonly limit: number
  readonly window: Duration.Duration
  /** Errors that are retried; any other error ends the loop at once. Default: every error. */
  readonly retryOn: (error: E) => boolean
  /** The schedule behind it: `delay` after each error, done at the `limit`-th error within `window`. */
  readonly schedule: Schedule.Schedule<unknown, unknown>
}

/**
 * Never give up: back off exponentially (`backoff`), cut short when the store's connection
 * returns.
 *
 * @since 0.1.0
 * @category models
 */
export interface UntilRecovered {
  readonly _tag: "UntilRecovered"
  /** Default: the configured `retryDelayInitial`. */
  readonly initial: Option.Option<Duration.Duration>
  /** Default: the configured `retryDelayMax`. */
  readonly max: Option.Option<Duration.Duration>
  /** Default: the configured `retryJitter`. */
  readonly jitter: Option.Option<boolean>
}

/**
 * How a supervised loop is retried: `limited()`, `untilRecovered()`, or any `Schedule`
 * fed with the loop's errors (run as `untilRecovered` is, until the schedule is done).
 *
 * @since 0.1.0
 * @category models
 */
export type Policy<E = unknown, R = never> = Limited<E> | UntilRecovered | Schedule.Schedule<unknown, E, unknown, R>

/**
 * `delay` after each error, counting the errors of a window that opens at an error and lasts
 * `window`: done at the `limit`-th one. Outputs the count.
 */
const errorsWithin = (
  delay: Duration.Duration,
  limit: number,
  window: Duration.Duration
): Schedule.Schedule<number, unknown> =>
  Schedule.fromStep(
    Effect.sync(() => {
      let count = 0
      let since = 0
      return (now: number) => {
        count = count > 0 && now - since <= Duration.toMillis(window) ? count + 1 : 1
        if (count === 1) since = now
        return count >= limit ? Cause.done(count) : Effect.succeed([count, delay] as [number, Duration.Duration])
      }
    })
  )

/**
 * Delay 1 s between errors; the `limit`-th error (5) within `window` (60 s) ends the loop.
 *
 * @since 0.1.0
 * @category policies
 */
export const limited = <E = unknown>(
  options: {
    readonly delay?: Duration.Input
    readonly limit?: number
    readonly window?: Duration.Input
    readonly retryOn?: (error: E) => boolean
  } = {}
): Limited<E> => {
  const delay = Duration.fromInputUnsafe(options.delay ?? "1 second")
  const limit = options.limit ?? 5
  const window = Duration.fromInputUnsafe(options.window ?? "60 seconds")
  return {
    _tag: "Limited",
    delay,
    limit,
    window,
    retryOn: options.retryOn ?? (() => true),
    schedule: errorsWithin(delay, limit, window)
  }
}

/**
 * The k-th error in a row waits min(initial × 2^(k-1), max); calling `recovered` resets it.
 * Its schedule is `backoff`, with the configured values for what is not given here.
 *
 * @since 0.1.0
 * @category policies
 */
export const untilRecovered = (
  options: { readonly initial?: Duration.Input; readonly max?: Duration.Input; readonly jitter?: boolean } = {}
): UntilRecovered => ({
  _tag: "UntilRecovered",
  initial: Option.map(Option.fromNullishOr(options.initial), Duration.fromInputUnsafe),
  max: Option.map(Option.fromNullishOr(options.max), Duration.fromInputUnsafe),
  jitter: Option.fromNullishOr(options.jitter)
})

/**
 * The schedule of `untilRecovered`: delays `initial`, doubling, capped at `max` (the cap
 * bounds the first delay too), forever. With `jitter`, each delay is lengthened by up to
 * 10 % before the cap, so that it is never shortened nor above `max`: workers that lost
 * the store together do not retry in step. A base to build a policy of one's own on
 * (`Schedule.upTo`, `Schedule.recurs`, ...).
 *
 * @since 0.1.0
 * @category policies
 */
export const backoff = (options: {
  readonly initial: Duration.Input
  readonly max: Duration.Input
  readonly jitter?: boolean | undefined
}): Schedule.Schedule<Duration.Duration> => {
  const max = Duration.fromInputUnsafe(options.max)
  const exponential = Schedule.exponential(options.initial)
  const jittered =
    options.jitter === true
      ? Schedule.modifyDelay(exponential, ({ duration }) =>
          Effect.map(Random.next, (random) => Duration.times(duration, 1 + random / 10))
        )
      : exponential
  return Schedule.modifyDelay(jittered, ({ duration }) => Effect.succeed(Duration.min(duration, max)))
}

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Supervisor {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * Fork `loop` into the supervisor's scope and keep it running under `policy` (default
     * `limited()`; any `Schedule` fed with the loop's errors is one too). A loop that
     * returns is run again at once; interruption propagates; defects end the loop. The
     * fiber ends only by interruption, by a defect, or when the policy's schedule is done
     * (`limited` at its limit, a schedule of one's own at its end).
     */
    readonly run: <E, R>(
      name: string,
      loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
      policy?: Policy<E, R>
    ) => Effect.Effect<Fiber.Fiber<never, E>, never, R>
    /**
     * Interrupt every loop now and run no new one: the first step of a worker's shutdown,
     * before its leases are flushed and its records removed. Closing the layer does the
     * same.
     */
    readonly shutdown: Effect.Effect<void>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Supervisor extends Context.Service<Supervisor, Supervisor.Service>()("leasehold/Supervisor") {}
