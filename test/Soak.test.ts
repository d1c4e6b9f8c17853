import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import { soak } from "./soak/run.js"

describe("chaos soak", () => {
  it.scopedLive(
    "4 workers, 16 tokens, faults on a seeded schedule: nothing lost, nothing doubled, nothing stale, every tab of a killed worker linked again under its token",
    () =>
      Effect.gen(function* () {
        const report = yield* soak({ seconds: 60, seed: 7 })
        console.log(`chaos soak: ${JSON.stringify({ ...report, details: undefined, fault_timeline: undefined })}`)
        deepStrictEqual(report.details, [])
        assert.strictEqual(report.violations, 0)
        // every fault of the schedule ran to its end (a fault that threw would end the soak)
        assert.strictEqual(report.faults, 13)
        deepStrictEqual(report.fault_counts, {
          "client-kill-normal": 2,
          "client-kill-pubsub": 2,
          "server-kill": 2,
          "server-pause": 2,
          "worker-kill": 3,
          "worker-pause": 2
        })
        assert.strictEqual(report.fault_timeline.filter((line) => /^\d+-\d+ ms: /.test(line)).length, 13)
        // the killed worker's tabs, each linked again under its token on another worker or on
        // the next incarnation: 4 on the first (half of them to the next), 2 on the second, 1 on the third
        assert.strictEqual(report.relinks, 7)
        assert.strictEqual(report.relinked, 7)
        assert.isAbove(report.successes, 100)
        assert.isAbove(report.deliveries, 10)
      }),
    240_000
  )
})
