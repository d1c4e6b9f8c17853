import * as v8 from "node:v8"
import { runInNewContext } from "node:vm"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import * as Lease from "../src/internal/lease.js"
import * as StateManager from "../src/StateManager.js"
import { type StateBackend, stateSuite } from "./state/suite.js"
import { Counter, holding, memoryCluster, Other } from "./state/workers.js"
import * as Logs from "./support/logs.js"
import { untilOnTestClock, untilReal, withoutClockTime } from "./support/poll.js"
import { settle } from "./support/testClock.js"
import { recordingTracer } from "./support/tracer.js"

/** A full collection (`gc`, exposed for this process). */
const collectGarbage: () => void = (() => {
  v8.setFlagsFromString("--expose-gc")
  return runInNewContext("gc") as () => void
})()

const memory: StateBackend = {
  name: "memory",
  test: (name, input, body) =>
    it.effect(name, () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input)
        yield* body(cluster, {
          advance: (ms) => Effect.andThen(TestClock.adjust(ms), settle),
          quiet: () => settle,
          until: untilOnTestClock
        }).pipe(Effect.provide(Logs.into(cluster.logs)))
      })
    )
}

stateSuite(memory)

describe("signals lost with the subscriber connection", () => {
  it.effect("a waiter re-checks when its subscription is restored, not after a re-check interval", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ lockExpiration: 20_000, lockWarningThreshold: 10_000 })
      const holder = yield* cluster.worker()
      const waiter = yield* cluster.worker()
      const gate = yield* Deferred.make<void>()
      const entered = yield* Deferred.make<void>()
      const blocking = yield* Effect.forkChild(
        holder.states.modifyEffect("t", Counter, (s) =>
          Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
            null,
            { n: s.n + 1 }
          ] as const)
        )
      )
      yield* Deferred.await(entered)
      const second = yield* Effect.forkChild(waiter.states.modify("t", Counter, (s) => [null, { n: s.n + 10 }]))
      yield* untilReal(
        "the waiter is queued",
        Effect.andThen(
          settle,
          Effect.map(cluster.store.queue("t"), (ids) => ids.includes(waiter.id))
        ),
        { within: 5_000 }
      )
      // the lock goes away without a notice (as if its hand-off was published while the
      // subscriber connection was down), then the connection drops and comes back
      yield* cluster.control.setRaw(cluster.keys.lock("t"), "", 0)
      yield* cluster.control.dropSubscriptions
      // no time passes: Resubscribed made the waiter try again
      yield* untilReal(
        "the waiter finished",
        Effect.andThen(
          settle,
          Effect.map(
            Effect.sync(() => Option.fromNullishOr(second.pollUnsafe())),
            Option.isSome
          )
        ),
        { within: 5_000 }
      )
      assert.strictEqual(yield* Clock.currentTimeMillis, 0)
      assert.strictEqual(yield* cluster.stored("t"), 10)
      // the holder lost its lock: its write is refused
      yield* Deferred.succeed(gate, undefined)
      const exit = yield* Fiber.await(blocking)
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual(yield* cluster.stored("t"), 10)
    })
  )
})

describe("plain modifications decided by the session", () => {
  it.effect(
    "one decided while the next caller holds its turn: interrupted, it ends only once its write is acknowledged",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster()
        const w = yield* cluster.worker()
        const first = yield* holding(w, "t")
        const plain = yield* Effect.forkChild(w.states.modify("t", Counter, (s) => [s.n, { n: s.n + 10 }]))
        const gate = yield* Deferred.make<void>()
        const second = yield* Effect.forkChild(
          w.states.modifyEffect("t", Counter, (s) => Effect.as(Deferred.await(gate), [null, { n: s.n + 1 }] as const))
        )
        yield* settle
        // the first turn's end decides the plain one and gives the next turn to the second
        yield* first.open
        yield* settle
        yield* Effect.sync(() => plain.interruptUnsafe())
        yield* settle
        // decided, its write waits for the grant's next write (after the second's turn): so does its end
        assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(plain.pollUnsafe()))))
        assert.strictEqual(yield* cluster.stored("t"), 0)
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.await(plain)
        yield* Fiber.join(second)
        assert.strictEqual(yield* cluster.stored("t"), 12)
      })
  )
})

