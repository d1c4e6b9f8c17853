import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as TestClock from "effect/testing/TestClock"
import * as Health from "../src/Health.js"
import * as Supervisor from "../src/internal/supervisor.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { atLevels, capture, type LogLine } from "./support/logs.js"

class ValueError extends Data.TaggedError("ValueError")<{ readonly message: string }> {}
class Unexpected extends Data.TaggedError("Unexpected")<{ readonly message: string }> {}

const layerFor = (input: LeaseholdConfig.Input = {}) =>
  Supervisor.layer.pipe(
    Layer.provideMerge(Layer.mergeAll(MemoryStore.layer, Health.layer)),
    Layer.provideMerge(LeaseholdConfig.layer({ retryJitter: false, ...input }))
  )

/** Build a worker's supervisor in the test scope, with logs captured. */
const setup = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const logs = capture()
    const scope = yield* Effect.scope
    const context = yield* Layer.buildWithScope(layerFor(input), scope).pipe(Effect.provide(logs.layer))
    const supervisor = Context.get(context, Supervisor.Supervisor)
    return {
      logs: logs.lines,
      health: Context.get(context, Health.Health),
      control: Context.get(context, MemoryStore.MemoryStoreControl),
      shutdown: supervisor.shutdown,
      run: <E>(
        name: string,
        loop: (recovered: Effect.Effect<void>) => Effect.Effect<unknown, E>,
        policy?: Supervisor.Policy<E>
      ) => supervisor.run(name, loop, policy).pipe(Effect.provide(logs.layer))
    }
  })

/** Advance the TestClock a second at a time until the fiber ends. */
const driveUntilDone = <A, E>(fiber: Fiber.Fiber<A, E>, stepMs = 1_000, maxSteps = 1_000) =>
  Effect.gen(function* () {
    for (let i = 0; i < maxSteps; i++) {
      const done = yield* Effect.sync(() => Option.fromNullishOr(fiber.pollUnsafe()))
      if (Option.isSome(done)) return done.value
      yield* TestClock.adjust(stepMs)
    }
    return yield* Effect.die("the fiber did not end")
  })

const messages = (lines: ReadonlyArray<LogLine>) => atLevels(lines).map((line) => `${line.level} ${line.message}`)

