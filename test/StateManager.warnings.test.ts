/**
 * The warning for a modification that holds the lock longer than `lockWarningThreshold`:
 * logged once, with the time held, the event and the threshold, whichever path served the
 * modification (its caller's own grant, the relay of a lease, or the embedded store's one
 * step); none under the threshold. Embedded store; on the TestClock the time held is exactly
 * the time the clock was moved (a plain function inside the store's step spins on the live one).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import { Counter, memoryCluster } from "./state/workers.js"
import * as Logs from "./support/logs.js"
import { untilOnTestClock } from "./support/poll.js"
import { settle } from "./support/testClock.js"

const warning = (heldMs: number, event: string) =>
  `lock of token t was held too long: ${heldMs} ms by one modification (event ${event}); ` +
  "the threshold is 200 ms. Move long work out of modifications."

/** The warnings about locks held too long, among the captured lines. */
const heldTooLong = (lines: ReadonlyArray<Logs.LogLine>) =>
  Logs.atLevels(lines, ["WARN"])
    .map((line) => line.message)
    .filter((message) => message.includes("held too long"))

const run = (oplock: boolean) =>
  Effect.gen(function* () {
    const logs = Logs.capture()
    const outcome = yield* Logs.withCapture(
      logs,
      Effect.gen(function* () {
        const cluster = yield* memoryCluster({ oplock, lockExpiration: 2_000, lockWarningThreshold: 200 })
        const w = yield* cluster.worker()
        // With the oplock, the first modification takes the lease that serves the others.
        yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }], { event: "first" })
        assert.strictEqual(w.lease.isLeased("t"), oplock)
        // A modification that takes `ms` on the clock, run to its end.
        const taking = (ms: number, event: string) =>
          Effect.gen(function* () {
            const running = yield* Effect.forkChild(
              w.states.modifyEffect("t", Counter, (s) => Effect.as(Effect.sleep(ms), [null, { n: s.n + 1 }] as const), {
                event
              })
            )
            yield* settle
            yield* TestClock.adjust(ms)
            yield* untilOnTestClock(
              `the ${event} modification finished`,
              Effect.map(
                Effect.sync(() => Option.fromNullishOr(running.pollUnsafe())),
                Option.isSome
              )
            )
            assert.isTrue(Exit.isSuccess(yield* Fiber.await(running)))
          })
        // one under the threshold: no warning
        yield* taking(150, "quick")
        // one over it: one warning, with the time it held the lock
        yield* taking(300, "slow")
        // the lease's relay logs from its own fiber, once the relay has ended
        yield* settle
        return { stored: yield* cluster.stored("t"), leased: w.lease.isLeased("t") }
      })
    )
    return { ...outcome, warnings: heldTooLong(logs.lines) }
  })

describe("a modification that holds the lock too long", () => {
  it.effect("served under its caller's own grant (oplock off): one warning, with its time, event and threshold", () =>
    Effect.gen(function* () {
      const { stored, warnings } = yield* run(false)
      assert.strictEqual(stored, 3)
      assert.deepStrictEqual(warnings, [warning(300, "slow")])
    })
  )

  it.effect("served by a lease's relay (oplock on): the same warning, logged once", () =>
    Effect.gen(function* () {
      const { stored, leased, warnings } = yield* run(true)
      assert.isTrue(leased)
      assert.strictEqual(stored, 3)
      assert.deepStrictEqual(warnings, [warning(300, "slow")])
    })
  )
})

describe("a plain function decided inside the embedded store's step (oplock off)", () => {
  it.live("that takes longer than the threshold: one warning, with its time, event and threshold", () =>
    Effect.gen(function* () {
      const logs = Logs.capture()
      const stored = yield* Logs.withCapture(
        logs,
        Effect.scoped(
          Effect.gen(function* () {
            const cluster = yield* memoryCluster({ lockExpiration: 2_000, lockWarningThreshold: 200 })
            const w = yield* cluster.worker()
            const spinning = (ms: number) => (s: { readonly n: number }) => {
              const until = performance.now() + ms
              while (performance.now() < until) {
                // the decision's own time, inside the store's step
              }
              return [null, { n: s.n + 1 }] as const
            }
            yield* w.states.modify("t", Counter, spinning(0), { event: "quick" })
            yield* w.states.modify("t", Counter, spinning(300), { event: "slow" })
            // it went the one-step way: nothing is left queued or held here
            assert.strictEqual(yield* w.lease.sessions, 0)
            return yield* cluster.stored("t")
          })
        )
      )
      assert.strictEqual(stored, 2)
      const warnings = heldTooLong(logs.lines)
      assert.strictEqual(warnings.length, 1, warnings.join("\n"))
      const held =
        /^lock of token t was held too long: ([\d.]+) ms by one modification \(event slow\); the threshold is 200 ms\./.exec(
          warnings[0]!
        )
      assert.isNotNull(held, warnings[0])
      assert.isAtLeast(Number(held![1]), 300)
    })
  )
})
