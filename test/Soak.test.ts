import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import { expectedRelinks, faultCounts, faultSchedule, soak, testSeed } from "./soak/run.js"

const options = { seconds: 60, seed: testSeed() }
// the first line of the output: a failure is replayed with this seed
console.log(
  `chaos soak: seed ${options.seed} (replay: npm run soak -- --seconds ${options.seconds} --seed ${options.seed})`
)

describe("chaos soak", () => {
  it.live(
    `4 workers, 16 tokens, faults on seed ${options.seed}'s schedule: nothing lost, nothing doubled, nothing stale, every tab of a killed worker linked again under its token`,
    () =>
      Effect.gen(function* () {
        const schedule = faultSchedule(options)
        const report = yield* soak(options)
        console.log(`chaos soak: ${JSON.stringify({ ...report, details: undefined, fault_timeline: undefined })}`)
        deepStrictEqual(report.details, [])
        assert.strictEqual(report.violations, 0)
        // every fault of the schedule ran to its end (a fault that threw would end the soak)
        assert.strictEqual(report.faults, schedule.length)
        deepStrictEqual(report.fault_counts, faultCounts(schedule))
        assert.strictEqual(report.fault_timeline.filter((line) => /^\d+-\d+ ms: /.test(line)).length, schedule.length)
        // the killed worker's tabs, each linked again under its token on another worker or on
        // the next incarnation (half of them there, to be moved again by the next kill)
        assert.strictEqual(report.relinks, expectedRelinks(options))
        assert.strictEqual(report.relinked, report.relinks)
        assert.isAbove(report.successes, 100)
        assert.isAbove(report.deliveries, 10)
      }),
    240_000
  )
})
