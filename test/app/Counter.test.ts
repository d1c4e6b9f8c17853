/**
 * The example's counter, in process on the embedded store: a bump, one that would leave
 * the range of exact integers, and a run of bumps made in one modification.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import { StateManager } from "leasehold/StateManager"
import * as Worker from "leasehold/Worker"
import * as Counter from "../../examples/counter/Counter.js"

const states = (oplock: boolean) =>
  Worker.layerState.pipe(Layer.provideMerge(MemoryStore.layer), Layer.provideMerge(LeaseholdConfig.layer({ oplock })))

describe("counter", () => {
  for (const oplock of [false, true]) {
    it.effect(
      `a bump counts and versions; one past the exact integers fails and changes nothing (oplock ${oplock})`,
      () =>
        Effect.gen(function* () {
          const first = yield* Counter.bump("tab-1", 2)
          assert.strictEqual(first.n, 2)
          assert.strictEqual(first.v, 1)
          const second = yield* Counter.bump("tab-1", -5)
          deepStrictEqual(second, { n: -3, v: 2, epoch: first.epoch })

          const top = Number.MAX_SAFE_INTEGER - 1
          const manager = yield* StateManager
          yield* manager.modify("tab-1", Counter.Counter, (count) => [null, { ...count, n: top }])
          const overflow = yield* Effect.flip(Counter.bump("tab-1", 5))
          assert.strictEqual(overflow._tag, "CounterOverflow")
          deepStrictEqual(yield* Counter.read("tab-1"), { n: top, v: 2, epoch: first.epoch })
          // still counts within the range
          deepStrictEqual(yield* Counter.bump("tab-1", 1), { n: top + 1, v: 3, epoch: first.epoch })
        }).pipe(Effect.provide(states(oplock)))
    )
  }

  for (const oplock of [false, true]) {
    it.effect(`a run of bumps: each its own count and version, an overflow alone refused (oplock ${oplock})`, () =>
      Effect.gen(function* () {
        const manager = yield* StateManager
        const results = yield* Counter.bumpAll(manager, "tab-r", [1, 2, -4])
        deepStrictEqual(
          results.map((result) => Result.map(result, ({ n, v }) => ({ n, v }))),
          [Result.succeed({ n: 1, v: 1 }), Result.succeed({ n: 3, v: 2 }), Result.succeed({ n: -1, v: 3 })]
        )
        const epoch = Result.getOrThrow(results[0]!).epoch
        deepStrictEqual(yield* Counter.read("tab-r"), { n: -1, v: 3, epoch })

        const top = Number.MAX_SAFE_INTEGER - 2
        yield* manager.modify("tab-r", Counter.Counter, (count) => [null, { ...count, n: top }])
        // the overflowing step changes nothing; the next goes on from the count before it
        const mixed = yield* Counter.bumpAll(manager, "tab-r", [1, 5, 1, 3])
        assert.deepStrictEqual(
          mixed.map((result) => (Result.isSuccess(result) ? result.success.n : result.failure._tag)),
          [top + 1, "CounterOverflow", top + 2, "CounterOverflow"]
        )
        deepStrictEqual(yield* Counter.read("tab-r"), { n: top + 2, v: 5, epoch })
        // every step overflowing: nothing written, the counter as it was
        const none = yield* Counter.bumpAll(manager, "tab-r", [10, 20])
        assert.isTrue(none.every(Result.isFailure))
        deepStrictEqual(yield* Counter.read("tab-r"), { n: top + 2, v: 5, epoch })
        assert.deepStrictEqual(yield* Counter.bumpAll(manager, "tab-r", []), [])
      }).pipe(Effect.provide(states(oplock)))
    )
  }
})