describe("plain modifications in one step of the embedded store (oplock off)", () => {
  it.effect("uncontended: one store step, no session left behind; an effectful one takes two", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const w = yield* cluster.worker()
      const operations = Option.getOrThrow(cluster.operations)
      const before = yield* operations
      assert.strictEqual(yield* w.states.modify("t", Counter, (s) => [s.n, { n: s.n + 1 }]), 0)
      assert.strictEqual((yield* operations) - before, 1)
      assert.strictEqual(yield* w.lease.sessions, 0)
      // a function that writes nothing is one step too
      assert.strictEqual(yield* w.states.modify("t", Counter, (s) => [s.n, s]), 1)
      assert.strictEqual((yield* operations) - before, 2)
      // an effectful function cannot run inside the store's step: it takes the lock, then commits
      yield* w.states.modifyEffect("t", Counter, (s) => Effect.succeed([null, { n: s.n + 1 }] as const))
      assert.strictEqual((yield* operations) - before, 4)
      assert.strictEqual(yield* cluster.stored("t"), 2)
    })
  )

  it.effect("modifyAllPure: several slices in one store step; a throw is its defect, nothing written", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const w = yield* cluster.worker()
      const operations = Option.getOrThrow(cluster.operations)
      const before = yield* operations
      const both = { counter: Counter, other: Other }
      const result = yield* w.states.modifyAllPure("t", both, ({ counter, other }) => [
        counter.n,
        { counter: { n: counter.n + 1 }, other: { s: `${other.s}x` } }
      ])
      assert.strictEqual(result, 0)
      assert.strictEqual((yield* operations) - before, 1, "one step for both slices")
      assert.strictEqual(yield* w.lease.sessions, 0)
      const thrown = yield* Effect.exit(
        w.states.modifyAllPure("t", both, (): readonly [null, StateManager.Values<typeof both>] => {
          throw new Error("the function died")
        })
      )
      assert.isTrue(Exit.isFailure(thrown) && Cause.hasDies(thrown.cause))
      assert.strictEqual(yield* cluster.stored("t"), 1)
      assert.deepStrictEqual(yield* w.states.get("t", Other), { s: "x" })
    })
  )

  it.effect("a tight loop of them lets the worker's other fibers run at least every 16 modifications", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const w = yield* cluster.worker()
      let loops = 0
      const ranAt: Array<number> = []
      const loop = yield* Effect.forkChild(
        Effect.whileLoop({
          while: () => loops < 200,
          body: () =>
            Effect.tap(
              w.states.modify("a", Counter, (s) => [null, { n: s.n + 1 }]),
              () =>
                Effect.sync(() => {
                  loops++
                })
            ),
          step: () => undefined
        })
      )
      // another fiber of the same worker, which asks for nothing but its turn to run
      const other = yield* Effect.forkChild(
        Effect.whileLoop({
          while: () => loops < 200,
          body: () =>
            Effect.andThen(
              Effect.yieldNow,
              Effect.sync(() => ranAt.push(loops))
            ),
          step: () => undefined
        })
      )
      yield* Fiber.join(loop)
      yield* Fiber.interrupt(other)
      assert.strictEqual(yield* cluster.stored("a"), 200)
      const gaps = ranAt.slice(1).map((at, i) => at - ranAt[i]!)
      assert.isAtLeast(ranAt.length, 10, `the other fiber ran at ${ranAt.join(", ")}`)
      assert.isAtMost(Math.max(...gaps), 16, `the other fiber ran at ${ranAt.join(", ")}`)
    })
  )

  it.effect("a lock held by another worker: the modification queues, waits, and applies after the holder's", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const holder = yield* cluster.worker()
      const w = yield* cluster.worker()
      const first = yield* holding(holder, "t")
      const plain = yield* Effect.forkChild(w.states.modify("t", Counter, (s) => [s.n, { n: s.n * 10 }]))
      yield* settle
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(plain.pollUnsafe()))))
      assert.strictEqual(yield* cluster.stored("t"), 0)
      yield* first.open
      // it saw the holder's write
      assert.strictEqual(yield* Fiber.join(plain), 1)
      assert.strictEqual(yield* cluster.stored("t"), 10)
      yield* Fiber.join(first.fiber)
    })
  )

  it.effect("refused values and a throwing function: as on the queued way, nothing written and the lock free", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ maxValueBytes: 10 })
      const w = yield* cluster.worker()
      yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      const refused = yield* Effect.flip(
        w.states.modify("t", Counter, () => [null, { n: "one" as unknown as number }] as const)
      )
      assert.strictEqual(refused._tag, "InvalidSliceValue")
      // {"n":123456789}: 15 bytes
      const big = yield* Effect.flip(w.states.modify("t", Counter, () => [null, { n: 123_456_789 }] as const))
      assert.strictEqual(big._tag, "ValueTooLarge")
      const thrown = yield* Effect.exit(
        w.states.modify("t", Counter, () => {
          throw new Error("boom")
        })
      )
      assert.isTrue(
        Exit.isFailure(thrown) && thrown.cause.reasons.length === 1 && thrown.cause.reasons.every(Cause.isDieReason)
      )
      assert.strictEqual(yield* cluster.stored("t"), 1)
      assert.strictEqual(yield* w.lease.sessions, 0)
      // the lock is free: the next modification is served at once
      yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.strictEqual(yield* cluster.stored("t"), 2)
    })
  )
})

/** The leases parked so far, in this process. */
const parkedCount = Effect.map(Metric.value(Lease.leasesParked), (state) => state.count)

