/**
 * Parking an idle lease: its hold let go, what it needs to go on kept in a compact
 * `ParkedLease` (its own timer entry, in `Session.parked`) until `notify` resumes it.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { OneShot } from "../oneShot.js"
import { fineMillis, type Timer, type Wheel } from "../timers.js"
import type { HoldState } from "./holdState.js"
import { notify, type Session, type SessionEnv } from "./session.js"

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
  constructor(
    readonly env: SessionEnv,
    readonly session: Session,
    readonly lockId: string,
    readonly fence: number,
    readonly claim: number | undefined,
    readonly deadline: number,
    public served: number,
    public servedAt: number,
    readonly confirmedUntil: number,
    readonly writeMs: number,
    readonly clock: Clock.Clock,
    readonly wheel: Wheel,
    readonly slices: Array<string | boolean | undefined>,
    readonly extendAt: number
  ) {}

  /** The deadline, or the next extension: the hold goes on in a fiber, which does what is due. */
  fire(): undefined {
    if (this.session.parked === this) notify(this.session)
    return undefined
  }

  /** No longer parked: its timer is disarmed (`notify` and the shutdown resume it). */
  unpark(): void {
    if (this.session.parked === this) this.session.parked = undefined
    this.wheel.disarm(this)
  }

  /** The slice's place in `slices`; -1 if none. */
  indexOf(name: string): number {
    const slices = this.slices
    for (let i = 0; i < slices.length; i += 3) if (slices[i] === name) return i
    return -1
  }

  /** Whether a modification served from memory waits to be written. */
  get dirty(): boolean {
    const slices = this.slices
    for (let i = 2; i < slices.length; i += 3) if (slices[i] === true) return true
    return false
  }
}

/**
 * The hold's cache and the writes it owes, from a parked lease.
 *
 * @internal
 */
export const unparkedSlices = (parked: ParkedLease) => {
  const cache = new Map<string, Option.Option<string>>()
  const dirty = new Map<string, string>()
  const { slices } = parked
  for (let i = 0; i < slices.length; i += 3) {
    const name = slices[i] as string
    const value = slices[i + 1] as string | undefined
    cache.set(name, value === undefined ? Option.none() : Option.some(value))
    if (slices[i + 2] === true) dirty.set(name, value!)
  }
  return { cache, dirty }
}

/**
 * A hold's cache and the writes it owes, flat (`ParkedLease.slices`). The writes owed are
 * the cache's latest values (every write served sets both).
 *
 * @internal
 */
export const parkedSlices = (state: HoldState): Array<string | boolean | undefined> => {
  // made at its size: grown by pushes, its store would have room for five slices more
  const slices = new Array<string | boolean | undefined>(3 * state.cache.size)
  let i = 0
  for (const [name, value] of state.cache) {
    slices[i++] = name
    slices[i++] = Option.getOrUndefined(value)
    slices[i++] = state.dirty.has(name)
  }
  return slices
}

/**
 * After `parkMs` of one idle wait with nothing to do, a lease's serving loop is woken to
 * park: an entry of the worker's timers, armed by an idle wait when none is, and left armed
 * across the waits that follow (a busy lease waits between most of its modifications: an
 * entry in and out of the timers' heap at each would cost more than the rest of the wait).
 * When it fires it looks at the wait in progress: idle for `parkMs`, the loop is woken to
 * park; idle for less, it is armed again for the rest; not waiting, it is gone (the next
 * idle wait arms it).
 *
 * @internal
 */
export const armPark = (state: HoldState) =>
  Effect.flatMap(state.env.timers.wheel, (wheel) =>
    Effect.sync(() => {
      const { parkMs } = state.env
      const fire = () => {
        state.parkTimer = undefined
        const since = state.idleSince
        if (since === undefined) return
        const idleMs = fineMillis(state.clock) - since
        if (idleMs < parkMs) {
          state.parkTimer = wheel.after(Math.max(1, Math.ceil(parkMs - idleMs)), fire)
          return
        }
        state.parkDue = true
        notify(state.session)
      }
      state.parkTimer = wheel.after(parkMs, fire)
    })
  )

/**
 * Park, if the park timer woke the loop and nothing changed since it looked (in the same
 * step as the look: a change after it resumes the hold, see `notify`), and no extension is
 * under way (its outcome is the hold's: the next idle wait tries again). The hold is let
 * go: what it needs to go on is kept in a `ParkedLease`, the timer of its deadline and of
 * its next extension.
 *
 * @internal
 */
export const park = (state: HoldState, changed: OneShot<void>) =>
  Effect.flatMap(state.env.timers.wheel, (wheel) =>
    Effect.sync(() => {
      if (!state.parkDue) return false
      state.parkDue = false
      if (changed.poll() !== undefined) return false
      const extendAt = state.keeper === undefined ? Number.POSITIVE_INFINITY : state.keeper.next()
      if (extendAt === undefined) return false
      const { env, session } = state
      state.keeper?.stop()
      state.keeper = undefined
      state.timer?.()
      state.timer = undefined
      const parked = new ParkedLease(
        env,
        session,
        state.lockId,
        state.fence,
        state.claim,
        state.deadline,
        state.served,
        state.servedAt,
        state.confirmedUntil,
        state.writeMs,
        state.clock,
        wheel,
        parkedSlices(state),
        extendAt
      )
      wheel.arm(parked, Math.min(extendAt, wheel.now() + Math.max(0, state.deadline - fineMillis(state.clock))))
      session.parked = parked
      session.lease = parked
      return true
    })
  )
