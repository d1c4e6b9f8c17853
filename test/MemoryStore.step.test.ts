import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/testing/TestClock"
import { makeKeys } from "../src/internal/keys.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import type { SliceEntry, Store } from "../src/Store.js"

const config = LeaseholdConfig.layer({
  lockExpiration: "10 seconds",
  handoffTimeout: "1 second",
  tokenExpiration: "1 hour"
})
const keys = makeKeys("leasehold")

type Seen = Array<{ readonly values: ReadonlyArray<Option.Option<string>>; readonly fence: number }>

/** A decision that records what it was given and writes `writes`. */
const recording =
  (seen: Seen, writes: ReadonlyArray<SliceEntry>) => (values: ReadonlyArray<Option.Option<string>>, fence: number) => {
    seen.push({ values, fence })
    return writes
  }

const stepOf = (memory: Store.Service) => {
  const step = memory.modifyInStep
  assert.isDefined(step, "the embedded store runs a whole modification in one step")
  return step!
}

const failureTag = <A, E extends { readonly _tag: string }>(exit: Exit.Exit<A, E>) =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Option.map(Cause.findErrorOption(exit.cause), (e) => e._tag)) : undefined

describe("MemoryStore: a whole modification in one step", () => {
  it.effect("a free lock: the values read, the fence taken, the writes made, and no lock or notice left", () =>
    Effect.gen(function* () {
      const memory = yield* MemoryStore.make
      const step = stepOf(memory)
      yield* memory.control.setRaw(keys.slice("t", "a"), `{"n":1}`, 60_000)
      yield* memory.control.setRaw(keys.fence("t"), "4")
      const seen: Seen = []
      assert.isTrue(yield* step("t", ["a", "b"], recording(seen, [["b", `{"n":2}`]])))
      deepStrictEqual(seen, [{ values: [Option.some(`{"n":1}`), Option.none()], fence: 5 }])
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "b")), Option.some(`{"n":2}`))
      deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.some("5"))
      deepStrictEqual(yield* memory.holder("t"), Option.none())
      deepStrictEqual(yield* memory.queue("t"), [])
      // the next grant, by any way, takes the next fence
      const next = yield* memory.acquireQueued("t", "w1:1", [], { instanceId: "w1" })
      assert.strictEqual(next._tag === "Acquired" ? next.fence : undefined, 6)
    }).pipe(Effect.provide(config))
  )

  it.effect("the slices read have their expiry refreshed, as an acquisition refreshes it", () =>
    Effect.gen(function* () {
      const memory = yield* MemoryStore.make
      const step = stepOf(memory)
      assert.isTrue(yield* step("t", ["a"], () => [["a", "1"]]))
      yield* TestClock.adjust("50 minutes")
      // a step that writes nothing still reads (and refreshes) the slice
      assert.isTrue(yield* step("t", ["a"], () => []))
      yield* TestClock.adjust("50 minutes")
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.some("1"))
      yield* TestClock.adjust("11 minutes")
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.none())
    }).pipe(Effect.provide(config))
  )

  it.effect("a lock held, a grant pending, or a worker queued: nothing done, the decision not made", () =>
    Effect.gen(function* () {
      const memory = yield* MemoryStore.make
      const step = stepOf(memory)
      const seen: Seen = []
      const decide = recording(seen, [["a", "1"]])
      // held
      yield* memory.acquireQueued("t", "A:1", ["a"], { instanceId: "A" })
      assert.isFalse(yield* step("t", ["a"], decide))
      deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.some("1"))
      // B queued; A's release grants the lock to B, pending
      yield* memory.acquireQueued("t", "B:1", ["a"], { instanceId: "B" })
      yield* memory.acquireQueued("t", "C:1", ["a"], { instanceId: "C" })
      yield* memory.releaseQueued("t", "A:1", { instanceId: "A" })
      deepStrictEqual(yield* memory.holder("t").pipe(Effect.map(Option.map((h) => h.lockId))), Option.some("B:1"))
      assert.isFalse(yield* step("t", ["a"], decide))
      // B's grant runs out unclaimed: the lock is free, and C still queued; the step, as any
      // attempt, grants the lock to C (under the next fence), and C alone is told
      yield* TestClock.adjust("1500 millis")
      deepStrictEqual(yield* memory.control.getRaw(keys.lock("t")), Option.none())
      const toC = yield* Stream.runHead(yield* memory.notices("t", "C")).pipe(Effect.forkChild)
      yield* Effect.yieldNow
      assert.isFalse(yield* step("t", ["a"], decide))
      deepStrictEqual(yield* memory.queue("t"), [])
      deepStrictEqual(yield* memory.control.getRaw(keys.lock("t")), Option.some("C:1"))
      const notice = yield* Fiber.join(toC)
      assert.strictEqual(Option.getOrThrow(notice)._tag, "Granted")
      deepStrictEqual(seen, [])
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.none())
      deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.some("3"))
    }).pipe(Effect.provide(config))
  )

  it.effect("entries whose deadline passed leave the queue: the lock is free for the step again", () =>
    Effect.gen(function* () {
      const memory = yield* MemoryStore.make
      const step = stepOf(memory)
      yield* memory.acquireQueued("t", "A:1", [], { instanceId: "A" })
      yield* memory.acquireQueued("t", "B:1", [], { instanceId: "B" })
      yield* TestClock.adjust("5 seconds")
      assert.isFalse(yield* step("t", ["a"], () => [["a", "1"]]))
      // the lock expired, and B's entry (a lock expiration after its last refresh) with it
      yield* TestClock.adjust("6 seconds")
      assert.isTrue(yield* step("t", ["a"], () => [["a", "1"]]))
      deepStrictEqual(yield* memory.queue("t"), [])
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.some("1"))
    }).pipe(Effect.provide(config))
  )

  it.effect(
    "asked inside the step: nothing (the step does nothing), or a holder's grant (its fence, the lock kept)",
    () =>
      Effect.gen(function* () {
        const memory = yield* MemoryStore.make
        const step = stepOf(memory)
        const seen: Seen = []
        const decide = recording(seen, [["a", "1"]])
        // asked for nothing: not even a free lock is taken
        let asked = 0
        const nothing = () => {
          asked++
          return undefined
        }
        assert.isFalse(yield* step("t", ["a"], decide, { when: nothing }))
        assert.strictEqual(asked, 1)
        deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.none())
        // a holder's grant: under its lock and fence
        yield* memory.acquireQueued("t", "A:1", ["a"], { instanceId: "A" })
        assert.isFalse(yield* step("t", ["a"], decide), "a grant of its own: the lock is taken")
        assert.isFalse(yield* step("t", ["a"], decide, { when: () => ({ holder: { lockId: "B:1" } }) }))
        assert.isTrue(yield* step("t", ["a"], decide, { when: () => ({ holder: { lockId: "A:1" } }) }))
        deepStrictEqual(seen, [{ values: [Option.none()], fence: 1 }])
        deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.some("1"))
        deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.some("1"))
        deepStrictEqual(yield* memory.control.getRaw(keys.lock("t")), Option.some("A:1"))
        // a holder's lock id that is not one is a defect, nothing written
        const bad = yield* Effect.exit(
          step("t", ["a"], () => [["a", "2"]], { when: () => ({ holder: { lockId: "?A" } }) })
        )
        assert.isTrue(Exit.isFailure(bad) && Cause.hasDies(bad.cause))
        deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.some("1"))
      }).pipe(Effect.provide(config))
  )

  it.effect("refused inputs and refused data: a typed error, the decision not made, nothing written", () =>
    Effect.gen(function* () {
      const memory = yield* MemoryStore.make
      const step = stepOf(memory)
      const seen: Seen = []
      const decide = recording(seen, [["a", "1"]])
      assert.strictEqual(failureTag(yield* Effect.exit(step("bad token", ["a"], decide))), "InvalidToken")
      assert.strictEqual(failureTag(yield* Effect.exit(step("t", ["bad name"], decide))), "InvalidSliceName")
      // a fencing counter that is not an integer refuses the step
      yield* memory.control.setRaw(keys.fence("t"), "not a number")
      assert.strictEqual(failureTag(yield* Effect.exit(step("t", ["a"], decide))), "StoreRefused")
      deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.some("not a number"))
      // a store that is away
      yield* memory.control.setRaw(keys.fence("t"), "1")
      yield* memory.control.setAvailable(false)
      assert.strictEqual(failureTag(yield* Effect.exit(step("t", ["a"], decide))), "StoreUnavailable")
      yield* memory.control.setAvailable(true)
      deepStrictEqual(seen, [])
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.none())
      deepStrictEqual(yield* memory.control.getRaw(keys.fence("t")), Option.some("1"))
    }).pipe(Effect.provide(config))
  )

  it.effect("a decision that throws, or writes a slice it did not read: a defect, nothing written", () =>
    Effect.gen(function* () {
      const memory = yield* MemoryStore.make
      const step = stepOf(memory)
      const thrown = yield* Effect.exit(
        step("t", ["a"], () => {
          throw new Error("boom")
        })
      )
      assert.isTrue(Exit.isFailure(thrown) && Cause.hasDies(thrown.cause))
      const stray = yield* Effect.exit(step("t", ["a"], () => [["b", "1"]]))
      assert.isTrue(Exit.isFailure(stray) && Cause.hasDies(stray.cause))
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.none())
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "b")), Option.none())
      // the lock is free for the next step: no lock was ever set
      assert.isTrue(yield* step("t", ["a"], () => [["a", "1"]]))
      deepStrictEqual(yield* memory.control.getRaw(keys.slice("t", "a")), Option.some("1"))
    }).pipe(Effect.provide(config))
  )
})
