/**
 * Keep a worker's background loops running under a retry policy (`Supervisor.ts`): through
 * errors, through Redis outages, and until the layer that owns them closes.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberSet from "effect/FiberSet"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { Health } from "../Health.js"
import { LeaseholdConfig, type Settings } from "../LeaseholdConfig.js"
import { Store } from "../Store.js"
import { backoff, limited, type Policy, Supervisor } from "../Supervisor.js"
import * as Retry from "./retry.js"

/** The policies, for the library's own callers beside the service. */
export { backoff, limited, type Policy, Supervisor, untilRecovered } from "../Supervisor.js"

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

/** What `run` does with a policy: the schedule of its delays and the lines it logs. */
interface Plan<E, R> {
  readonly schedule: Schedule.Schedule<unknown, E, unknown, R>
  readonly retryOn: (error: E) => boolean
  /**
   * `untilRecovered` and a schedule of one's own: `recovered` resets the schedule, only
   * the first error of a run is logged, and the store's connection coming back cuts a
   * delay short. `limited`: none of these.
   */
  readonly recovering: boolean
  /** The line of an error that is retried. */
  readonly retrying: (error: string) => string
  /** The line of the error at which the schedule gave up. */
  readonly gaveUp: (error: string, errors: number) => string
}

const planOf = <E, R>(name: string, policy: Policy<E, R>, config: Settings): Plan<E, R> => {
  if (Schedule.isSchedule(policy)) {
    return {
      schedule: policy as Schedule.Schedule<unknown, E, unknown, R>,
      retryOn: () => true,
      recovering: true,
      retrying: (error) => `${name}: task error, retrying on its schedule: ${error}`,
      gaveUp: (error, errors) => `${name}: task schedule gave up after ${errors} errors in a row: ${error}`
    }
  }
  if (policy._tag === "Limited") {
    return {
      schedule: policy.schedule,
      retryOn: policy.retryOn,
      recovering: false,
      retrying: (error) => `${name}: task error suppressed: ${error}`,
      gaveUp: (error) =>
        `${name}: task exceeded exception limit ${policy.limit} within ${seconds(policy.window)}: ${error}`
    }
  }
  return {
    schedule: backoff({
      initial: Option.getOrElse(policy.initial, () => config.retryDelayInitial),
      max: Option.getOrElse(policy.max, () => config.retryDelayMax),
      jitter: Option.getOrElse(policy.jitter, () => config.retryJitter)
    }),
    retryOn: () => true,
    recovering: true,
    retrying: (error) => `${name}: task error, retrying until it recovers: ${error}`,
    // `backoff` never gives up
    gaveUp: (error) => `${name}: task error: ${error}`
  }
}

/** What every loop of one supervisor shares. */
interface SupervisorContext {
  readonly health: Health.Service
  /** Its `statusChanges` cut a recovering plan's delay short. */
  readonly store: Store.Service
  /** The delays `untilRecovered` takes when it names none. */
  readonly config: Settings
}

type LoopState = "Running" | "Retrying" | "Failed"

/** Where one loop reports: its health entry, its state gauge, its error and recovery counters. */
interface Reports {
  readonly name: string
  readonly setState: (state: LoopState, detail: string, errorCount: number) => Effect.Effect<void>
  readonly errors: Metric.Metric<number, unknown>
  readonly recoveries: Metric.Metric<number, unknown>
}

const reportsOf = (health: Health.Service, name: string): Reports => {
  const stateGauge = Metric.withAttributes(loopState, { loop: name })
  return {
    name,
    errors: Metric.withAttributes(loopErrors, { loop: name }),
    recoveries: Metric.withAttributes(loopRecoveries, { loop: name }),
    setState: (state, detail, errorCount) =>
      Effect.flatMap(Clock.currentTimeMillis, (since) =>
        Effect.andThen(
          health.set(
            name,
            state === "Running"
              ? { _tag: "Running", since }
              : state === "Retrying"
                ? { _tag: "Retrying", since, errors: errorCount, lastError: detail }
                : { _tag: "Failed", since, error: detail }
          ),
          Metric.update(stateGauge, state === "Running" ? 0 : state === "Retrying" ? 1 : 2)
        )
      )
  }
}

// An error is retried; interruption and defects end the loop with their cause.
// A failure is retried even when the cause also holds interruptions: those of the
// fibers the attempt ran beside it (a failed `forEach` with concurrency interrupts the
// others). Only a cause of interruptions alone ends the loop as an interruption.
const failureOf = <E>(cause: Cause.Cause<E>): Option.Option<E> =>
  Cause.hasDies(cause) ? Option.none() : Cause.findErrorOption(cause)

