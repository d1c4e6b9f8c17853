/**
 * The state of one hold of a grant, and its relay of turns: the caller whose turn ends
 * hands the grant to the next request queued here, in its own call stack, while the
 * serving loop of `hold.ts` would serve that request from memory at once.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { AcknowledgedError, LockLost } from "../../StoreError.js"
import type { Outcome, Request, Turn } from "../lease.js"
import type { OneShot } from "../oneShot.js"
import { fineMillis, type Timer, type Wheel } from "../timers.js"
import { notify, prune, type Session, type SessionEnv } from "./session.js"

/**
 * One hold of a grant: what it read and wrote, and where its serving stands.
 *
 * @internal
 */
export interface HoldState {
  readonly env: SessionEnv
  readonly session: Session
  /** The fencing number of the grant held. */
  readonly fence: number
  /**
   * A lock handed over by a release lives `handoffTimeout` until its first extension: till
   * then its writes and extensions carry the grant's fence as a claim (`Store.HolderOptions`),
   * so that a hold slower than that (a stalled event loop) takes back the lock it was
   * handed if nobody had it since, instead of failing its modifications. `undefined` once
   * extended, and for any other grant.
   */
  claim: number | undefined
  readonly token: string
  readonly lockId: string
  readonly mode: "single" | "quantum" | "lease" | "batch"
  readonly cache: Map<string, Option.Option<string>>
  readonly dirty: Map<string, string>
  unacked: Array<Request>
  inProgress: Request | undefined
  served: number
  deadline: number
  /**
   * When the hold last served a modification (`fineMillis`): a lease that did in the last
   * half of its hold time, and that nobody contends, is held on at its deadline (`renew` in
   * `hold.ts`).
   */
  servedAt: number
  /**
   * Until when the lock is known to be this hold's (`fineMillis`): the grant's time plus a
   * lock expiration, then the send time of the last extension the store confirmed plus a lock
   * expiration. A lease is renewed only within it (`renew` in `hold.ts`).
   */
  confirmedUntil: number
  /** How long the last group commit took (ms): what a write now would add to the hold. */
  writeMs: number
  contended: boolean
  failed: LockLost | AcknowledgedError | undefined
  /** Cancels the entry that wakes the serving loop at the deadline (`armTimer`). */
  timer: (() => void) | undefined
  /** Whether contention is watched already (`watchContention`). */
  watching: boolean
  /** A lease's or a batch's `keepAlive`, for its whole hold. */
  keeper: KeepAlive | undefined
  /** The clock of the fiber that began the hold, read synchronously by the relay and the serving. */
  readonly clock: Clock.Clock
  /** When the serving last waited for the store (or for the event loop). */
  ioAt: number
  /** When the turn in progress was given. */
  turnAt: number
  /** Completed when the relay of turns ends (`relay`); `undefined` when none runs. */
  relayEnd: OneShot<void> | undefined
  /** Modifications that held the lock too long in the relay, logged by the fiber: with their held time. */
  longHolds: Array<readonly [Request, number]>
  /** The park timer fired: the serving loop parks at its next idle wait if nothing changed. */
  parkDue: boolean
  /** Cancels the park timer (`armPark`); `undefined` when none is armed. */
  parkTimer: (() => void) | undefined
  /** When the serving loop's idle wait began (`fineMillis`); `undefined` while it is not waiting. */
  idleSince: number | undefined
}

/**
 * A running keep-alive: `stop` ends it (an extension under way may still finish).
 *
 * @internal
 */
export interface KeepAlive {
  readonly stop: () => void
  /**
   * When it extends next (the wheel's time; infinite once the store said the lock is no
   * longer ours); `undefined` while an extension is under way.
   */
  readonly next: () => number | undefined
}

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
 * The encoded slice under a lease (`Lease.Service.cached`): `None` when the lease has none.
 *
 * @internal
 */