describe("plain modifications under an idle lease, in one step of the embedded store (oplock on)", () => {
  it.effect("one store step each, under the lease's grant and fence, its cache kept; contention sees the last", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 60_000, lockExpiration: 120_000 })
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      const operations = Option.getOrThrow(cluster.operations)
      // the first takes the lock and starts the lease (its fiber then waits, idle)
      yield* a.states.modifyEffect("t", Counter, (s) => Effect.succeed([null, { n: s.n + 1 }] as const))
      yield* settle
      assert.isTrue(a.lease.isLeased("t"))
      const fence = yield* cluster.control.getRaw(cluster.keys.fence("t"))
      const before = yield* operations
      for (let i = 0; i < 5; i++) yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.strictEqual((yield* operations) - before, 5)
      // written at once (durability: batch), under the same grant
      assert.strictEqual(yield* cluster.stored("t"), 6)
      deepStrictEqual(yield* cluster.control.getRaw(cluster.keys.fence("t")), fence)
      assert.isTrue(a.lease.isLeased("t"))
      deepStrictEqual(a.lease.cached("t", "counter"), Option.some(Option.some(`{"n":6}`)))
      // an effectful modification is served by the hold from that cache
      yield* a.states.modifyEffect("t", Counter, (s) => Effect.succeed([null, { n: s.n + 1 }] as const))
      assert.strictEqual(yield* cluster.stored("t"), 7)
      // another worker contends: the lease ends and hands over what it wrote
      assert.strictEqual(yield* b.states.modify("t", Counter, (s) => [s.n, { n: s.n + 1 }]), 7)
      assert.isFalse(a.lease.isLeased("t"))
      assert.strictEqual(yield* cluster.stored("t"), 8)
    })
  )

  it.effect("a parked lease serves them without waking: it stays parked, and its deadline still ends it", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 5_000, lockExpiration: 20_000 })
      const a = yield* cluster.worker()
      const before = yield* parkedCount
      yield* a.states.modifyEffect("t", Counter, (s) => Effect.succeed([null, { n: s.n + 1 }] as const))
      yield* Effect.andThen(TestClock.adjust(100), settle)
      assert.strictEqual((yield* parkedCount) - before, 1)
      for (let i = 0; i < 3; i++) yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      yield* Effect.andThen(TestClock.adjust(100), settle)
      // not woken, so not parked again
      assert.strictEqual((yield* parkedCount) - before, 1)
      assert.strictEqual(yield* cluster.stored("t"), 4)
      assert.isTrue(a.lease.isLeased("t"))
      yield* Effect.andThen(TestClock.adjust(6_000), settle)
      assert.isFalse(a.lease.isLeased("t"))
      assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
      assert.strictEqual(yield* cluster.stored("t"), 4)
    })
  )

  it.effect("a lease whose lock was lost: the step refuses, the hold finds the loss, nothing is written", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 60_000, lockExpiration: 120_000 })
      const a = yield* cluster.worker()
      yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      yield* settle
      assert.isTrue(a.lease.isLeased("t"))
      // someone else's lock now (as after an expiry and another's grant)
      yield* cluster.control.setRaw(cluster.keys.lock("t"), "other:1", 60_000)
      const lost = yield* Effect.flip(a.states.modify("t", Counter, (s) => [null, { n: s.n + 10 }]))
      assert.strictEqual(lost._tag, "LockExpired")
      assert.strictEqual(yield* cluster.stored("t"), 1)
    })
  )
})

describe("modifications that take the lock in their caller's fiber", () => {
  it.effect("a store that is away fails the modification with StoreUnavailable and leaves no local entry", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const w = yield* cluster.worker()
      yield* cluster.control.setAvailable(false)
      const error = yield* Effect.flip(w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]))
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.strictEqual(yield* w.lease.sessions, 0)
      yield* cluster.control.setAvailable(true)
      yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.strictEqual(yield* cluster.stored("t"), 1)
      assert.strictEqual(yield* w.lease.sessions, 0)
    })
  )

  it.effect("modifications queued behind one holding the lock in its own fiber run after it, in order", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const w = yield* cluster.worker()
      const gate = yield* Deferred.make<void>()
      const entered = yield* Deferred.make<void>()
      const first = yield* Effect.forkChild(
        w.states.modifyEffect("t", Counter, (s) =>
          Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
            s.n,
            { n: s.n * 10 + 1 }
          ] as const)
        )
      )
      yield* Deferred.await(entered)
      const second = yield* Effect.forkChild(w.states.modify("t", Counter, (s) => [s.n, { n: s.n * 10 + 2 }]))
      const third = yield* Effect.forkChild(w.states.modify("t", Counter, (s) => [s.n, { n: s.n * 10 + 3 }]))
      yield* settle
      // both wait: the lock stays with the first one
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))))
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(third.pollUnsafe()))))
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(first), 0)
      assert.strictEqual(yield* Fiber.join(second), 1)
      assert.strictEqual(yield* Fiber.join(third), 12)
      assert.strictEqual(yield* cluster.stored("t"), 123)
      // one grant: with the oplock off the worker keeps the lock for its local waiters
      // (each written before it is acknowledged), as nobody else waits
      // (docs/design.md#local-batching-bounded-unfairness)
      assert.strictEqual(yield* cluster.grants("t"), 1)
      yield* untilReal(
        "no local entry",
        Effect.andThen(
          settle,
          Effect.map(w.lease.sessions, (n) => n === 0)
        ),
        { within: 5_000 }
      )
    })
  )
})

describe("a worker closed as a lease is granted", () => {
  // The session's fiber is forked with the grant; closing the worker before it reaches
  // its hold (0 or 1 turns of the scheduler after the modification begins) must still
  // release the lock, not leave it taken until it expires.
  for (const turns of [0, 1, 2]) {
    it.effect(`leaves the lock free (${turns} scheduler turns after the modification begins)`, () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster({ oplock: true, lockExpiration: 20_000, lockWarningThreshold: 10_000 })
        const w = yield* cluster.worker()
        const modification = yield* Effect.forkChild(w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]))
        for (let i = 0; i < turns; i++) yield* Effect.yieldNow
        yield* w.close
        yield* settle
        assert.isTrue(Option.isSome(yield* Effect.sync(() => Option.fromNullishOr(modification.pollUnsafe()))))
        assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
      })
    )
  }
})

