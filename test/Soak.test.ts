import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import { soak } from "./soak/run.js"

describe("chaos soak", () => {
  it.scopedLive(
    "4 workers, 16 tokens, faults on a seeded schedule: nothing lost, nothing doubled, nothing stale",
    () =>
      Effect.gen(function* () {
        const report = yield* soak({ seconds: 60, seed: 7 })
        console.log(`chaos soak: ${JSON.stringify({ ...report, details: undefined, fault_timeline: undefined })}`)
        deepStrictEqual(report.details, [])
        assert.strictEqual(report.violations, 0)
        assert.isAtLeast(report.faults, 10)
        assert.isAtLeast(report.fault_counts["worker-kill"] ?? 0, 2)
        assert.isAtLeast(report.fault_counts["worker-pause"] ?? 0, 1)
        assert.isAbove(report.successes, 100)
        assert.isAbove(report.deliveries, 10)
      }),
    240_000
  )
})
