import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as NodeMain from "../src/NodeMain.js"

/** Run `effect` with `LEASEHOLD_SHUTDOWN_TIMEOUT_MS` set to `value` (unset: `undefined`), then restore it. */
const withVariable = <A, E>(value: string | undefined, effect: Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const before = process.env[NodeMain.shutdownTimeoutVariable]
      if (value === undefined) delete process.env[NodeMain.shutdownTimeoutVariable]
      else process.env[NodeMain.shutdownTimeoutVariable] = value
      return before
    }),
    () => effect,
    (before) =>
      Effect.sync(() => {
        if (before === undefined) delete process.env[NodeMain.shutdownTimeoutVariable]
        else process.env[NodeMain.shutdownTimeoutVariable] = before
      })
  )

describe("NodeMain.shutdownTimeout", () => {
  it.effect("10 s by default; the variable sets it; the option wins over the variable", () =>
    Effect.gen(function* () {
      const ms = (options?: NodeMain.RunMainOptions) => Effect.map(NodeMain.shutdownTimeout(options), Duration.toMillis)
      assert.strictEqual(yield* withVariable(undefined, ms()), 10_000)
      assert.strictEqual(yield* withVariable("", ms()), 10_000)
      assert.strictEqual(yield* withVariable("2500", ms()), 2_500)
      assert.strictEqual(yield* withVariable("2500", ms({ shutdownTimeout: "3 seconds" })), 3_000)
    })
  )

  it.effect("a variable that is not a whole number of ms above 0 is InvalidConfig naming it", () =>
    Effect.gen(function* () {
      for (const value of ["soon", "0", "-5", "1.5", "10s", "2147483648"]) {
        const exit = yield* withVariable(value, Effect.exit(NodeMain.shutdownTimeout()))
        assert.isTrue(Exit.isFailure(exit), value)
        const error = yield* Effect.flip(withVariable(value, NodeMain.shutdownTimeout()))
        assert.strictEqual(error._tag, "InvalidConfig")
        assert.strictEqual(error.knob, "LEASEHOLD_SHUTDOWN_TIMEOUT_MS")
        assert.include(error.message, value)
      }
    })
  )

  it.effect("the option: infinite is no deadline; zero or beyond a Node timer's range is InvalidConfig", () =>
    Effect.gen(function* () {
      const infinite = yield* NodeMain.shutdownTimeout({ shutdownTimeout: Duration.infinity })
      assert.isFalse(Duration.isFinite(infinite))
      for (const shutdownTimeout of [Duration.zero, Duration.millis(2 ** 31)]) {
        const error = yield* Effect.flip(NodeMain.shutdownTimeout({ shutdownTimeout }))
        assert.strictEqual(error._tag, "InvalidConfig")
        assert.strictEqual(error.knob, "shutdownTimeout")
      }
    })
  )
})
