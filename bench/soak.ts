/**
 * The chaos soak for longer runs (the tests run it for 60 s, and behind Sentinel for 50 s):
 * 4 worker processes on one redis-server, oplock on, 16 tokens, faults on a seeded schedule
 * (see test/soak/run.ts).
 *
 *   npm run soak -- --json --seconds 600      one JSON object
 *   npm run soak -- --seconds 120 --seed 3
 *   npm run soak -- --json --seconds 60 --sentinel     behind Sentinel, failovers among the faults
 *   npm run soak -- --json --seconds 60 --sentinel --min-replicas-ack 0
 *
 * `--sentinel`: a primary, two replicas and three Sentinels instead of one server; the
 * server's SIGKILL and SIGSTOP become failovers (SIGKILL or SIGSTOP of the primary, and one
 * that loses the primary's last writes), every kind of fault once per minute of the run.
 * `--min-replicas-ack N` (default 2, every replica): the workers' `LEASEHOLD_MIN_REPLICAS_ACK`;
 * at 0 the failovers that lose writes lose acknowledged modifications, and the report says so.
 * A failover the Sentinels start by themselves (a primary slow to answer them on a loaded
 * machine) is reported as `failovers_unplanned`, and what it loses apart, as for those.
 * `--faults a,b,…`: these faults, in this order, instead of the seed's schedule (e.g.
 * `--sentinel --min-replicas-ack 0 --seconds 20 --faults failover-losing`).
 * `--inject nothing-written|fence-reuse|counter-order|unexpected-failure`: the workers break that property on
 * purpose (`SOAK_INJECT` of test/soak/worker.ts), and its count in the report is above 0.
 *
 * Output: {"seconds", "faults", "failovers", "operations", "violations", "lost_updates",
 * "duplicate_deliveries", "relinks", "relinked", "relink_fresh", "relink_lost", …}: the full
 * report, `details` naming each violation.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import { type Options, soak } from "../test/soak/run.js"

const args = process.argv.slice(2)
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}
const json = args.includes("--json")
const seconds = Number(flag("seconds") ?? "60")
const seed = Number(flag("seed") ?? "1")
const sentinel = args.includes("--sentinel")
const minReplicasAck = flag("min-replicas-ack")
const faults = flag("faults")
const inject = flag("inject") as Options["inject"]

const program = Effect.gen(function* () {
  const report = yield* Effect.scoped(
    soak({
      seconds,
      seed,
      sentinel,
      ...(minReplicasAck === undefined ? {} : { minReplicasAck: Number(minReplicasAck) }),
      ...(faults === undefined ? {} : { faults: faults.split(",") }),
      ...(inject === undefined ? {} : { inject }),
      ...(json ? {} : { log: (line: string) => console.log(`[soak] ${line}`) })
    })
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
