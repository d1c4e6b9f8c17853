/**
 * The chaos soak for longer runs (the test runs it for 60 s): 4 worker processes on one
 * redis-server, oplock on, 16 tokens, faults on a seeded schedule (see test/soak/run.ts).
 *
 *   npm run soak -- --json --seconds 600      one JSON object
 *   npm run soak -- --seconds 120 --seed 3
 *
 * Output: {"seconds", "faults", "operations", "violations", "lost_updates",
 * "duplicate_deliveries", "relinks", "relinked", "relink_fresh", "relink_lost", …}: the full
 * report, `details` naming each violation.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import { soak } from "../test/soak/run.js"

const args = process.argv.slice(2)
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}
const json = args.includes("--json")
const seconds = Number(flag("seconds") ?? "60")
const seed = Number(flag("seed") ?? "1")

const program = Effect.gen(function* () {
  const report = yield* Effect.scoped(
    soak({ seconds, seed, ...(json ? {} : { log: (line: string) => console.log(`[soak] ${line}`) }) })
  )
  if (json) console.log(JSON.stringify(report))
  else {
    const { details, ...figures } = report
    console.log(figures)
    for (const line of details) console.log(`  violation: ${line}`)
  }
  if (report.violations > 0) process.exitCode = 1
})

NodeRuntime.runMain(program)
