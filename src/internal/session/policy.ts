/**
 * How a grant is held, chosen once when its hold begins (`policyOf`), as one of four
 * `HoldPolicy` values: for one modification (`singleHold`), a quantum's worth while other
 * workers wait (`quantumHold`), as a lease that nobody contends (`leaseHold`), or, with the
 * oplock off or the token's lease withheld here, for the modifications queued here, each
 * acknowledged once written (`batchHold`). The hold's steps ask its policy wherever the
 * four differ.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import type { InvalidInput, StoreError } from "../../StoreError.js"
import type { Grant } from "../lock/service.js"
import type { OneShot } from "../oneShot.js"
import { preciseMillis } from "../timers.js"
import { flush } from "./groupCommit.js"
import type { HoldState } from "./holdState.js"
import { type IdleStep, linger, waitIdle } from "./idle.js"
import { leasesStarted } from "./metrics.js"
import { leases, type SessionEnv, turnEventLoop, withholdLease } from "./session.js"
import { renew } from "./timing.js"

/**
 * What differs between the ways a grant is held.
 *
 * @internal
 */
export interface HoldPolicy {
  /** The mode's name, as the docs call it. */
  readonly name: "single" | "quantum" | "lease" | "batch"
  /**
   * Whether a grant the caller's own attempt took is held by the session's fiber, which
   * serves the modifications that queue meanwhile; otherwise the caller holds it for its own
   * modification (`caller.begin`).
   */
  readonly heldBySession: boolean
  /** When the hold's serving ends, from its grant (a lease's deadline may be renewed). */
  readonly deadlineOf: (env: SessionEnv, grant: Grant) => number
  /** Whether another worker is taken to wait from the grant on: the hold then lasts a quantum at most. */
  readonly contendedAtGrant: (grant: Grant) => boolean
  /** Whether a keep-alive extends the lock for the whole hold (else only a lock handed over's). */
  readonly keepsAlive: boolean
  /** Whether the hold serves one turn and no more: no relay, no turn of the event loop. */
  readonly servesOneTurn: boolean
  /** Whether contention is told by the token's notices (else it is taken as present from the grant). */
  readonly watchesNotices: boolean
  /** Whether a modification is acknowledged once served, from memory (else once written). */
  readonly acknowledgesFromMemory: (env: SessionEnv) => boolean
  /** Whether its group commit, uncontended, meets the worker's others at the commit line. */
  readonly meetsCommitLine: boolean
  /** What a busy serving loop does every `yieldMs`: a turn of the event loop, or a write. */
  readonly whenBusy: (state: HoldState) => Effect.Effect<void>
  /** At the deadline: whether the hold goes on (its deadline moved), or ends. */
  readonly atDeadline: (state: HoldState, now: number) => Effect.Effect<boolean>
  /** Nothing queued here: linger, wait, park, or end (`lingered`: the last idle step lingered). */
  readonly whenIdle: (
    state: HoldState,
    now: number,
    changed: OneShot<void>,
    lingered: boolean
  ) => Effect.Effect<IdleStep, InvalidInput | StoreError>
  /** The serving begins (`resumed`: a parked lease goes on). */
  readonly begins: (state: HoldState, resumed: boolean) => Effect.Effect<void>
  /** The hold ends (its serving over, before its last write). */
  readonly ends: (state: HoldState) => void
}

const noRenewal = Effect.succeed(false)
const nothing = () => Effect.void
const turnOnly = () => turnEventLoop
const lingers = (state: HoldState, now: number, _changed: OneShot<void>, lingered: boolean) =>
  linger(state, now, lingered)

/**
 * For one modification (no quantum, and no lease: the oplock off, withheld, or another
 * worker waiting): its caller's own, or the session's for the first request queued here.
 *
 * @internal
 */
