/**
 * Parking an idle lease: its hold let go, what it needs to go on kept in a compact
 * `ParkedLease` (its own timer entry, in `Session.parked`) until `notify` resumes it.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { type AcknowledgedError, LockLost } from "../../StoreError.js"
import type { OneShot } from "../oneShot.js"
import { preciseMillis, type Timer, type TimerHeap } from "../timers.js"
import type { FlatSlices } from "./cache.js"
import type { HoldState } from "./holdState.js"
import { leasesParked } from "./metrics.js"
import { notify, type Session, type SessionEnv } from "./session.js"
import {
  confirmedByWrite,
  disarmDeadline,
  extensionPeriod,
  lookDue,
  mayRenew,
  onGrid,
  queuedElsewhere,
  renewedUntil,
  seenClear,
  stopKeepAlive
} from "./timing.js"

/** What a write under a parked lease carries beside its slices (`ParkedLease.carried`). @internal */
export interface Carried {
  readonly extend: boolean
  readonly look: boolean
  /** The timers' time of the send. */
  readonly sentAt: number
}

/**
 * What a hold that parked returns (`Session.parked` holds its state): its fiber ends, the
 * lock stays held.
 *
 * @internal
 */
export const parking = { _tag: "Parking" } as const

/** @internal */
export type Parking = typeof parking

/**
 * A parked lease: what its hold needs to go on, and nothing else. An idle lease's hold
 * (its state, its serving's closures, its timers' entries) is let go when it parks, as
 * thousands of leases held at once are mostly idle; this record keeps the lock's id and
 * fence, the slices read or written under it (their encodings, as the hold's cache has
 * them), its hold time, and is itself the timer entry that wakes it (at the deadline, or
 * when the lock is to be extended next): `resumeHold` builds the hold again from it.
 *
 * `slices` is flat, a triple per slice: its name, its encoding (`undefined`: nothing
 * stored), and whether it is still to be written (a modification acknowledged from memory).
 *
 * @internal
 */
export class ParkedLease implements Timer {
  at = 0
  index = -1
  /**
   * A modification's write made under the record by its caller (`parkedStep.ts`), under
   * way: the hold is built again only once it is done.
   */
  stepping: OneShot<void> | undefined = undefined
  /**
   * That write failed (the lock is lost, or what the store holds is unknown), or an
   * extension found the lock another's: the hold, resumed, ends.
   */
  failed: LockLost | AcknowledgedError | undefined = undefined
  /** An extension made from the record (`extend`) is under way. */
  extending = false
  constructor(
    readonly env: SessionEnv,
    readonly session: Session,
    readonly lockId: string,
    readonly fence: number,
    public claim: number | undefined,
    public deadline: number,
    public served: number,
    public servedAt: number,
    public confirmedUntil: number,
    public clearSince: number,
    readonly writeMs: number,
    readonly clock: Clock.Clock,
    readonly heap: TimerHeap,
    readonly slices: FlatSlices,
    public extendAt: number
  ) {}

  /**
   * Its time come: what is due is done from here, the lease left parked (an extension of
   * the lock, `extend`; at the deadline of a lease in use, its renewal, `renew`, after the
   * extension if both are due). Otherwise the hold goes on in a fiber, which does what is
   * due (it ends the lease at a deadline that does not renew it).
   */
  fire(): Effect.Effect<void> | undefined {
    if (this.session.parked !== this) return undefined
    if (!this.extending && this.failed === undefined) {
      const now = preciseMillis(this.clock)
      const past = now >= this.deadline
      if (!past || mayRenew(this.env, this.claim, this.servedAt, this.confirmedUntil, now)) {
        if (this.extendAt <= this.heap.now()) return this.extend()
        if (past) return this.renew(now)
        // the timers' whole milliseconds due a fraction before the deadline's precise time:
        // armed again, not woken
        this.arm()
        return undefined
      }
    }
    notify(this.session)
    return undefined
  }