describe("Supervisor: Limited", () => {
  it.effect("T1: errors, then normal returns, then an unexpected error ends the loop after exactly 5 calls", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "t1",
        () =>
          Effect.suspend((): Effect.Effect<void, ValueError | Unexpected> => {
            calls++
            if (calls <= 2) return Effect.fail(new ValueError({ message: `v${calls}` }))
            if (calls <= 4) return Effect.void
            return Effect.fail(new Unexpected({ message: "boom" }))
          }),
        Supervisor.limited<ValueError | Unexpected>({
          delay: 0,
          limit: 5,
          window: "1 second",
          retryOn: (error) => error._tag === "ValueError"
        })
      )
      const exit = yield* driveUntilDone(fiber, 10)
      assert.strictEqual(calls, 5)
      deepStrictEqual(exit, Exit.fail(new Unexpected({ message: "boom" })))
    })
  )

  it.effect("T2: the limit is reached after exactly `limit` calls", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "t2",
        () => Effect.suspend(() => Effect.fail(new ValueError({ message: `v${++calls}` }))),
        Supervisor.limited({ delay: 0, limit: 3, window: "1 second" })
      )
      const exit = yield* driveUntilDone(fiber, 10)
      assert.strictEqual(calls, 3)
      deepStrictEqual(exit, Exit.fail(new ValueError({ message: "v3" })))
    })
  )

  it.effect("T3: a window that elapses between errors resets the count", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "t3",
        () =>
          Effect.gen(function* () {
            calls++
            yield* Effect.sleep(50)
            if (calls <= 3) return yield* Effect.fail(new ValueError({ message: `v${calls}` }))
            return yield* Effect.fail(new Unexpected({ message: "runtime" }))
          }),
        Supervisor.limited<ValueError | Unexpected>({
          delay: 0,
          limit: 2,
          window: 10,
          retryOn: (error) => error._tag === "ValueError"
        })
      )
      const exit = yield* driveUntilDone(fiber, 50)
      assert.strictEqual(calls, 4)
      deepStrictEqual(exit, Exit.fail(new Unexpected({ message: "runtime" })))
    })
  )

  it.effect("T4: the default policy's log lines, in full: four suppressed, then the limit", () =>
    Effect.gen(function* () {
      const { run, logs, health } = yield* setup()
      let calls = 0
      const fiber = yield* run("t4", () =>
        Effect.suspend(() => Effect.fail(new ValueError({ message: `e${++calls}` })))
      )
      const exit = yield* driveUntilDone(fiber)
      assert.strictEqual(calls, 5)
      assert.isTrue(Exit.isFailure(exit))
      deepStrictEqual(messages(logs), [
        "ERROR t4: task error suppressed: e1",
        "ERROR t4: task error suppressed: e2",
        "ERROR t4: task error suppressed: e3",
        "ERROR t4: task error suppressed: e4",
        "ERROR t4: task exceeded exception limit 5 within 60s: e5"
      ])
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.name, "t4")
      assert.strictEqual(loop?.state._tag, "Failed")
      assert.isFalse(yield* health.healthy)
    })
  )

  it.effect("the default delay between errors is 1 s", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      const times: Array<number> = []
      const fiber = yield* run("delay", () =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          times.push(now)
          return Effect.fail(new ValueError({ message: "x" }))
        })
      )
      yield* driveUntilDone(fiber, 250)
      deepStrictEqual(times, [0, 1_000, 2_000, 3_000, 4_000])
    })
  )

  it.effect("a loop that returns normally is run again at once", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "again",
        () => Effect.suspend(() => (++calls < 100 ? Effect.void : Effect.fail(new Unexpected({ message: "stop" })))),
        Supervisor.limited<Unexpected>({ retryOn: () => false })
      )
      const exit = yield* Fiber.await(fiber)
      assert.strictEqual(calls, 100)
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual(yield* Clock.currentTimeMillis, 0)
    })
  )

  it.effect("a defect is not retried", () =>
    Effect.gen(function* () {
      const { run, health } = yield* setup()
      let calls = 0
      const fiber = yield* run("dies", () =>
        Effect.suspend(() => {
          calls++
          return Effect.die(new Error("bug"))
        })
      )
      const exit = yield* Fiber.await(fiber)
      assert.strictEqual(calls, 1)
      assert.isTrue(
        Exit.isFailure(exit) && exit.cause.reasons.length === 1 && exit.cause.reasons.every(Cause.isDieReason)
      )
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.state._tag, "Failed")
    })
  )
})

