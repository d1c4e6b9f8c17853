/**
 * A lease in use is renewed at its deadline only while its lock is known to be its own and
 * nobody waits for it; a lease waiting at the commit line still ends within the quantum
 * once contended. On the embedded store, whose test hooks take the lock away, lose
 * extension replies and lose notices.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import { Counter, memoryCluster, type Worker } from "./state/workers.js"
import { settle } from "./support/testClock.js"

/** A few turns of the real event loop, with the fibers let run between them. */
const turns = Effect.gen(function* () {
  for (let i = 0; i < 5; i++) {
    yield* settle
    yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
  }
  yield* settle
})

const advance = (ms: number) => Effect.andThen(TestClock.adjust(ms), turns)

/** A modification served by the lease's hold (an effectful one: never made in a step of the store). */
const bump = (w: Worker, token = "t") =>
  w.states.modifyEffect(token, Counter, (s) => Effect.succeed([s.n + 1, { n: s.n + 1 }] as const))

const isDone = (fiber: Fiber.Fiber<unknown, unknown>) => fiber.pollUnsafe() !== undefined

describe("a renewed lease and its lock", () => {
  it.effect("a lease whose lock was taken without a notice ends within one extension period", () =>
    Effect.gen(function* () {
      // extensions every second; acknowledged from memory, the lease's writes wait for nothing
      const cluster = yield* memoryCluster({
        oplock: true,
        lockExpiration: 3_000,
        leaseHoldTime: 1_000,
        leaseDurability: "memory",
        lockWarningThreshold: 2_000
      })
      const w = yield* cluster.worker()
      yield* bump(w)
      // in use every 200 ms: held on past its first deadline
      for (let i = 0; i < 7; i++) {
        yield* advance(200)
        yield* bump(w)
      }
      assert.isTrue(w.lease.isLeased("t"), "renewed at its first deadline")
      // another worker's now, as after a failover that lost the key and a grant to another
      yield* cluster.control.setRaw(cluster.keys.lock("t"), "other:1", 60_000)
      const lostAt = yield* Clock.currentTimeMillis
      let endedAt: number | undefined
      for (let i = 0; i < 15 && endedAt === undefined; i++) {
        yield* advance(100)
        if (!w.lease.isLeased("t")) endedAt = yield* Clock.currentTimeMillis
        // still in use (forked: once the lease is gone, the modification waits for the lock)
        else yield* Effect.forkChild(bump(w))
      }
      assert.isDefined(endedAt, "the lease went on serving for 1.5 s after its lock was taken")
      assert.isAtMost(endedAt! - lostAt, 1_100)
      // what the other holder has is untouched
      deepStrictEqual(yield* cluster.control.getRaw(cluster.keys.lock("t")), Option.some("other:1"))
    })
  )

  it.effect("a lease whose extensions fail is not renewed past the lock's confirmed life", () =>
    Effect.gen(function* () {
      // a hold time just under the lock expiration
      const cluster = yield* memoryCluster({
        oplock: true,
        lockExpiration: 3_000,
        leaseHoldTime: 2_500,
        leaseDurability: "memory",
        lockWarningThreshold: 2_000
      })
      const w = yield* cluster.worker()
      yield* bump(w)
      // every extension from now on goes unanswered (a partition); the store answers the rest
      yield* cluster.control.loseReplies("extend", 1_000_000)
      for (let i = 0; i < 12; i++) {
        yield* advance(200)
        yield* bump(w)
      }
      // t = 2,400: in use. The lock was confirmed until 3,000 (its grant); a renewal at the
      // 2,500 ms deadline is cut short of it
      yield* advance(400)
      assert.isFalse(w.lease.isLeased("t"), "the lease was renewed past its lock's confirmed life")
      assert.strictEqual(yield* cluster.stored("t"), 13)
    })
  )
})