  /**
   * Arm the record's timer: its next extension or its deadline, whichever comes first; while
   * an extension or a renewal is under way, its deadline if still to come (its outcome arms
   * the rest).
   */
  arm(): void {
    const untilDeadline = this.deadline - preciseMillis(this.clock)
    if (!this.extending) this.heap.arm(this, Math.min(this.extendAt, this.heap.now() + Math.max(0, untilDeadline)))
    else if (untilDeadline > 0) this.heap.arm(this, this.heap.now() + untilDeadline)
  }

  /**
   * The keep-alive of a parked lease, without its hold: the lock extended (and the slices
   * with it) as the hold's keep-alive does (`timing.ts`), on the same cadence; meanwhile
   * the deadline still wakes the hold. A hold resumed while it is under way does not wait
   * for it: its own keep-alive extends at once (the record's extension is due), and this
   * one's outcome, landing in a record no longer used, is harmless (it extends only a lock
   * this grant holds). Parked still when it ends: the store saying the lock is not ours
   * fails the record and wakes the hold, which ends; an extension that failed (the store
   * away for a moment) wakes the hold, whose keep-alive tries again sooner.
   */
  private extend(): Effect.Effect<void> {
    const { env, session } = this
    this.extending = true
    this.arm()
    const sentAt = preciseMillis(this.clock)
    const names: Array<string> = []
    for (let i = 0; i < this.slices.length; i += 3) names.push(this.slices[i] as string)
    const extension = env.store.extend(session.token, this.lockId, names, { claim: this.claim })
    return this.whileExtending(Effect.result(extension), (extended) => {
      if (session.parked !== this) return
      const every = extensionPeriod(env)
      const now = this.heap.now()
      if (Result.isSuccess(extended) && extended.success) {
        // the lock lives a full lock expiration from the send, no longer the hand-off's
        this.claim = undefined
        this.confirmedUntil = Math.max(this.confirmedUntil, sentAt + env.lockMs)
        this.extendAt = onGrid(every, now, now + every)
        this.arm()
      } else if (Result.isSuccess(extended)) {
        this.failed = new LockLost({ token: session.token, lockId: this.lockId, holder: Option.none() })
        notify(session)
      } else {
        // the store away for a moment: the hold goes on, and its keep-alive tries again sooner
        this.extendAt = now + Math.max(1, Math.floor(every / 4))
        notify(session)
      }
    })
  }

  /**
   * At its deadline, a parked lease in use is renewed as its hold would renew it (`renew` in
   * `timing.ts`), the lease left parked: when no other worker is queued for the token (as its
   * last write saw, if recently enough: `seenClear`; else as the store says), its deadline
   * moves a hold time on, within its lock's confirmed life. Under way, it counts as
   * an extension (`extending`: a hold resumed meanwhile decides for itself, and this outcome
   * is dropped). Otherwise the hold is woken, and ends the lease.
   */
  private renew(now: number): Effect.Effect<void> | undefined {
    const { env, session } = this
    if (seenClear(env, this.clearSince, this.deadline, now)) {
      // the last write's step saw nobody queued, recently enough: no look of its own
      const until = renewedUntil(env, this.confirmedUntil, now)
      if (until === undefined) notify(session)
      else {
        this.deadline = until
        this.arm()
      }
      return undefined
    }
    this.extending = true
    // an extension due meanwhile (none is due now: `fire` extends first) wakes the hold,
    // which extends for itself
    this.heap.arm(this, this.extendAt)
    return this.whileExtending(queuedElsewhere(env, session.token), (queued) => {
      if (session.parked !== this) return
      const until = queued ? undefined : renewedUntil(env, this.confirmedUntil, preciseMillis(this.clock))
      if (until === undefined || this.failed !== undefined) return notify(session)
      this.deadline = until
      this.arm()
    })
  }