// A delay of a recovering plan ends at once when the store's connection is ready
// again after the attempt began.
const readyAgain = (store: Store.Service, epoch: number) =>
  store.statusChanges.pipe(
    Stream.filter((status) => status.ready && status.epoch > epoch),
    Stream.runHead
  )

/** The loop run again and again under its plan, until it fails in a way the plan does not retry. */
const runPlan = <E, R>(
  store: Store.Service,
  reports: Reports,
  loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
  plan: Plan<E, R>
) =>
  Effect.gen(function* () {
    const { name, setState } = reports
    const retry = yield* Retry.driver(plan.schedule)
    let consecutive = 0
    const recovered = plan.recovering
      ? Effect.suspend(() => {
          if (consecutive === 0) return Effect.void
          consecutive = 0
          return retry.reset.pipe(
            Effect.andThen(Effect.logInfo(`${name}: task recovered`)),
            Effect.andThen(Metric.update(reports.recoveries, 1)),
            Effect.andThen(setState("Running", "", 0))
          )
        })
      : Effect.void
    while (true) {
      const { epoch } = yield* store.status
      const exit = yield* Effect.exit(loop(recovered))
      if (Exit.isSuccess(exit)) {
        if (!plan.recovering) consecutive = 0
        continue
      }
      const error = failureOf(exit.cause)
      if (Option.isNone(error) || !plan.retryOn(error.value)) return yield* Effect.failCause(exit.cause)
      consecutive++
      yield* Metric.update(reports.errors, 1)
      const text = describe(error.value)
      const delay = yield* retry.next(error.value)
      if (Option.isNone(delay)) {
        yield* Effect.logError(plan.gaveUp(text, consecutive))
        return yield* Effect.failCause(exit.cause)
      }
      // A recovering plan logs the first error of a run only, and stays retrying until
      // `recovered`; a limited one logs each error and runs again after its delay.
      if (!plan.recovering || consecutive === 1) yield* Effect.logError(plan.retrying(text))
      yield* setState("Retrying", text, consecutive)
      if (plan.recovering) {
        yield* Effect.raceFirst(Effect.sleep(delay.value), readyAgain(store, epoch))
      } else {
        yield* Effect.sleep(delay.value)
        yield* setState("Running", "", 0)
      }
    }
  })

/** What a loop's end leaves in its health: nothing when interrupted, `Failed` (a defect logged) when it failed. */
const recordEnd =
  (health: Health.Service, reports: Reports) =>
  <A, E>(exit: Exit.Exit<A, E>): Effect.Effect<void> => {
    const { name } = reports
    if (Exit.isSuccess(exit)) return Effect.void
    if (Cause.hasInterruptsOnly(exit.cause)) return health.remove(name)
    return Effect.andThen(
      Cause.hasDies(exit.cause) ? Effect.logError(`${name}: task died`, Cause.pretty(exit.cause)) : Effect.void,
      reports.setState("Failed", Cause.hasDies(exit.cause) ? "defect" : describe(Cause.squash(exit.cause)), 0)
    )
  }

/** One loop under its policy, from its first `Running` to the health its end leaves. */
const supervise = <E, R>(
  env: SupervisorContext,
  name: string,
  loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
  policy: Policy<E, R>
): Effect.Effect<never, E, R> => {
  const reports = reportsOf(env.health, name)
  return Effect.gen(function* () {
    yield* reports.setState("Running", "", 0)
    return yield* runPlan(env.store, reports, loop, planOf(name, policy, env.config))
  }).pipe(
    Effect.onExit(recordEnd(env.health, reports)),
    Effect.annotateLogs({ loop: name }),
    Effect.interruptible
  ) as Effect.Effect<never, E, R>
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const env: SupervisorContext = { health: yield* Health, config: yield* LeaseholdConfig, store: yield* Store }
  // The loops' fibers, in a scope of their own: `shutdown` closes it before the layer's.
  // A loop run after it starts interrupted, so nothing runs past the worker's close.
  const fibersScope = yield* Scope.fork(yield* Effect.scope)
  const fibers = yield* Scope.provide(FiberSet.make<never, unknown>(), fibersScope)

  const run = <E, R>(
    name: string,
    loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
    policy: Policy<E, R> = limited<E>()
  ): Effect.Effect<Fiber.Fiber<never, E>, never, R> =>
    FiberSet.run(fibers, supervise(env, name, loop, policy), { startImmediately: false })

  const shutdown = Scope.close(fibersScope, Exit.void)

  return Supervisor.of({ run, shutdown })
})

/**
 * The supervisor of one worker: its loops end when this layer's scope closes.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Supervisor, never, Health | LeaseholdConfig | Store> = Layer.effect(Supervisor, make)