describe("a renewed lease and its waiters", () => {
  it.effect("a busy lease whose contention notices are lost ends at its hold time: the waiter gets the lock", () =>
    Effect.gen(function* () {
      // a waiter re-checks every 300 ms (a tenth of the lock expiration)
      const cluster = yield* memoryCluster({
        oplock: true,
        lockExpiration: 3_000,
        leaseHoldTime: 1_000,
        lockWarningThreshold: 2_000
      })
      const holder = yield* cluster.worker()
      const waiter = yield* cluster.worker()
      yield* bump(holder)
      yield* turns
      assert.isTrue(holder.lease.isLeased("t"))
      // every notice from now on is lost: the holder never hears of the waiter
      yield* cluster.control.loseNotices(1_000_000)
      yield* advance(100)
      const second = yield* Effect.forkChild(bump(waiter))
      let doneAt: number | undefined
      for (let i = 0; i < 30 && doneAt === undefined; i++) {
        // the holder keeps its lease busy
        yield* Effect.forkChild(bump(holder))
        yield* advance(100)
        if (isDone(second)) doneAt = yield* Clock.currentTimeMillis
      }
      // the holder's lease ends at its 1,000 ms deadline; the grant's notice lost too, the
      // waiter claims it at its next re-check
      assert.isDefined(doneAt, "the waiter starved for 3 s behind a lease renewed")
      assert.isAtMost(doneAt!, 1_400)
      yield* Fiber.join(second)
    })
  )
})

describe("the commit line and contention", () => {
  it.effect("a lease contended while its commit waits at the line writes and ends within the quantum", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseCommitWindow: 500 })
      const holder = yield* cluster.worker()
      const waiter = yield* cluster.worker()
      // the first commit waits for the 500 ms line; then the lease listens for contention
      const first = yield* Effect.forkChild(bump(holder))
      for (let i = 0; i < 6; i++) yield* advance(100)
      assert.strictEqual(yield* Fiber.join(first), 1)
      assert.isTrue(holder.lease.isLeased("t"))
      yield* advance(10)
      // t = 610: this commit waits for the 1,000 ms line
      const second = yield* Effect.forkChild(bump(holder))
      yield* advance(10)
      assert.isFalse(isDone(second))
      const contendedAt = yield* Clock.currentTimeMillis
      const third = yield* Effect.forkChild(bump(waiter))
      const holderOf = Effect.map(
        cluster.store.holder("t"),
        Option.map(({ lockId }) => lockId)
      )
      let endedAt: number | undefined
      for (let i = 0; i < 50 && endedAt === undefined; i++) {
        yield* advance(10)
        const holding = yield* holderOf
        if (isDone(second) && Option.isSome(holding) && holding.value.startsWith(`${waiter.id}:`)) {
          endedAt = yield* Clock.currentTimeMillis
        }
      }
      // (the waiter's own lease, uncontended, then waits for its line to write)
      assert.isDefined(endedAt, "the lease waited out the commit window")
      assert.isAtMost(endedAt! - contendedAt, 50)
      assert.isFalse(holder.lease.isLeased("t"))
      assert.strictEqual(yield* Fiber.join(second), 2)
      for (let i = 0; i < 5; i++) yield* advance(100)
      assert.strictEqual(yield* Fiber.join(third), 3)
    })
  )
})

describe("Lock.withLock under a lease", () => {
  it.effect("does not wait for the group commit of modifications whose slices it did not read", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster({ oplock: true, leaseCommitWindow: 500 })
      const w = yield* cluster.worker()
      const first = yield* Effect.forkChild(bump(w))
      for (let i = 0; i < 6; i++) yield* advance(100)
      assert.strictEqual(yield* Fiber.join(first), 1)
      // t = 600: a modification and a withLock queued together; the commit waits for 1,000 ms
      const second = yield* Effect.forkChild(bump(w))
      const locked = yield* Effect.forkChild(w.lock.withLock("t", () => Effect.succeed("ran")))
      yield* advance(10)
      assert.isFalse(isDone(second))
      assert.isTrue(isDone(locked), "withLock waited for a commit of a slice it did not read")
      assert.strictEqual(yield* Fiber.join(locked), "ran")
      for (let i = 0; i < 4; i++) yield* advance(100)
      assert.strictEqual(yield* Fiber.join(second), 2)
    })
  )
})