describe("a lease's timer", () => {
  // Node's timers run on a monotonic clock of their own: a timer can fire a little before
  // the wall clock reads its time. This clock's sleeps end 1 ms early.
  const earlyTimers = (clock: Clock.Clock): Clock.Clock => ({
    currentTimeMillisUnsafe: () => clock.currentTimeMillisUnsafe(),
    currentTimeMillis: clock.currentTimeMillis,
    currentTimeNanosUnsafe: () => clock.currentTimeNanosUnsafe(),
    currentTimeNanos: clock.currentTimeNanos,
    monotonicTimeNanosUnsafe: () => clock.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: clock.monotonicTimeNanos,
    sleep: (duration) => {
      const ms = Duration.toMillis(duration)
      return clock.sleep(Duration.millis(ms > 1 ? ms - 1 : ms))
    }
  })

  it.effect("that fires before the clock reads the hold time still ends the lease on time", () =>
    Effect.gen(function* () {
      const clock = (yield* Clock.Clock) as TestClock.TestClock
      yield* Effect.provideService(
        Effect.gen(function* () {
          const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 100 })
          const worker = yield* cluster.worker()
          yield* worker.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
          assert.isTrue(worker.lease.isLeased("t"))
          yield* clock.adjust(Duration.millis(99))
          yield* settle
          // the timer has fired: the clock reads 99, one short of the hold time
          assert.isTrue(worker.lease.isLeased("t"))
          yield* clock.adjust(Duration.millis(1))
          yield* settle
          assert.isFalse(worker.lease.isLeased("t"))
          assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
          assert.strictEqual(yield* cluster.stored("t"), 1)
        }),
        Clock.Clock,
        earlyTimers(clock)
      )
    })
  )
})

describe("a lock handed over", () => {
  // the hand-off timeout (1 s) far below the lock expiration (30 s); held for one
  // modification (oplock off, no quantum) or a quantum's worth (oplock on, another worker queued)
  for (const oplock of [false, true]) {
    it.effect(
      `lives as long as a slow modification under it: it is extended, not left to the hand-off timeout (oplock ${oplock ? "on" : "off"})`,
      () =>
        Effect.gen(function* () {
          const cluster = yield* memoryCluster({
            lockExpiration: 30_000,
            handoffTimeout: 1_000,
            lockWarningThreshold: 20_000,
            oplock,
            ...(oplock ? {} : { leaseQuantum: 0 })
          })
          const a = yield* cluster.worker()
          const b = yield* cluster.worker()
          const c = yield* cluster.worker()
          const { fiber: first, open } = yield* holding(a, "t")
          const gate = yield* Deferred.make<void>()
          const entered = yield* Deferred.make<void>()
          const slow = yield* Effect.forkChild(
            b.states.modifyEffect("t", Counter, (s) =>
              Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
                null,
                { n: s.n + 10 }
              ] as const)
            )
          )
          yield* untilOnTestClock(
            "b queued",
            Effect.map(cluster.store.queue("t"), (ids) => ids.includes(b.id))
          )
          // c waits behind b all along
          const waiter = yield* Effect.forkChild(c.states.modify("t", Counter, (s) => [null, { n: s.n + 100 }]))
          yield* untilOnTestClock(
            "c queued",
            Effect.map(cluster.store.queue("t"), (ids) => ids.length === 2)
          )
          yield* settle
          // a's release hands the lock to b: its notice is the grant
          yield* open
          yield* Fiber.join(first)
          yield* untilOnTestClock("b's slow modification entered", Deferred.isDone(entered))
          const granted = Option.getOrThrow(yield* cluster.store.holder("t"))
          assert.isTrue(granted.lockId.startsWith(`${b.id}:`), granted.lockId)
          // five hand-off timeouts pass while b's modification runs
          for (let i = 0; i < 50; i++) {
            yield* TestClock.adjust(100)
            yield* settle
          }
          deepStrictEqual(
            Option.map(yield* cluster.store.holder("t"), (holder) => holder.lockId),
            Option.some(granted.lockId)
          )
          assert.isTrue(
            Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(waiter.pollUnsafe()))),
            "c took the lock from under b"
          )
          yield* Deferred.succeed(gate, undefined)
          yield* untilOnTestClock(
            "b's modification is done",
            Effect.map(
              Effect.sync(() => Option.fromNullishOr(slow.pollUnsafe())),
              Option.isSome
            )
          )
          assert.isTrue(Exit.isSuccess(yield* Fiber.await(slow)))
          yield* untilOnTestClock(
            "c's modification is done",
            Effect.map(
              Effect.sync(() => Option.fromNullishOr(waiter.pollUnsafe())),
              Option.isSome
            )
          )
          assert.strictEqual(yield* cluster.stored("t"), 111)
        })
    )
  }
})

