/**
 * Running a leasehold app as a Node process: `runMain`, to call instead of
 * `NodeRuntime.runMain`.
 *
 * A leasehold app shuts down gracefully: its sockets close, its leases write what they
 * hold, its socket records are removed. `NodeRuntime.runMain` starts that on the first
 * SIGINT or SIGTERM and then removes its listeners, so a second signal meets Node's
 * default handler and ends the process in the middle of its shutdown. Second signals are
 * the rule, not the exception: Ctrl-C in a terminal signals npm and node together, and npm
 * forwards the same signal to its child; systemd signals every process of the service's
 * group, and a cluster primary forwards the signal its workers already had. `runMain` keeps listening until the program has ended:
 * the first signal interrupts the program, every later one is ignored, and a deadline
 * (`shutdownTimeout`, 10 s unless set) ends a shutdown that hangs, well before a process
 * manager's SIGKILL would.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import * as Result from "effect/Result"
import { InterruptExitCode, makeRunMain, type Teardown } from "effect/Runtime"
import { InvalidConfig } from "./LeaseholdConfig.js"

/**
 * The deadline when neither the option nor `LEASEHOLD_SHUTDOWN_TIMEOUT_MS` sets one: below
 * what systemd (90 s) and Kubernetes (30 s) wait before SIGKILL, with room for a lease's
 * last write. Docker's default stop timeout is the same 10 s: raise it (`--stop-timeout`)
 * or lower this.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultShutdownTimeout: Duration.Duration = Duration.seconds(10)

/**
 * The environment variable that sets the deadline, in milliseconds (`shutdownTimeout`, when
 * given, wins).
 *
 * @since 0.1.0
 * @category constants
 */
export const shutdownTimeoutVariable = "LEASEHOLD_SHUTDOWN_TIMEOUT_MS"

/**
 * The exit code of a process whose shutdown did not finish within the deadline.
 *
 * @since 0.1.0
 * @category constants
 */
export const timedOutExitCode = 124

/** The longest delay a Node timer keeps (a longer one fires at once). */
const maxTimerMs = 2 ** 31 - 1

/**
 * @since 0.1.0
 * @category models
 */
export interface RunMainOptions {
  /** As `NodeRuntime.runMain`: do not log the program's failure. */
  readonly disableErrorReporting?: boolean | undefined
  /** As `NodeRuntime.runMain`: how the exit code follows from the program's exit. */
  readonly teardown?: Teardown | undefined
  /**
   * How long the shutdown may take from the first signal before the process exits anyway
   * (code 124, with one line on stderr). Default: `LEASEHOLD_SHUTDOWN_TIMEOUT_MS`, else
   * 10 seconds. `Duration.infinity`: no deadline. Above 0 and at most 2^31-1 ms (what a
   * Node timer can wait).
   */
  readonly shutdownTimeout?: Duration.Input | undefined
}

/**
 * The deadline `runMain` applies: the option, else `LEASEHOLD_SHUTDOWN_TIMEOUT_MS`, else
 * 10 s. A variable that is not a positive whole number of milliseconds is an
 * `InvalidConfig`: `runMain` then starts nothing, prints the error on stderr and exits 1.
 *
 * @since 0.1.0
 * @category accessors
 */