describe("Supervisor: UntilRecovered", () => {
  /** A loop that records the time of each call and fails, calling `recovered` on the listed calls first. */
  const failing = (times: Array<number>, recoverOn: ReadonlySet<number> = new Set()) => {
    let calls = 0
    return (recovered: Effect.Effect<void>) =>
      Effect.gen(function* () {
        calls++
        times.push((yield* Clock.currentTimeMillis) / 1000)
        if (recoverOn.has(calls)) yield* recovered
        return yield* Effect.fail(new ValueError({ message: `down ${calls}` }))
      })
  }

  const runFor = (fiber: Fiber.Fiber<never, unknown>, seconds: number) =>
    Effect.gen(function* () {
      for (let i = 0; i < seconds; i++) yield* TestClock.adjust(1_000)
      yield* Fiber.interrupt(fiber)
    })

  it.effect("an error from concurrent work (its siblings interrupted) is retried, not taken for an interruption", () =>
    Effect.gen(function* () {
      const { run, health, logs } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "parallel",
        () =>
          Effect.suspend(() => {
            calls++
            // one branch fails, and the other is interrupted: the cause holds both
            return Effect.all([Effect.fail(new ValueError({ message: `down ${calls}` })), Effect.never], {
              concurrency: "unbounded"
            })
          }),
        Supervisor.untilRecovered()
      )
      yield* TestClock.adjust(1_000)
      yield* TestClock.adjust(2_000)
      assert.strictEqual(calls, 3)
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(fiber.pollUnsafe()))))
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.state._tag, "Retrying")
      deepStrictEqual(messages(logs), ["ERROR parallel: task error, retrying until it recovers: down 1"])
    })
  )

  it.effect("T5: delays 1, 2, 4, 8, 16, 30, 30 s, then 1 s after `recovered`; logs in full", () =>
    Effect.gen(function* () {
      const { run, logs, health } = yield* setup()
      const times: Array<number> = []
      const fiber = yield* run("sub", failing(times, new Set([8])), Supervisor.untilRecovered())
      yield* TestClock.adjust(0)
      const [during] = yield* health.loops
      assert.strictEqual(during?.state._tag, "Retrying")
      assert.isFalse(yield* health.healthy)
      yield* runFor(fiber, 100)
      // calls at 0, then after 1, 2, 4, 8, 16, 30, 30; the 8th call recovers, so the next wait is 1 s
      deepStrictEqual(times.slice(0, 10), [0, 1, 3, 7, 15, 31, 61, 91, 92, 94])
      deepStrictEqual(messages(logs), [
        "ERROR sub: task error, retrying until it recovers: down 1",
        "INFO sub: task recovered",
        "ERROR sub: task error, retrying until it recovers: down 8"
      ])
      const errors = yield* Metric.value(Metric.withAttributes(Supervisor.loopErrors, { loop: "sub" }))
      assert.strictEqual(errors.count, times.length)
      const recoveries = yield* Metric.value(Metric.withAttributes(Supervisor.loopRecoveries, { loop: "sub" }))
      assert.strictEqual(recoveries.count, 1)
      // interrupted: no longer listed
      deepStrictEqual(yield* health.loops, [])
    })
  )

  it.effect("T5: an initial delay above the cap makes every delay the cap, also after a recovery", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      const times: Array<number> = []
      const fiber = yield* run(
        "capped",
        failing(times, new Set([3])),
        Supervisor.untilRecovered({ initial: "45 seconds" })
      )
      yield* runFor(fiber, 150)
      deepStrictEqual(times, [0, 30, 60, 90, 120, 150])
    })
  )

  it.effect("`recovered` outside a run of errors logs nothing", () =>
    Effect.gen(function* () {
      const { run, logs } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "quiet",
        (recovered) =>
          Effect.gen(function* () {
            calls++
            yield* recovered
            yield* Effect.sleep(1_000)
          }),
        Supervisor.untilRecovered()
      )
      yield* runFor(fiber, 5)
      assert.strictEqual(calls, 6)
      deepStrictEqual(messages(logs), [])
    })
  )

  it.effect("health: retrying with the last error, running again after the recovery", () =>
    Effect.gen(function* () {
      const { run, health } = yield* setup()
      let calls = 0
      const fiber = yield* run(
        "h",
        (recovered) =>
          Effect.gen(function* () {
            calls++
            if (calls < 3) return yield* Effect.fail(new ValueError({ message: `down ${calls}` }))
            yield* recovered
            return yield* Effect.never
          }),
        Supervisor.untilRecovered()
      )
      yield* TestClock.adjust(1_500)
      deepStrictEqual(yield* health.loops, [
        { name: "h", state: { _tag: "Retrying", since: 1_000, errors: 2, lastError: "down 2" } }
      ])
      yield* TestClock.adjust(2_000)
      deepStrictEqual(yield* health.loops, [{ name: "h", state: { _tag: "Running", since: 3_000 } }])
      assert.isTrue(yield* health.healthy)
      yield* Fiber.interrupt(fiber)
    })
  )

  it.effect("T6: interrupting during a 30 s delay ends the loop at once, with no further call", () =>
    Effect.gen(function* () {
      const { run } = yield* setup()
      const times: Array<number> = []
      const fiber = yield* run("t6", failing(times), Supervisor.untilRecovered({ initial: "30 seconds" }))
      yield* TestClock.adjust(10_000)
      deepStrictEqual(times, [0])
      yield* Fiber.interrupt(fiber)
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.hasInterrupts(exit))
      yield* TestClock.adjust(60_000)
      deepStrictEqual(times, [0])
      assert.strictEqual(yield* Clock.currentTimeMillis, 70_000)
    })
  )

  it.effect("the store's connection coming back cuts a pending delay short", () =>
    Effect.gen(function* () {
      const { run, control } = yield* setup()
      const times: Array<number> = []
      yield* run("cut", failing(times), Supervisor.untilRecovered())
      yield* control.setAvailable(false)
      for (let i = 0; i < 70; i++) yield* TestClock.adjust(1_000)
      // 0, 1, 3, 7, 15, 31, 61: the next call is due at 91
      deepStrictEqual(times, [0, 1, 3, 7, 15, 31, 61])
      yield* control.setAvailable(true)
      yield* TestClock.adjust(0)
      deepStrictEqual(times, [0, 1, 3, 7, 15, 31, 61, 70])
    })
  )

  it.effect("a recovery of the connection during the attempt makes the retry immediate", () =>
    Effect.gen(function* () {
      const { run, control } = yield* setup()
      const times: Array<number> = []
      let calls = 0
      yield* run(
        "during",
        () =>
          Effect.gen(function* () {
            calls++
            times.push(yield* Clock.currentTimeMillis)
            if (calls === 1) yield* control.dropSubscriptions
            if (calls <= 2) return yield* Effect.fail(new ValueError({ message: "lost" }))
            return yield* Effect.never
          }),
        Supervisor.untilRecovered()
      )
      yield* TestClock.adjust(0)
      // the connection dropped and came back while the first attempt ran: no wait
      // the second attempt began after it, so its error waits the full 2 s
      deepStrictEqual(times, [0, 0])
      yield* TestClock.adjust(2_000)
      deepStrictEqual(times, [0, 0, 2_000])
    })
  )

  it.effect("jitter adds at most 10 % and never exceeds the cap", () =>
    Effect.gen(function* () {
      const { run } = yield* setup({ retryJitter: true })
      const times: Array<number> = []
      const fiber = yield* run("j", failing(times), Supervisor.untilRecovered({ max: "5 seconds" }))
      for (let i = 0; i < 400; i++) yield* TestClock.adjust(100)
      yield* Fiber.interrupt(fiber)
      const waits = times.slice(1).map((t, i) => Math.round((t - (times[i] ?? 0)) * 1000))
      const bases = [1_000, 2_000, 4_000, 5_000, 5_000, 5_000]
      for (const [i, base] of bases.entries()) {
        const wait = waits[i]
        assert.isDefined(wait)
        assert.isAtLeast(wait!, base)
        // the clock moves in 100 ms steps, so a wait is seen rounded up to the next step
        assert.isAtMost(wait!, Math.min(base * 1.1, 5_000) + 100)
      }
      // below the cap, jitter did lengthen some wait
      assert.isTrue(waits.slice(0, 3).some((wait, i) => wait > bases[i]!))
    })
  )

  it.effect("closing the supervisor's scope interrupts a loop waiting in its retry delay", () =>
    Effect.gen(function* () {
      const times: Array<number> = []
      let calls = 0
      const loop = () =>
        Effect.gen(function* () {
          calls++
          times.push(yield* Clock.currentTimeMillis)
          return yield* Effect.fail(new ValueError({ message: "down" }))
        })
      const fiber = yield* Effect.scoped(
        Effect.gen(function* () {
          const { run } = yield* setup()
          const fiber = yield* run("closing", loop, Supervisor.untilRecovered({ initial: "30 seconds" }))
          yield* TestClock.adjust(1_000)
          return fiber
        })
      )
      assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(fiber)))
      assert.strictEqual(calls, 1)
      assert.strictEqual(yield* Clock.currentTimeMillis, 1_000)
    })
  )

  it.effect("shutdown interrupts every loop at once, and a loop run after it never starts", () =>
    Effect.gen(function* () {
      const { run, shutdown, health } = yield* setup()
      let calls = 0
      const working = yield* run("working", () =>
        Effect.andThen(
          Effect.sync(() => calls++),
          Effect.never
        )
      )
      const retrying = yield* run(
        "retrying",
        () => Effect.fail(new ValueError({ message: "down" })),
        Supervisor.untilRecovered({ initial: "30 seconds" })
      )
      yield* TestClock.adjust(1_000)
      assert.strictEqual(calls, 1)
      yield* shutdown
      assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(working)))
      assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(retrying)))
      deepStrictEqual(
        (yield* health.loops).map((loop) => loop.name),
        []
      )
      const late = yield* run("late", () => Effect.sync(() => calls++))
      assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(late)))
      assert.strictEqual(calls, 1)
    })
  )
})