describe("lost notices", () => {
  // re-checks every 2 s: a tenth of the lock expiration, under half the hand-off timeout
  const input = { lockExpiration: 20_000, handoffTimeout: 5_000, lockWarningThreshold: 10_000 }

  /** `b` queued behind `a`'s modification, which holds the lock until `open`. */
  const queuedBehind = (cluster: Effect.Success<ReturnType<typeof memoryCluster>>) =>
    Effect.gen(function* () {
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      const { fiber: first, open } = yield* holding(a, "t")
      const second = yield* Effect.forkChild(b.states.modify("t", Counter, (s) => [null, { n: s.n + 10 }]))
      yield* untilOnTestClock(
        "b queued",
        Effect.map(cluster.store.queue("t"), (ids) => ids.includes(b.id))
      )
      yield* settle
      return { a, b, first, second, open }
    })

  it.effect("a lost Granted: the grantee claims its grant at its next re-check, before the grant expires", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster(input)
      const { first, second, open, b } = yield* queuedBehind(cluster)
      yield* cluster.control.loseNotices(1)
      const released = yield* Clock.currentTimeMillis
      yield* open
      yield* Fiber.join(first)
      yield* settle
      // the grant installed b's lock id, and waits for b, who was not told
      const granted = Option.getOrUndefined(Option.map(yield* cluster.store.holder("t"), (h) => h.lockId))
      assert.isTrue(granted?.startsWith(`${b.id}:`), `lock ${granted}`)
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))))
      yield* TestClock.adjust(1_990)
      yield* settle
      assert.isTrue(
        Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))),
        "b waited for its re-check"
      )
      // one re-check (2 s after b began to wait), well before the grant's 5 s
      yield* untilOnTestClock(
        "b's modification is done",
        Effect.map(
          Effect.sync(() => Option.fromNullishOr(second.pollUnsafe())),
          Option.isSome
        )
      )
      assert.isAtMost((yield* Clock.currentTimeMillis) - released, 2_000)
      assert.strictEqual(yield* cluster.stored("t"), 11)
      assert.strictEqual(yield* cluster.grants("t"), 2)
      deepStrictEqual(yield* cluster.store.queue("t"), [])
    })
  )

  it.effect("a lost Contended: the lease ends at the waiter's next re-check, which tells its holder again", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ ...input, oplock: true, leaseHoldTime: 15_000 })
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      // the lease has looked at the queue once (empty) and listens
      yield* settle
      assert.isTrue(a.lease.isLeased("t"))
      // the notice of b's first attempt, and of the attempt right after b listens
      yield* cluster.control.loseNotices(2)
      const started = yield* Clock.currentTimeMillis
      const second = yield* Effect.forkChild(b.states.modify("t", Counter, (s) => [null, { n: s.n + 10 }]))
      yield* settle
      yield* TestClock.adjust(1_990)
      yield* settle
      // a has not heard: its lease goes on
      assert.isTrue(a.lease.isLeased("t"))
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))))
      yield* untilOnTestClock(
        "b's modification is done",
        Effect.map(
          Effect.sync(() => Option.fromNullishOr(second.pollUnsafe())),
          Option.isSome
        )
      )
      // b's re-check at 2 s tells a again; its lease ends then (and a quantum), not at its
      // 15 s hold time
      assert.isAtMost((yield* Clock.currentTimeMillis) - started, 2_100)
      assert.isFalse(a.lease.isLeased("t"))
      assert.strictEqual(yield* cluster.stored("t"), 11)
    })
  )
})

describe("a contended lease with nothing queued", () => {
  it.effect("releases within a turn of the event loop, no clock time: the waiter does not wait out the quantum", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseQuantum: 50 })
      const holder = yield* cluster.worker()
      const waiter = yield* cluster.worker()
      yield* holder.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.isTrue(holder.lease.isLeased("t"))
      const second = yield* Effect.forkChild(waiter.states.modify("t", Counter, (s) => [null, { n: s.n + 10 }]))
      // the holder gives its callers one turn of the event loop, no clock time (the clock
      // never moves here: a holder that waited out its quantum fails the wait after 200 turns)
      yield* withoutClockTime(
        "the waiter's modification is done",
        Effect.map(
          Effect.sync(() => Option.fromNullishOr(second.pollUnsafe())),
          Option.isSome
        )
      )
      // no time passed: the lease ended when the waiter queued, not 50 ms later
      assert.strictEqual(yield* Clock.currentTimeMillis, 0)
      assert.isFalse(holder.lease.isLeased("t"))
      assert.strictEqual(yield* cluster.stored("t"), 11)
    })
  )
})

describe("a lease's keep-alive", () => {
  it.effect(
    "tries a failed extension again: a modification that outlives the lock across an outage still commits",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster({
          oplock: true,
          lockExpiration: 300,
          lockWarningThreshold: 200,
          leaseHoldTime: 250
        })
        const w = yield* cluster.worker()
        yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
        assert.isTrue(w.lease.isLeased("t"))
        const gate = yield* Deferred.make<void>()
        const entered = yield* Deferred.make<void>()
        const slow = yield* Effect.forkChild(
          w.states.modifyEffect("t", Counter, (s) =>
            Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
              null,
              { n: s.n + 1 }
            ] as const)
          )
        )
        yield* untilOnTestClock("the slow modification entered", Deferred.isDone(entered))
        // the store is away when the first extension is due (a third of the lock expiration)
        yield* cluster.control.setAvailable(false)
        yield* TestClock.adjust(100)
        yield* settle
        yield* cluster.control.setAvailable(true)
        // far past the expiration of the lock as granted
        for (let i = 0; i < 10; i++) {
          yield* TestClock.adjust(50)
          yield* settle
        }
        yield* Deferred.succeed(gate, undefined)
        yield* untilOnTestClock(
          "the slow modification finished",
          Effect.map(
            Effect.sync(() => Option.fromNullishOr(slow.pollUnsafe())),
            Option.isSome
          )
        )
        const exit = yield* Fiber.await(slow)
        assert.isTrue(Exit.isSuccess(exit), String(exit))
        assert.strictEqual(yield* cluster.stored("t"), 2)
      })
  )
})