  /**
   * `effect` under way as the record's extension or renewal, then `then` with its outcome:
   * `extending` ends however it ends (an interruption at shutdown too, which skips `then`).
   */
  private whileExtending<A>(effect: Effect.Effect<A>, then: (a: A) => void): Effect.Effect<void> {
    return Effect.onExit(
      Effect.map(effect, (a) => {
        this.extending = false
        then(a)
      }),
      () =>
        Effect.sync(() => {
          this.extending = false
        })
    )
  }

  /** No longer parked: its timer is disarmed (`notify` and the shutdown resume it). */
  unpark(): void {
    if (this.session.parked === this) this.session.parked = undefined
    this.heap.disarm(this)
  }

  /** The slice's place in `slices`; -1 if none. */
  indexOf(name: string): number {
    const slices = this.slices
    for (let i = 0; i < slices.length; i += 3) if (slices[i] === name) return i
    return -1
  }

  /** The values of `slices`, in their order; `undefined` when one of them is not in the record. */
  valuesOf(slices: ReadonlyArray<string>): ReadonlyArray<Option.Option<string>> | undefined {
    const values: Array<Option.Option<string>> = []
    for (const name of slices) {
      const i = this.indexOf(name)
      if (i < 0) return undefined
      const value = this.slices[i + 1] as string | undefined
      values.push(value === undefined ? Option.none() : Option.some(value))
    }
    return values
  }

  /** Whether a modification served from memory waits to be written. */
  get dirty(): boolean {
    const slices = this.slices
    for (let i = 2; i < slices.length; i += 3) if (slices[i] === true) return true
    return false
  }

  /**
   * What a write of `writes` under the record (`parkedStep`) about to be sent at `now` carries
   * beside them: the lock's extension, when one is due within half a period and the write
   * refreshes every slice of the record (with the fence, all an extension does); the count
   * of the workers queued, when the renewal's look is due (`lookDue`). `sentAt` is the
   * timers' time of the send.
   */
  carried(writes: ReadonlyArray<readonly [string, string]>, now: number): Carried {
    const sentAt = this.heap.now()
    const look = lookDue(this.env, this.deadline, this.clearSince, now)
    if (this.extendAt - sentAt > extensionPeriod(this.env) / 2) return { extend: false, look, sentAt }
    const slices = this.slices
    for (let i = 0; i < slices.length; i += 3) {
      if (!writes.some(([name]) => name === slices[i])) return { extend: false, look, sentAt }
    }
    return { extend: true, look, sentAt }
  }

  /**
   * A write under the record, sent at `sentAt` (`preciseMillis`) with what it `carried`,
   * confirmed, with `queued` other workers queued if it counted them (`confirmedByWrite`):
   * an extension carried moves the next one a period on from its send.
   */
  written(sentAt: number, carried: Carried, queued: number | undefined): void {
    confirmedByWrite(this.env, this, sentAt, carried.extend, queued)
    if (!carried.extend) return
    const every = extensionPeriod(this.env)
    this.extendAt = Math.max(this.extendAt, onGrid(every, this.heap.now(), carried.sentAt + every))
    if (this.session.parked === this && !this.extending) this.arm()
  }

  /** A modification made in one step of the store under the lease (`servedInStep`): the store holds it. */
  servedInStep(
    slices: ReadonlyArray<string>,
    values: ReadonlyArray<Option.Option<string>>,
    writes: ReadonlyArray<readonly [string, string]>,
    now: number
  ): void {
    const parked = this.slices
    for (let i = 0; i < slices.length; i++) {
      if (this.indexOf(slices[i]!) < 0) parked.push(slices[i]!, Option.getOrUndefined(values[i]!), false)
    }
    for (const [name, value] of writes) {
      const i = this.indexOf(name)
      if (i < 0) parked.push(name, value, false)
      else parked[i + 1] = value
    }
    this.served++
    this.servedAt = now
  }
}