export const cachedOf = (lease: HoldState | ParkedLease, slice: string): Option.Option<Option.Option<string>> => {
  if (lease instanceof ParkedLease) {
    const i = lease.indexOf(slice)
    if (i < 0) return Option.none()
    const value = lease.slices[i + 1] as string | undefined
    return Option.some(value === undefined ? Option.none() : Option.some(value))
  }
  const value = lease.cache.get(slice)
  return value === undefined ? Option.none() : Option.some(value)
}

/** @internal */
export const nextRequest = (state: HoldState) => {
  prune(state.session)
  return state.session.queue[0]
}

/**
 * Give `request` its turn (taken off the queue only now: after a failed read it waits for
 * the next grant, or fails with the store's error, instead of waiting for a turn nobody
 * gives). `false` for a request cancelled meanwhile.
 */
const giveTurn = (state: HoldState, request: Request, now: number): boolean => {
  const { session, cache } = state
  if (session.queue[0] === request) session.queue.shift()
  if (request.cancelled) return false
  state.inProgress = request
  state.turnAt = now
  state.servedAt = now
  state.served++
  const turn: Turn = {
    values: new Map(request.slices.map((name) => [name, cache.get(name) ?? Option.none()])),
    fence: state.fence
  }
  // a plain function is decided here and now: its caller waits for the outcome alone
  if (request.decideNow !== undefined) request.done.done(Exit.succeed(request.decideNow(turn)))
  else request.turn.done(Exit.succeed(turn))
  return true
}

/** What the caller decided, taken into the hold: its writes, and its acknowledgement (now, or once written). */
const record = (state: HoldState, request: Request, outcome: Outcome, now: number) => {
  const heldMs = now - state.turnAt
  if (heldMs > state.env.warnMs) state.longHolds.push([request, heldMs])
  if (outcome._tag === "Abort") return unwritten(state, request)
  for (const [name, value] of outcome.writes) {
    state.cache.set(name, Option.some(value))
    state.dirty.set(name, value)
  }
  // a batch (the oplock off) acknowledges a modification once it is written
  if ((state.mode === "lease" || state.mode === "quantum") && !state.env.durable) request.ack.done(Exit.void)
  else state.unacked.push(request)
}

/**
 * A modification that writes nothing, acknowledged: at once, or, when it read a slice the
 * hold owes a write of while writes wait for their acknowledgement, with them, by the group
 * commit that makes them. `dirty` holds every write not yet made, those of `unacked` among
 * them (a group commit takes both at once), so a modification that read none of its slices
 * (`Lock.withLock` reads none) read nothing unacknowledged and does not wait.
 *
 * @internal
 */
export const unwritten = (state: HoldState, request: Request) => {
  if (state.unacked.length > 0 && readsDirty(state, request)) state.unacked.push(request)
  else request.ack.done(Exit.void)
}

const readsDirty = (state: HoldState, request: Request): boolean => {
  for (const name of request.slices) if (state.dirty.has(name)) return true
  return false
}

/**
 * The next request the relay may give its turn to at once, without the fiber: the
 * conditions under which the serving loop would serve it from memory straight away.
 * `undefined` when the loop has something else to do first (a signal to read, a write
 * or a turn of the event loop due, the deadline, a slice to read, nothing queued).
 */
const relayNext = (state: HoldState, now: number): Request | undefined => {
  const { env, session, mode } = state
  if (state.failed !== undefined || mode === "single") return undefined
  const leased = mode === "lease" || mode === "batch"
  if (leased && !state.contended && (session.signals?.size ?? 0) > 0) return undefined
  if (now - state.ioAt >= env.yieldMs || now >= state.deadline) return undefined
  const request = nextRequest(state)
  if (request === undefined || (leased && !state.watching)) return undefined
  for (const name of request.slices) if (!state.cache.has(name)) return undefined
  return request
}

/**
 * A relay of turns: the caller whose turn ends hands the grant to the next request queued
 * here, in its own call stack (`OneShot.listen`), with no step of the hold's fiber in
 * between; a request decided at once (`decideNow`) hands it on in the same loop. The
 * fiber, waiting on `relayEnd`, resumes once the relay can go no further (`false` when
 * that is at once). An interrupted fiber ends the relay first (`finish` takes the turn in
 * progress over).
 */