export const singleHold: HoldPolicy = {
  name: "single",
  heldBySession: false,
  deadlineOf: (_env, grant) => grant.grantedAt,
  contendedAtGrant: () => true,
  keepsAlive: false,
  servesOneTurn: true,
  watchesNotices: false,
  acknowledgesFromMemory: () => false,
  meetsCommitLine: false,
  // it serves one turn: never busy
  whenBusy: nothing,
  atDeadline: () => noRenewal,
  whenIdle: lingers,
  begins: nothing,
  ends: () => undefined
}

/**
 * A quantum's worth of the modifications queued here, granted while other workers wait.
 *
 * @internal
 */
export const quantumHold: HoldPolicy = {
  // a single hold's, but for what the session's fiber serving a quantum changes
  ...singleHold,
  name: "quantum",
  heldBySession: true,
  deadlineOf: (env, grant) => grant.grantedAt + env.quantumMs,
  servesOneTurn: false,
  acknowledgesFromMemory: (env) => !env.durable,
  whenBusy: turnOnly
}

/**
 * A lease: granted with nobody waiting, held for `leaseHoldTime` (renewed while busy and
 * uncontended), cut to a quantum once another worker queues, parked when idle.
 *
 * @internal
 */
export const leaseHold: HoldPolicy = {
  name: "lease",
  heldBySession: true,
  deadlineOf: (env, grant) => grant.grantedAt + env.holdMs,
  contendedAtGrant: () => false,
  keepsAlive: true,
  servesOneTurn: false,
  watchesNotices: true,
  acknowledgesFromMemory: (env) => !env.durable,
  meetsCommitLine: true,
  whenBusy: turnOnly,
  atDeadline: renew,
  whenIdle: (state, now, changed, lingered) =>
    state.contention.contended ? linger(state, now, lingered) : waitIdle(state, changed),
  begins: (state, resumed) => {
    if (resumed) return Effect.void
    return Effect.map(Metric.update(leasesStarted, 1), () => {
      state.grant.session.lease = state
    })
  },
  ends: (state) => {
    // another worker wanted the token before this lease served a second modification
    if (state.contention.contended && state.turns.served <= 1)
      withholdLease(state.grant.env, state.grant.token, preciseMillis(state.grant.clock))
  }
}

/**
 * The modifications queued here, with the oplock off or the token's lease withheld: each
 * acknowledged once written, written at least every `yieldMs`; for as long as they queue
 * while nobody contends, for a quantum once another worker waits.
 *
 * @internal
 */
export const batchHold: HoldPolicy = {
  name: "batch",
  heldBySession: false,
  deadlineOf: (env, grant) =>
    // a batch that nobody contends lasts as long as modifications queue here
    grant.contenders === 0 ? Number.POSITIVE_INFINITY : grant.grantedAt + env.quantumMs,
  contendedAtGrant: (grant) => grant.contenders > 0,
  keepsAlive: true,
  servesOneTurn: false,
  watchesNotices: true,
  acknowledgesFromMemory: () => false,
  meetsCommitLine: false,
  // its acknowledgements wait for the write: made at least every `yieldMs`
  whenBusy: (state) => (state.cache.awaitingWrite.length > 0 ? Effect.asVoid(flush(state)) : turnEventLoop),
  atDeadline: () => noRenewal,
  whenIdle: lingers,
  begins: nothing,
  ends: () => undefined
}

/**
 * How a grant is held: for one modification; a quantum's worth (others wait); as a lease
 * (nobody waits); or, with the oplock off or the token's lease withheld here (`leases`), for
 * the modifications queued here (a batch, for at most a quantum once others wait).
 *
 * @internal
 */
export const policyOf = (env: SessionEnv, grant: Grant): HoldPolicy => {
  const leasing = leases(env, grant.token)
  return env.quantumMs === 0
    ? leasing && grant.contenders === 0
      ? leaseHold
      : singleHold
    : !leasing
      ? batchHold
      : grant.contenders === 0
        ? leaseHold
        : quantumHold
}