/**
 * After `parkMs` of one idle wait with nothing to do, a lease's serving loop is woken to
 * park: an entry of the worker's timers, armed by an idle wait when none is, and left armed
 * across the waits that follow (a busy lease waits between most of its modifications: an
 * entry in and out of the timers' heap at each would cost more than the rest of the wait).
 * When it fires it looks at the wait in progress: idle for `parkMs`, the loop is woken to
 * park; idle for less, it is armed again for the rest; not waiting, it is gone (the next
 * idle wait arms it).
 */
const armPark = (state: HoldState) =>
  Effect.flatMap(state.grant.env.timers.heap, (heap) =>
    Effect.sync(() => {
      const { idle, grant } = state
      const { parkMs } = grant.env
      const fire = () => {
        idle.parkTimer = undefined
        const since = idle.idleSince
        if (since === undefined) return
        const idleMs = preciseMillis(grant.clock) - since
        if (idleMs < parkMs) {
          idle.parkTimer = heap.after(Math.max(1, Math.ceil(parkMs - idleMs)), fire)
          return
        }
        idle.parkDue = true
        notify(grant.session)
      }
      idle.parkTimer = heap.after(parkMs, fire)
    })
  )

/**
 * Park, if the park timer woke the loop and nothing changed since it looked (in the same
 * step as the look: a change after it resumes the hold, see `notify`), and no extension is
 * under way (its outcome is the hold's: the next idle wait tries again). The hold is let
 * go: what it needs to go on is kept in a `ParkedLease`, the timer of its deadline and of
 * its next extension.
 */
const park = (state: HoldState, changed: OneShot<void>) =>
  Effect.flatMap(state.grant.env.timers.heap, (heap) =>
    Effect.sync(() => {
      const { grant, timing, turns } = state
      if (!state.idle.parkDue) return false
      state.idle.parkDue = false
      if (changed.poll() !== undefined) return false
      const extendAt = timing.keeper === undefined ? Number.POSITIVE_INFINITY : timing.keeper.next()
      if (extendAt === undefined) return false
      stopKeepAlive(state)
      disarmDeadline(state)
      const parked = new ParkedLease(
        grant.env,
        grant.session,
        grant.lockId,
        grant.fence,
        timing.claim,
        timing.deadline,
        turns.served,
        turns.servedAt,
        timing.confirmedUntil,
        timing.clearSince,
        state.cache.writeMs,
        grant.clock,
        heap,
        state.cache.toFlat(),
        extendAt
      )
      parked.arm()
      grant.session.parked = parked
      grant.session.lease = parked
      return true
    })
  )

/**
 * An idle lease's wait: it parks (`true`: its fiber ends) once it was woken by nothing but
 * its park timer; otherwise it waits for `changed`, the park timer armed.
 *
 * @internal
 */
export const parkOrWait = (state: HoldState, changed: OneShot<void>): Effect.Effect<boolean> =>
  Effect.flatMap(park(state, changed), (parked) => {
    if (parked) return Effect.as(Metric.update(leasesParked, 1), true)
    const { idle } = state
    idle.idleSince = preciseMillis(state.grant.clock)
    const armed = idle.parkTimer === undefined ? armPark(state) : Effect.void
    return Effect.andThen(
      armed,
      Effect.andThen(
        changed.await,
        Effect.sync(() => {
          idle.idleSince = undefined
          return false
        })
      )
    )
  })

/**
 * The hold ends: its park timer is cancelled (an interrupted wait did not cancel it).
 *
 * @internal
 */
export const disarmPark = (state: HoldState) => {
  state.idle.parkTimer?.()
  state.idle.parkTimer = undefined
}

/**
 * A modification made in one step of the store while the serving loop waits idle: the idle
 * wait goes on as from `now`, so a busy lease does not park.
 *
 * @internal
 */
export const idleAgainFrom = (state: HoldState, now: number) => {
  if (state.idle.idleSince !== undefined) state.idle.idleSince = now
}