describe("Supervisor: a schedule of one's own", () => {
  /** A loop that records the time of each call (s) and fails, calling `recovered` on the listed calls first. */
  const failing = (times: Array<number>, recoverOn: ReadonlySet<number> = new Set()) => {
    let calls = 0
    return (recovered: Effect.Effect<void>) =>
      Effect.gen(function* () {
        calls++
        times.push((yield* Clock.currentTimeMillis) / 1000)
        if (recoverOn.has(calls)) yield* recovered
        return yield* Effect.fail(new ValueError({ message: `down ${calls}` }))
      })
  }

  it.effect("its delays are the schedule's, and the loop ends with the error at which it is done", () =>
    Effect.gen(function* () {
      const { run, logs, health } = yield* setup()
      const times: Array<number> = []
      const fiber = yield* run("own", failing(times), Schedule.max([Schedule.spaced("3 seconds"), Schedule.recurs(3)]))
      const exit = yield* driveUntilDone(fiber)
      deepStrictEqual(times, [0, 3, 6, 9])
      deepStrictEqual(exit, Exit.fail(new ValueError({ message: "down 4" })))
      deepStrictEqual(messages(logs), [
        "ERROR own: task error, retrying on its schedule: down 1",
        "ERROR own: task schedule gave up after 4 errors in a row: down 4"
      ])
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.state._tag, "Failed")
    })
  )

  it.effect("`recovered` starts it over, and the store's connection coming back cuts its delay short", () =>
    Effect.gen(function* () {
      const { run, logs, control } = yield* setup()
      const times: Array<number> = []
      // the 4th call recovers: the schedule starts over at 10 s, not 80 s
      const fiber = yield* run("exp", failing(times, new Set([4])), Schedule.exponential("10 seconds"))
      for (let i = 0; i < 80; i++) yield* TestClock.adjust(1_000)
      deepStrictEqual(times, [0, 10, 30, 70, 80])
      yield* control.setAvailable(false)
      yield* control.setAvailable(true)
      yield* TestClock.adjust(0)
      // due at 100, run at once
      deepStrictEqual(times, [0, 10, 30, 70, 80, 80])
      deepStrictEqual(messages(logs), [
        "ERROR exp: task error, retrying on its schedule: down 1",
        "INFO exp: task recovered",
        "ERROR exp: task error, retrying on its schedule: down 4"
      ])
      yield* Fiber.interrupt(fiber)
    })
  )
})