describe("a lease's contention signals", () => {
  it.effect("one that arrived before the lease's grant, from a worker that left since, does not end the lease", () =>
    Effect.gen(function* () {
      // quantum 0: a grant made while another worker waits serves one modification
      const cluster = yield* memoryCluster({ oplock: true, leaseQuantum: 0 })
      const [b, x, y] = [yield* cluster.worker(), yield* cluster.worker(), yield* cluster.worker()]
      const gated = (w: typeof b) =>
        Effect.gen(function* () {
          const gate = yield* Deferred.make<void>()
          const entered = yield* Deferred.make<void>()
          const fiber = yield* Effect.forkChild(
            w.states.modifyEffect("t", Counter, (s) =>
              Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
                null,
                { n: s.n + 1 }
              ] as const)
            )
          )
          return { fiber, entered, open: Deferred.succeed(gate, undefined) }
        })
      const queued = (w: typeof b) => Effect.map(cluster.store.queue("t"), (ids) => ids.includes(w.id))
      const held = yield* gated(b)
      yield* untilOnTestClock("b holds the lock", Deferred.isDone(held.entered))
      // two workers wait for it, queued
      const fromX = yield* gated(x)
      const fromY = yield* gated(y)
      yield* untilOnTestClock(
        "x and y wait",
        Effect.zipWith(queued(x), queued(y), (p, q) => p && q)
      )
      yield* held.open
      yield* untilOnTestClock(
        "x or y holds the lock",
        Effect.zipWith(Deferred.isDone(fromX.entered), Deferred.isDone(fromY.entered), (p, q) => p || q)
      )
      // `a` got the lock while `c` waited: a grant for one modification, with one more queued
      const xFirst = yield* Deferred.isDone(fromX.entered)
      const [a, c] = xFirst ? [x, y] : [y, x]
      const [first, waiting] = xFirst ? [fromX, fromY] : [fromY, fromX]
      const second = yield* Effect.forkChild(a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]))
      yield* settle
      assert.isFalse(a.lease.isLeased("t"))
      // c checks again after its re-check interval: its queue refresh tells a `contended` during that grant
      yield* TestClock.adjust(1_000)
      yield* settle
      // then c leaves: nobody but a wants the token now
      yield* Fiber.interrupt(waiting.fiber)
      yield* untilOnTestClock(
        "c left the queue",
        Effect.map(queued(c), (q) => !q)
      )
      yield* first.open
      yield* untilOnTestClock(
        "a's modifications done",
        Effect.map(
          Effect.sync(() => Option.fromNullishOr(second.pollUnsafe())),
          Option.isSome
        )
      )
      yield* settle
      // a's next grant found no contender: a lease, which c's old signal must not end
      assert.isTrue(a.lease.isLeased("t"))
      assert.strictEqual(yield* cluster.stored("t"), 3)
    })
  )
})

describe("the timers of holds and waits", () => {
  const advance = (ms: number) => Effect.andThen(TestClock.adjust(ms), settle)

  it.effect("a lease ends at its hold time when the worker was built on another Clock than its callers'", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 100 })
      // built on the live clock; the modifications run on the test's clock
      const w = yield* Effect.provideService(cluster.worker(), Clock.Clock, Clock.Clock.defaultValue())
      yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.isTrue(w.lease.isLeased("t"))
      for (let i = 0; i < 10; i++) yield* advance(50)
      assert.isFalse(w.lease.isLeased("t"), "the lease is still held after five times its hold time")
    })
  )

  it.effect("a lease that keeps serving, uncontended, is held on past its hold time: one grant, no release", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 100 })
      const w = yield* cluster.worker()
      const bump = w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      const held = Effect.map(
        cluster.store.holder("t"),
        Option.map(({ lockId, fence }) => ({ lockId, fence }))
      )
      yield* bump
      const first = yield* held
      assert.isTrue(Option.isSome(first))
      // a modification every half hold time, for five hold times
      for (let i = 0; i < 10; i++) {
        yield* advance(50)
        yield* bump
        assert.isTrue(w.lease.isLeased("t"), `the lease ended after ${50 * (i + 1)} ms`)
      }
      deepStrictEqual(yield* held, first)
      // then nothing: it ends within two hold times, its modifications written
      for (let i = 0; i < 5; i++) yield* advance(50)
      assert.isFalse(w.lease.isLeased("t"))
      assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
      assert.strictEqual(yield* cluster.stored("t"), 11)
    })
  )

  it.effect("the extensions of leases granted apart fall on one grid line: they leave together", () =>
    Effect.gen(function* () {
      // extensions every second, on a grid of 100 ms
      const cluster = yield* memoryCluster({ oplock: true, lockExpiration: 3_000 })
      const w = yield* cluster.worker()
      const remaining = (token: string) =>
        Effect.map(
          cluster.store.holder(token),
          Option.map(({ remainingMs }) => remainingMs)
        )
      yield* w.states.modify("a", Counter, (s) => [null, { n: s.n + 1 }])
      yield* advance(70)
      yield* w.states.modify("b", Counter, (s) => [null, { n: s.n + 1 }])
      // due at 1,000 and 1,070 ms: both made at the 1,000 ms line (early, never late)
      yield* advance(929)
      deepStrictEqual(yield* remaining("a"), Option.some(2_001))
      deepStrictEqual(yield* remaining("b"), Option.some(2_071))
      // (a parked lease is woken for its extension, which the timers make at their next step)
      for (let i = 0; i < 10; i++) yield* advance(10)
      const a = yield* remaining("a")
      assert.isTrue(Option.isSome(a) && a.value >= 2_900, `a: ${JSON.stringify(a)}`)
      deepStrictEqual(yield* remaining("b"), a)
    })
  )

  it.effect(
    "with a commit window, the group commits of leases on several tokens wait for its line and leave together",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster({ oplock: true, leaseCommitWindow: 50 })
        const w = yield* cluster.worker()
        const bump = (token: string) =>
          Effect.forkChild(w.states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }]))
        yield* advance(10)
        const a = yield* bump("a")
        yield* advance(20)
        const b = yield* bump("b")
        yield* advance(19)
        // t = 49: neither is written, nor answered (an answer waits for its write)
        assert.strictEqual(yield* cluster.stored("a"), 0)
        assert.strictEqual(yield* cluster.stored("b"), 0)
        assert.isUndefined(a.pollUnsafe())
        assert.isUndefined(b.pollUnsafe())
        yield* advance(1)
        assert.strictEqual(yield* Fiber.join(a), 1)
        assert.strictEqual(yield* Fiber.join(b), 1)
        assert.strictEqual(yield* cluster.stored("a"), 1)
        assert.strictEqual(yield* cluster.stored("b"), 1)
      })
  )

  it.effect("a lease's slow modification under way at shutdown keeps the lock alive until it is written", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({
        oplock: true,
        lockExpiration: 1_500,
        tokenExpiration: 60_000,
        lockWarningThreshold: 1_400
      })
      const w = yield* cluster.worker()
      yield* w.states.modify("t", Counter, () => [null, { n: 1 }])
      const held = yield* holding(w, "t")
      const closing = yield* Effect.forkChild(w.close)
      yield* settle
      // well past the lock expiration: only the keep-alive's extensions keep the lock
      for (let i = 0; i < 25; i++) yield* advance(100)
      yield* held.open
      const exit = yield* Fiber.await(held.fiber)
      yield* Fiber.join(closing)
      assert.isTrue(Exit.isSuccess(exit), `the modification failed: ${JSON.stringify(exit)}`)
      assert.strictEqual(yield* cluster.stored("t"), 2)
    })
  )
})