export const relay = (state: HoldState, first: Request, now: number): boolean => {
  let request: Request | undefined = first
  let at = now
  while (request !== undefined) {
    if (giveTurn(state, request, at)) {
      const decided = request.done.poll()
      if (decided === undefined) {
        listenForTurnEnd(state, request)
        return true
      }
      state.inProgress = undefined
      at = fineMillis(state.clock)
      if (Exit.isSuccess(decided)) record(state, request, decided.value, at)
    }
    request = relayNext(state, at)
  }
  return false
}

const listenForTurnEnd = (state: HoldState, request: Request) =>
  request.done.listen((exit) => {
    const end = state.relayEnd
    if (state.inProgress !== request || end === undefined) return
    state.inProgress = undefined
    const at = fineMillis(state.clock)
    if (Exit.isSuccess(exit)) record(state, request, exit.value, at)
    const next = relayNext(state, at)
    if (next === undefined || !relay(state, next, at)) end.done(Exit.void)
  })

/**
 * The hold of this worker's lease on the session's token, when a plain modification may be
 * made under its grant by its caller, in one step of the store (`caller.inStep`), with no
 * step of the hold's fiber: the hold idle (its serving loop waiting for something to do, or
 * parked), with nothing queued, in progress or left to write, no signal to read, no
 * contention, and before its deadline. Made so, the modification is what the loop would
 * have served next, and the store holds what the hold's cache holds.
 *
 * @internal
 */
export const idleLease = (session: Session): HoldState | ParkedLease | undefined => {
  const state = session.lease
  if (state === undefined) return undefined
  if (state instanceof ParkedLease) {
    if (session.parked !== state || state.dirty || (session.signals?.size ?? 0) > 0) return undefined
    if (fineMillis(state.clock) >= state.deadline) return undefined
    prune(session)
    return session.queue.length === 0 && session.own === undefined ? state : undefined
  }
  if (state.idleSince === undefined) return undefined
  // the hold's deadline is on the hold's clock
  const now = fineMillis(state.clock)
  if (state.failed !== undefined || state.contended || state.inProgress !== undefined || state.relayEnd !== undefined) {
    return undefined
  }
  if (state.unacked.length > 0 || state.dirty.size > 0 || (session.signals?.size ?? 0) > 0 || now >= state.deadline) {
    return undefined
  }
  prune(session)
  return session.queue.length === 0 && session.own === undefined ? state : undefined
}

/**
 * A modification made under an idle lease's grant, in the store's step (`idleLease`): its
 * reads and writes taken into the hold's cache (in the step itself, so that nothing sees the
 * store and the cache apart), and counted as served; the idle wait goes on as from now, so a
 * busy lease does not park.
 *
 * @internal
 */
export const servedInStep = (
  state: HoldState | ParkedLease,
  slices: ReadonlyArray<string>,
  values: ReadonlyArray<Option.Option<string>>,
  writes: ReadonlyArray<readonly [string, string]>,
  now: number
) => {
  if (state instanceof ParkedLease) {
    const parked = state.slices
    for (let i = 0; i < slices.length; i++) {
      if (state.indexOf(slices[i]!) < 0) parked.push(slices[i]!, Option.getOrUndefined(values[i]!), false)
    }
    for (const [name, value] of writes) {
      const i = state.indexOf(name)
      if (i < 0) parked.push(name, value, false)
      else parked[i + 1] = value
    }
    state.served++
    state.servedAt = now
    return
  }
  const { cache } = state
  for (let i = 0; i < slices.length; i++) if (!cache.has(slices[i]!)) cache.set(slices[i]!, values[i]!)
  for (const [name, value] of writes) cache.set(name, Option.some(value))
  state.served++
  state.servedAt = now
  if (state.idleSince !== undefined) state.idleSince = now
}