export const shutdownTimeout = (
  options?: Pick<RunMainOptions, "shutdownTimeout">
): Effect.Effect<Duration.Duration, InvalidConfig> =>
  Effect.suspend(() => {
    const given = options?.shutdownTimeout === undefined ? undefined : Duration.fromInputUnsafe(options.shutdownTimeout)
    const raw = process.env[shutdownTimeoutVariable]
    if (given === undefined && (raw === undefined || raw.trim() === "")) return Effect.succeed(defaultShutdownTimeout)
    const [knob, value, timeout] =
      given !== undefined
        ? ["shutdownTimeout", Duration.format(given), given]
        : [shutdownTimeoutVariable, raw!, Number.isInteger(Number(raw)) ? Duration.millis(Number(raw)) : undefined]
    const ms = timeout === undefined ? Number.NaN : Duration.toMillis(timeout)
    // infinite: no deadline (only the option can say so: the variable is a whole number)
    return timeout !== undefined && ms > 0 && (ms <= maxTimerMs || !Duration.isFinite(timeout))
      ? Effect.succeed(timeout)
      : Effect.fail(
          new InvalidConfig({
            knob,
            value,
            reason: `must be a whole number of ms above 0 and at most ${maxTimerMs}, or (the option) infinite`
          })
        )
  })

const signals: ReadonlyArray<NodeJS.Signals> = ["SIGINT", "SIGTERM"]

const runWithDeadline = (timeout: Duration.Duration) =>
  makeRunMain(({ fiber, teardown }) => {
    let signalled: NodeJS.Signals | undefined
    let deadline: ReturnType<typeof setTimeout> | undefined
    const onSignal = (signal: NodeJS.Signals) => {
      // Later signals (npm forwarding the same Ctrl-C, a group-wide SIGTERM) only find the
      // listener still there: the shutdown under way goes on.
      if (signalled !== undefined) return
      signalled = signal
      // A shutdown asked for: the program ends with 0 once it completes (not 130).
      fiber.interruptUnsafe(fiber.id, Context.make(InterruptExitCode, 0))
      if (!Duration.isFinite(timeout)) return
      // A timer outside the runtime: it must fire even when the program's shutdown is stuck.
      deadline = setTimeout(() => {
        process.stderr.write(
          `leasehold: the shutdown after ${signal} did not finish within ${Duration.format(timeout)}: exiting\n`
        )
        process.exit(timedOutExitCode)
      }, Duration.toMillis(timeout))
      deadline.unref()
    }
    for (const signal of signals) process.on(signal, onSignal)
    fiber.addObserver((exit) => {
      // After a signal the listeners stay until the process exits: a later signal (npm
      // forwarding the same Ctrl-C) arriving before the teardown calls `process.exit` would
      // otherwise meet Node's default handler and end the process by that signal.
      if (signalled === undefined) for (const signal of signals) process.off(signal, onSignal)
      if (deadline !== undefined) clearTimeout(deadline)
      teardown(exit, (code) => {
        if (signalled !== undefined || code !== 0) process.exit(code)
      })
    })
  })

/**
 * Run a program as the process's main: as `NodeRuntime.runMain`, except that the graceful
 * shutdown the first SIGINT or SIGTERM starts is never cut short by a later signal, and is
 * bounded by `shutdownTimeout` (after which the process exits with code 124).
 *
 * @example
 * ```ts
 * import * as Layer from "effect/Layer"
 * import { runMain } from "leasehold/NodeMain"
 *
 * declare const AppLayer: Layer.Layer<never>
 *
 * runMain(Layer.launch(AppLayer))
 * ```
 *
 * @since 0.1.0
 * @category running
 */
export const runMain: {
  (options?: RunMainOptions): <E, A>(effect: Effect.Effect<A, E>) => void
  <E, A>(effect: Effect.Effect<A, E>, options?: RunMainOptions): void
} = dual(
  (args) => Effect.isEffect(args[0]),
  <E, A>(effect: Effect.Effect<A, E>, options?: RunMainOptions): void => {
    const { shutdownTimeout: _, ...runOptions } = options ?? {}
    const timeout = Effect.runSync(Effect.result(shutdownTimeout(options)))
    if (Result.isFailure(timeout)) {
      // The program does not start: said on stderr whatever the program's own error
      // reporting (it may be off), as a failed start.
      process.stderr.write(`leasehold: ${timeout.failure.message}\n`)
      process.exitCode = 1
      return
    }
    runWithDeadline(timeout.success)(effect, runOptions)
  }
)