describe("leasehold's spans", () => {
  it.effect(
    "made under an installed tracer, with the token; not under Effect's built-in one, which exports nothing",
    () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster({})
        const worker = yield* cluster.worker()
        const inside = Effect.map(Effect.option(Effect.currentSpan), (span) =>
          Option.map(span, (current) => [current.name, current.attributes.get("token")])
        )
        const seen: Array<Option.Option<Array<unknown>>> = []
        const bump = worker.states.modifyEffect("t", Counter, (s) =>
          Effect.map(inside, (span) => {
            seen.push(span)
            return [null, { n: s.n + 1 }] as const
          })
        )
        yield* bump
        deepStrictEqual(seen, [Option.none()])
        const { tracer, names } = yield* recordingTracer
        yield* Effect.withTracer(bump, tracer)
        yield* Effect.withTracer(
          worker.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]),
          tracer
        )
        deepStrictEqual(seen, [Option.none(), Option.some(["StateManager.modify", "t"])])
        deepStrictEqual(names, ["StateManager.modify", "StateManager.modify"])
        assert.strictEqual((yield* worker.states.get("t", Counter)).n, 3)
      })
  )
})

describe("a lease and the span of the modification that began it", () => {
  it.effect("the lease's session runs outside that span, and does not keep it alive", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 60_000, lockExpiration: 120_000 })
      const worker = yield* cluster.worker()
      let span: WeakRef<object> | undefined
      // an installed tracer: under the built-in one leasehold makes no span
      const { tracer } = yield* recordingTracer
      yield* Effect.withTracer(
        worker.states.modifyEffect("t", Counter, (s) =>
          Effect.map(Effect.currentSpan, (current) => {
            assert.strictEqual(current.name, "StateManager.modify")
            span = new WeakRef(current)
            return [null, { n: s.n + 1 }] as const
          })
        ),
        tracer
      )
      // the modification began a lease, held on
      assert.isTrue(worker.lease.isLeased("t"))
      assert.isDefined(span?.deref())
      yield* Effect.promise(async () => {
        for (let i = 0; i < 5 && span?.deref() !== undefined; i++) {
          await new Promise((resolve) => setImmediate(resolve))
          collectGarbage()
        }
      })
      assert.isUndefined(span?.deref(), "the held lease keeps the span of the modification that began it")
      assert.isTrue(worker.lease.isLeased("t"))
    })
  )
})

