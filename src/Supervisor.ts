/**
 * Keep a worker's background loops running: through errors, through Redis outages, and
 * until the layer that owns them closes.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Random from "effect/Random"
import * as Stream from "effect/Stream"
import { Health } from "./Health.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import { Store } from "./Store.js"

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
}

/**
 * Never give up: back off exponentially, cut short when the store's connection returns.
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
 * @since 0.1.0
 * @category models
 */
export type Policy<E = unknown> = Limited<E> | UntilRecovered

/**
 * Delay 1 s between errors; the `limit`-th error (5) within `window` (60 s) ends the loop.
 *
 * @since 0.1.0
 * @category policies
 */
export const limited = <E = unknown>(
  options: {
    readonly delay?: Duration.DurationInput
    readonly limit?: number
    readonly window?: Duration.DurationInput
    readonly retryOn?: (error: E) => boolean
  } = {}
): Limited<E> => ({
  _tag: "Limited",
  delay: Duration.decode(options.delay ?? "1 second"),
  limit: options.limit ?? 5,
  window: Duration.decode(options.window ?? "60 seconds"),
  retryOn: options.retryOn ?? (() => true)
})

/**
 * The k-th error in a row waits min(initial × 2^(k-1), max); calling `recovered` resets it.
 *
 * @since 0.1.0
 * @category policies
 */
export const untilRecovered = (
  options: {
    readonly initial?: Duration.DurationInput
    readonly max?: Duration.DurationInput
    readonly jitter?: boolean
  } = {}
): UntilRecovered => ({
  _tag: "UntilRecovered",
  initial: Option.map(Option.fromNullable(options.initial), Duration.decode),
  max: Option.map(Option.fromNullable(options.max), Duration.decode),
  jitter: Option.fromNullable(options.jitter)
})

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
     * `limited()`). A loop that returns is run again at once; interruption propagates;
     * defects end the loop. The fiber ends only by interruption, by a defect, or when a
     * `Limited` policy gives up.
     */
    readonly run: <E, R>(
      name: string,
      loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
      policy?: Policy<E>
    ) => Effect.Effect<Fiber.RuntimeFiber<never, E>, never, R>
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
export class Supervisor extends Context.Tag("leasehold/Supervisor")<Supervisor, Supervisor.Service>() {}

/**
 * Errors of supervised loops.
 *
 * @since 0.1.0
 * @category metrics
 */
export const loopErrors = Metric.counter("leasehold_loop_errors_total", {
  description: "errors of supervised loops",
  incremental: true
})

/**
 * Recoveries of supervised loops after a run of errors.
 *
 * @since 0.1.0
 * @category metrics
 */
export const loopRecoveries = Metric.counter("leasehold_loop_recoveries_total", {
  description: "recoveries of supervised loops",
  incremental: true
})

/**
 * The state of each supervised loop: 0 running, 1 retrying, 2 failed.
 *
 * @since 0.1.0
 * @category metrics
 */
export const loopState = Metric.gauge("leasehold_loop_state", {
  description: "state of each supervised loop: 0 running, 1 retrying, 2 failed"
})

/** How an error reads in a log line: its message, as Reflex prints `str(err)`. */
const describe = (error: unknown): string => {
  if (Predicate.hasProperty(error, "message") && typeof error.message === "string" && error.message.length > 0) {
    return error.message
  }
  if (Predicate.hasProperty(error, "_tag") && typeof error._tag === "string") return error._tag
  return String(error)
}

