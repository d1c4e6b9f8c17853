/**
 * The counters of the per-token sessions: leases started, broken and parked, group
 * commits and failed writes. `Lease` re-exports them under the same names.
 *
 * @internal
 */
import * as Metric from "effect/Metric"

/** @internal */
export const leasesStarted = Metric.counter("leasehold_leases_started_total", { incremental: true })

/** @internal */
export const leasesBroken = Metric.counter("leasehold_leases_broken_total", {
  description: "leases ended early because another instance contended",
  incremental: true
})

/** @internal */
export const flushes = Metric.counter("leasehold_lease_flushes_total", {
  description: "group commits of leased modifications",
  incremental: true
})

/** @internal */
export const flushFailures = Metric.counter("leasehold_lease_flush_failures_total", { incremental: true })

/** @internal */
export const leasesParked = Metric.counter("leasehold_leases_parked_total", {
  description: "idle leases that let their fiber go, the lock still held",
  incremental: true
})