describe("an idle lease parks", () => {
  // The lease's fiber goes on after its caller has its answer: it is let run until it waits
  // (its park timer armed) before the clock moves.
  const idleFor = (ms: number) => Effect.andThen(settle, Effect.andThen(TestClock.adjust(ms), settle))

  it.effect("it lets its fiber go and keeps the lock; a modification, contention and shutdown each go on from it", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 60_000, lockExpiration: 120_000 })
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      const fences: Array<number> = []
      const bump = (w: typeof a) =>
        w.states.modifyEffect("t", Counter, (s) =>
          Effect.map(StateManager.fence, (fence) => {
            if (Option.isSome(fence)) fences.push(fence.value)
            return [s.n + 1, { n: s.n + 1 }] as const
          })
        )
      const before = yield* parkedCount
      assert.strictEqual(yield* bump(a), 1)
      yield* idleFor(100)
      assert.strictEqual((yield* parkedCount) - before, 1, "the idle lease parked")
      assert.isTrue(a.lease.isLeased("t"))
      const holder = yield* cluster.store.holder("t")
      assert.isTrue(Option.isSome(holder), "a parked lease keeps the lock")
      // a modification continues the parked hold: the same grant, from memory
      assert.strictEqual(yield* bump(a), 2)
      assert.deepStrictEqual(fences.slice(0, 2), [fences[0], fences[0]])
      yield* idleFor(100)
      assert.strictEqual((yield* parkedCount) - before, 2, "parked again once idle")
      // another worker contends: the parked lease wakes, writes and hands the lock over
      assert.strictEqual(yield* bump(b), 3)
      assert.isFalse(a.lease.isLeased("t"))
      assert.strictEqual(yield* cluster.stored("t"), 3)
      // shutdown of a worker with a parked lease writes it and releases the lock
      yield* idleFor(100)
      assert.strictEqual(yield* bump(a), 4)
      yield* idleFor(100)
      assert.strictEqual((yield* parkedCount) - before, 4)
      yield* a.close
      assert.isTrue(Option.isNone(yield* cluster.store.holder("t")), "the parked lease's lock was released")
      assert.strictEqual(yield* cluster.stored("t"), 4)
    })
  )

  // The park timer stays armed across a busy lease's waits (it is not armed again at each):
  // a lease parks after one idle wait of the park delay (20 ms here), never after a busy
  // stretch whose waits are each shorter, however long the stretch.
  it.effect("a lease parks after one idle wait of the park delay, not after a busy stretch of short waits", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseHoldTime: 60_000, lockExpiration: 120_000 })
      const a = yield* cluster.worker()
      const bump = a.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }])
      const before = yield* parkedCount
      yield* bump
      for (let i = 0; i < 10; i++) {
        yield* Effect.andThen(TestClock.adjust(15), settle)
        yield* bump
      }
      assert.strictEqual((yield* parkedCount) - before, 0, "150 ms of waits of 15 ms each: not parked")
      yield* Effect.andThen(TestClock.adjust(19), settle)
      assert.strictEqual((yield* parkedCount) - before, 0, "idle for 19 ms: not parked")
      yield* Effect.andThen(TestClock.adjust(1), settle)
      assert.strictEqual((yield* parkedCount) - before, 1, "idle for 20 ms: parked")
      assert.isTrue(a.lease.isLeased("t"))
      assert.strictEqual(yield* bump, 12)
      assert.strictEqual(yield* cluster.stored("t"), 12)
    })
  )

  // A lock handed over lives the hand-off timeout until extended: a lease that parks before
  // its first extension is woken for it, extends, and parks again.
  it.effect("a parked lease extends its lock when due: a lock handed over outlives the hand-off timeout", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({
        oplock: true,
        leaseHoldTime: 60_000,
        lockExpiration: 120_000,
        handoffTimeout: 3_000
      })
      const a = yield* cluster.worker()
      const held = yield* cluster.store.acquireQueued("t", "H:1", [], { instanceId: "H" })
      assert.strictEqual(held._tag, "Acquired")
      const modification = yield* Effect.forkChild(a.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }]))
      yield* untilOnTestClock(
        "a queued",
        Effect.map(cluster.store.queue("t"), (queue) => queue.length === 1 && queue[0] === a.id)
      )
      yield* cluster.store.releaseQueued("t", "H:1", { instanceId: "H", carry: ["counter"] })
      assert.strictEqual(yield* Fiber.join(modification), 1)
      const before = yield* parkedCount
      yield* idleFor(100)
      assert.strictEqual((yield* parkedCount) - before, 1, "the idle lease parked")
      const lockOf = Effect.map(
        cluster.store.holder("t"),
        Option.map(({ fence, lockId }) => ({ fence, lockId }))
      )
      const lock = yield* lockOf
      assert.isTrue(Option.isSome(lock))
      // past three hand-off timeouts: unextended, the lock would have expired
      for (let i = 0; i < 90; i++) yield* idleFor(100)
      deepStrictEqual(yield* lockOf, lock)
      assert.isTrue(a.lease.isLeased("t"))
      assert.strictEqual((yield* parkedCount) - before, 1, "extended from its parked record, not woken")
      assert.strictEqual(yield* a.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }]), 2)
      deepStrictEqual(yield* lockOf, lock)
    })
  )

  it.effect("a parked lease ends at its deadline, written and released", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({
        oplock: true,
        leaseHoldTime: 5_000,
        lockExpiration: 20_000,
        leaseDurability: "memory"
      })
      const a = yield* cluster.worker()
      const before = yield* parkedCount
      yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      yield* Effect.andThen(TestClock.adjust(100), settle)
      assert.strictEqual((yield* parkedCount) - before, 1)
      // memory durability: nothing written while leased
      assert.strictEqual(yield* cluster.stored("t"), 0)
      yield* Effect.andThen(TestClock.adjust(6_000), settle)
      assert.isFalse(a.lease.isLeased("t"))
      assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
      assert.strictEqual(yield* cluster.stored("t"), 2)
    })
  )
})

describe("a contended grant acknowledged from memory (leaseDurability memory)", () => {
  it.effect("serves the callers that come back within a turn of the event loop before the next worker", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseQuantum: 50, leaseDurability: "memory" })
      const first = yield* cluster.worker()
      const looping = yield* cluster.worker()
      const after = yield* cluster.worker()
      yield* first.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.isTrue(first.lease.isLeased("t"))
      // queued behind the lease: `looping` first, then `after`; `looping` is granted with a
      // worker behind it (a quantum), and its loop's callers are acknowledged at once
      const loop = yield* Effect.forkChild(
        Effect.forEach(
          Array.from({ length: 20 }),
          () => looping.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]),
          {
            discard: true
          }
        )
      )
      yield* settle
      const seen = yield* Effect.forkChild(after.states.modify("t", Counter, (s) => [s.n, { n: s.n + 10 }]))
      // the clock stands still: the quantum never ends, so only an empty local queue after
      // a turn of the event loop lets `after` in
      yield* withoutClockTime(
        "the waiter's modification is done",
        Effect.map(
          Effect.sync(() => Option.fromNullishOr(seen.pollUnsafe())),
          Option.isSome
        )
      )
      yield* Fiber.join(loop)
      // every increment of the loop came before the waiter: one grant served them all
      assert.strictEqual(yield* Fiber.join(seen), 21)
      assert.strictEqual(yield* Clock.currentTimeMillis, 0)
    })
  )
})