const seconds = (d: Duration.Duration) => `${Duration.toMillis(d) / 1000}s`

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const health = yield* Health
  const config = yield* LeaseholdConfig
  const store = yield* Store
  const scope = yield* Effect.scope
  const fibers = new Set<Fiber.RuntimeFiber<never, unknown>>()
  let closed = false

  const run = <E, R>(
    name: string,
    loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
    policy: Policy<E> = limited<E>()
  ): Effect.Effect<Fiber.RuntimeFiber<never, E>, never, R> => {
    const tags = { loop: name }
    const errors = Metric.tagged(loopErrors, "loop", name)
    const recoveries = Metric.tagged(loopRecoveries, "loop", name)
    const stateGauge = Metric.tagged(loopState, "loop", name)
    const setState = (state: "Running" | "Retrying" | "Failed", detail: string, errorCount: number) =>
      Effect.flatMap(Clock.currentTimeMillis, (since) =>
        Effect.zipRight(
          health.set(
            name,
            state === "Running"
              ? { _tag: "Running", since }
              : state === "Retrying"
                ? { _tag: "Retrying", since, errors: errorCount, lastError: detail }
                : { _tag: "Failed", since, error: detail }
          ),
          Metric.set(stateGauge, state === "Running" ? 0 : state === "Retrying" ? 1 : 2)
        )
      )

    // An error is retried; interruption and defects end the loop with their cause.
    // A failure is retried even when the cause also holds interruptions: those of the
    // fibers the attempt ran beside it (a failed `forEach` with concurrency interrupts the
    // others). Only a cause of interruptions alone ends the loop as an interruption.
    const failureOf = (cause: Cause.Cause<E>): Option.Option<E> =>
      Cause.isDie(cause) ? Option.none() : Cause.failureOption(cause)

    const runLimited = (p: Limited<E>) =>
      Effect.gen(function* () {
        let count = 0
        let windowStart = 0
        while (true) {
          const now = yield* Clock.currentTimeMillis
          if (windowStart + Duration.toMillis(p.window) < now) count = 0
          if (count === 0) windowStart = now
          const exit = yield* Effect.exit(loop(Effect.void))
          if (Exit.isSuccess(exit)) continue
          const error = failureOf(exit.cause)
          if (Option.isNone(error) || !p.retryOn(error.value)) return yield* Effect.failCause(exit.cause)
          count++
          yield* Metric.increment(errors)
          const text = describe(error.value)
          if (count >= p.limit) {
            yield* Effect.logError(
              `${name}: task exceeded exception limit ${p.limit} within ${seconds(p.window)}: ${text}`
            )
            return yield* Effect.failCause(exit.cause)
          }
          yield* Effect.logError(`${name}: task error suppressed: ${text}`)
          yield* setState("Retrying", text, count)
          yield* Effect.sleep(p.delay)
          yield* setState("Running", "", 0)
        }
      })

    const runUntilRecovered = (p: UntilRecovered) =>
      Effect.gen(function* () {
        const initial = Duration.toMillis(Option.getOrElse(p.initial, () => config.retryDelayInitial))
        const max = Duration.toMillis(Option.getOrElse(p.max, () => config.retryDelayMax))
        const jitter = Option.getOrElse(p.jitter, () => config.retryJitter)
        let consecutive = 0
        const recovered = Effect.suspend(() => {
          if (consecutive === 0) return Effect.void
          consecutive = 0
          return Effect.logInfo(`${name}: task recovered`).pipe(
            Effect.zipRight(Metric.increment(recoveries)),
            Effect.zipRight(setState("Running", "", 0))
          )
        })
        while (true) {
          const { epoch } = yield* store.status
          const exit = yield* Effect.exit(loop(recovered))
          if (Exit.isSuccess(exit)) continue
          const error = failureOf(exit.cause)
          if (Option.isNone(error)) return yield* Effect.failCause(exit.cause)
          consecutive++
          yield* Metric.increment(errors)
          const text = describe(error.value)
          if (consecutive === 1) {
            yield* Effect.logError(`${name}: task error, retrying until it recovers: ${text}`)
          }
          yield* setState("Retrying", text, consecutive)
          const base = Math.min(initial * 2 ** Math.min(consecutive - 1, 52), max)
          const delay = jitter ? Math.min(base * (1 + 0.1 * (yield* Random.next)), max) : base
          // A connection that is ready again (after the attempt began) ends the wait at once.
          const readyAgain = store.statusChanges.pipe(
            Stream.filter((status) => status.ready && status.epoch > epoch),
            Stream.runHead
          )
          yield* Effect.raceFirst(Effect.sleep(Duration.millis(delay)), readyAgain)
        }
      })

    const supervised: Effect.Effect<never, E, R> = Effect.gen(function* () {
      yield* setState("Running", "", 0)
      return yield* policy._tag === "Limited" ? runLimited(policy) : runUntilRecovered(policy)
    }).pipe(
      Effect.onExit((exit) =>
        Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)
          ? health.remove(name)
          : Exit.isFailure(exit)
            ? Effect.zipRight(
                Cause.isDie(exit.cause) ? Effect.logError(`${name}: task died`, Cause.pretty(exit.cause)) : Effect.void,
                setState("Failed", Cause.isDie(exit.cause) ? "defect" : describe(Cause.squash(exit.cause)), 0)
              )
            : Effect.void
      ),
      Effect.annotateLogs(tags),
      Effect.interruptible
    ) as Effect.Effect<never, E, R>

    // After shutdown a loop starts interrupted, so nothing runs past the worker's close.
    return Effect.suspend(() => (closed ? Effect.interrupt : supervised)).pipe(
      Effect.forkIn(scope),
      Effect.tap((fiber) =>
        Effect.sync(() => {
          fibers.add(fiber)
          fiber.addObserver(() => fibers.delete(fiber))
        })
      )
    )
  }

  const shutdown = Effect.suspend(() => {
    closed = true
    return Fiber.interruptAll([...fibers])
  })

  return Supervisor.of({ run, shutdown })
})

/**
 * The supervisor of one worker: its loops end when this layer's scope closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Supervisor, never, Health | LeaseholdConfig | Store> = Layer.scoped(Supervisor, make)
