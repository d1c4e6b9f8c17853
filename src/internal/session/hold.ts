/**
 * Holding a grant: serving the session's turns under it (one, a quantum's worth, or a
 * lease's), watching for another instance's contention, keeping the lock from expiring,
 * writing the modifications served (group commits), then the last write and the release.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import { type InvalidInput, LockLost, type StoreError } from "../../StoreError.js"
import type { Request } from "../lease.js"
import type { Grant, Previous } from "../lock/service.js"
import { OneShot } from "../oneShot.js"
import * as Retry from "../retry.js"
import { currentFineMillis, fineMillis, type Wheel } from "../timers.js"
import { commitAndRelease, failAcks, modeOf, noTurn, orDefect, succeedAcks, warnHeld } from "./commit.js"
import type { CommitLine } from "./commitLine.js"
import { flushes, flushFailures, leasesBroken, leasesParked, leasesStarted } from "./metrics.js"
import {
  type HoldState,
  type KeepAlive,
  nextRequest,
  ParkedLease,
  parkedSlices,
  relay,
  unparkedSlices,
  unwritten
} from "./relay.js"
import { notify, openSignals, type Session, type SessionEnv, turnEventLoop, withholdLease } from "./session.js"

/**
 * A modification its caller ran under the grant in its own fiber (`Lease.complete`), left
 * to the hold to write with the ones queued behind it: its writes, and its request to
 * acknowledge once they are written.
 *
 * @internal
 */
export interface Carried {
  readonly writes: ReadonlyArray<readonly [name: string, value: string]>
  readonly request: Request
}

/**
 * Hold a grant: serve turns (one, a quantum's worth, or a lease's), then commit and release.
 *
 * @internal
 */
export const hold = (
  env: SessionEnv,
  session: Session,
  grant: Grant,
  carried?: Carried
): Effect.Effect<Previous | Parking> =>
  Effect.gen(function* () {
    const { token, lockId } = grant
    const mode = modeOf(env, grant)
    const cache = new Map(grant.values)
    for (const [name, value] of carried?.writes ?? []) cache.set(name, Option.some(value))
    const state: HoldState = {
      env,
      session,
      fence: grant.fence,
      claim: grant.handedOver === true ? grant.fence : undefined,
      token,
      lockId,
      mode,
      cache,
      dirty: new Map<string, string>(carried?.writes ?? []),
      unacked: carried === undefined ? [] : [carried.request],
      inProgress: undefined,
      served: carried === undefined ? 0 : 1,
      servedAt: Number.NEGATIVE_INFINITY,
      // a lock handed over lives the hand-off timeout from its release, before the grant:
      // nothing is known of it until its first extension (till then `claim` bars a renewal)
      confirmedUntil: grant.handedOver === true ? grant.grantedAt : grant.grantedAt + env.lockMs,
      deadline:
        mode === "batch" && grant.contenders === 0
          ? Number.POSITIVE_INFINITY
          : grant.grantedAt +
            (mode === "lease" ? env.holdMs : mode === "quantum" || mode === "batch" ? env.quantumMs : 0),
      writeMs: 0,
      contended: mode === "batch" ? grant.contenders > 0 : mode !== "lease",
      failed: undefined,
      timer: undefined,
      watching: session.signals !== undefined,
      keeper: undefined,
      clock: yield* Clock.Clock,
      ioAt: grant.grantedAt,
      turnAt: 0,
      relayEnd: undefined,
      longHolds: [],
      parkDue: false,
      parkTimer: undefined,
      idleSince: undefined
    }
    // a batch that nobody contends lasts as long as modifications queue here; a lock handed
    // over lives for the hand-off timeout until extended, whatever the hold
    state.keeper =
      mode === "lease" || mode === "batch" || grant.handedOver === true
        ? yield* keepAlive(state, grant.handedOver === true ? env.handoffMs : env.lockMs)
        : undefined

    return yield* serveThenFinish(state, false)
  })

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
 * Serve, then finish (unless the serving parked). The session's fiber is uninterruptible
 * (see `start`): only the serving is interrupted.
 */
const serveThenFinish = (state: HoldState, resumed: boolean): Effect.Effect<Previous | Parking> =>
  Effect.flatMap(
    Effect.exit(Effect.interruptible(serve(state, resumed))),
    (served): Effect.Effect<Previous | Parking> =>
      Exit.isSuccess(served) && served.value === parking ? Effect.succeed(parking) : finish(state)
  )

/**
 * Go on with a parked hold, in the fiber that resumed it: the hold is built again from what
 * the lease kept (its keep-alive extends when it was to, not a third of the lock
 * expiration from now).
 *
 * @internal
 */
export const resumeHold = (parked: ParkedLease): Effect.Effect<Previous | Parking> =>
  Effect.suspend(() => {
    const { env, session } = parked
    const { cache, dirty } = unparkedSlices(parked)
    const now = fineMillis(parked.clock)
    const state: HoldState = {
      env,
      session,
      fence: parked.fence,
      claim: parked.claim,
      token: session.token,
      lockId: parked.lockId,
      mode: "lease",
      cache,
      dirty,
      unacked: [],
      inProgress: undefined,
      served: parked.served,
      servedAt: parked.servedAt,
      confirmedUntil: parked.confirmedUntil,
      deadline: parked.deadline,
      writeMs: parked.writeMs,
      contended: false,
      failed: undefined,
      timer: undefined,
      watching: session.signals !== undefined,
      keeper: undefined,
      clock: parked.clock,
      // parked, the worker's event loop ran freely: what arrived meanwhile has been read
      ioAt: now,
      turnAt: 0,
      relayEnd: undefined,
      longHolds: [],
      parkDue: false,
      parkTimer: undefined,
      idleSince: undefined
    }
    state.keeper = keepAliveOn(state, parked.wheel, parked.extendAt)
    session.lease = state
    return serveThenFinish(state, true)
  })

/**
 * Wakes the serving loop once the clock reads the deadline (an entry of the worker's
 * timers, which run nothing before the clock reads their time); armed again when the
 * deadline moves earlier.
 */
const armTimer = (state: HoldState) =>
  Effect.flatMap(state.env.timers.wheel, (wheel) =>
    Effect.sync(() => {
      state.timer?.()
      // Gone once it ran: a wake-up that finds the deadline not yet reached arms it again.
      state.timer = wheel.after(Math.max(0, state.deadline - fineMillis(state.clock)), () => {
        state.timer = undefined
        notify(state.session)
      })
    })
  )

const contend = (state: HoldState) =>
  Effect.flatMap(currentFineMillis, (now) =>
    Effect.suspend(() => {
      if (state.contended) return Effect.void
      state.contended = true
      state.deadline = Math.min(state.deadline, now + state.env.quantumMs)
      return Effect.andThen(Metric.update(leasesBroken, 1), armTimer(state))
    })
  )

/**
 * A lease is told of contention by notices. Subscribed before the attempt that
 * granted it, it needs nothing more: the grant counted the workers queued before it,
 * and every later enqueue is a `Contended` notice on that subscription. A lease
 * granted first subscribes now and then asks the store once, for the workers queued
 * in between; it does so once the requests queued at its grant are served, or
 * before a second one, so that the first is not kept waiting for it.
 */
const watchContention = (state: HoldState) =>
  Effect.gen(function* () {
    state.watching = true
    const events = yield* openSignals(state.env, state.session)
    // what came before the check is covered by it
    events.take()
    if ((yield* state.env.store.queueLength(state.token, state.env.instanceId)) > 0) yield* contend(state)
  })

/** After a resubscription a contender may have queued unseen: ask the store. */
const recheckContenders = (state: HoldState) =>
  Effect.flatMap(
    Effect.orElseSucceed(state.env.store.queueLength(state.token, state.env.instanceId), () => 1),
    (n) => (n > 0 ? contend(state) : Effect.void)
  )

/** Between two modifications: has another worker queued meanwhile? */
const checkSignals = (state: HoldState) =>
  Effect.suspend(() => {
    const events = state.session.signals
    if (events === undefined || state.contended) return Effect.void
    let resubscribed = false
    for (const event of events.take()) {
      // notices reach this worker only: a `Contended` one says another worker queued
      if (event._tag === "Contended") return contend(state)
      if (event._tag === "Resubscribed") resubscribed = true
    }
    return resubscribed ? recheckContenders(state) : Effect.void
  })

/**
 * When a keep-alive extends next, given the outcome of an extension: `every` after one that
 * succeeded, `again` (sooner) after one that failed (the store away for a moment), and
 * never after the store said the lock is no longer ours: the schedule is done.
 */
const cadence = (every: number, again: number): Schedule.Schedule<undefined, Result.Result<boolean, unknown>> =>
  Schedule.fromStep(
    Effect.succeed((_now: number, extended: Result.Result<boolean, unknown>) =>
      Result.isSuccess(extended) && !extended.success
        ? Cause.done()
        : Effect.succeed<[undefined, Duration.Duration]>([
            undefined,
            Duration.millis(Result.isSuccess(extended) ? every : again)
          ])
    )
  )

/**
 * Keeps the lock from expiring under a slow modification: an extension every third of
 * the lock expiration, from the worker's timers, on the grid of `onGrid`. A lease's hold
 * time is shorter than the lock expiration, so an idle lease extends at most twice; one
 * renewed (`renew`) goes on, and every extension the store confirms moves the hold's
 * `confirmedUntil` (the extension's send time plus a lock expiration), within which alone
 * a lease is renewed. An extension that fails (the store away for a moment) is tried again
 * sooner, until one succeeds; the store saying the lock is no longer ours (it expired, or
 * another worker took it after a failover lost it) ends the keep-alive and fails the hold
 * (`failed`): it serves nothing more, and writes nothing. An extension still under way
 * when it stops is harmless: it extends only a lock this grant holds, and lock ids are
 * unique.
 *
 * The delays are `cadence`'s, a `Schedule`; its waits are entries of the worker's timers,
 * not a fiber sleeping beside every held lease, and its driver is made at the first
 * extension, so a hold shorter than a third of the lock expiration costs none.
 */
const keepAlive = (state: HoldState, ttlMs: number): Effect.Effect<KeepAlive> =>
  Effect.map(state.env.timers.wheel, (timers) =>
    keepAliveOn(state, timers, timers.now() + Math.max(1, Math.min(everyOf(state.env), Math.floor(ttlMs / 3))))
  )

const everyOf = (env: HoldState["env"]) => Math.max(1, Math.floor(env.lockMs / 3))

/**
 * When an extension due at `due` is made: at the grid line of a tenth of the extension
 * period at or before it, if that is still to come. The extensions of the many leases a worker
 * holds then come due in the same turn of its timers and leave back to back, instead of
 * one round trip each at scattered times; made earlier, never later, than due.
 */
const onGrid = (every: number, now: number, due: number): number => {
  if (due === Number.POSITIVE_INFINITY) return due
  const grid = Math.max(1, Math.floor(every / 10))
  const aligned = Math.floor(due / grid) * grid
  // due sooner than the grid allows (a lock handed over extends within a third of the
  // hand-off timeout): when due
  return aligned <= now ? due : aligned
}

/** `firstAt`: when the first extension comes (the wheel's time; never when infinite). */
const keepAliveOn = (state: HoldState, timers: Wheel, firstAt: number): KeepAlive => {
  const { store } = state.env
  const every = everyOf(state.env)
  const again = Math.max(1, Math.floor(every / 4))
  let stopped = false
  let cancel: () => void = () => undefined
  // when the next extension comes; `undefined` while one is under way
  let nextAt: number | undefined = Number.POSITIVE_INFINITY
  let retry: Retry.Retry<Result.Result<boolean, unknown>, never> | undefined
  const extendOnce = Effect.gen(function* () {
    const sentAt = fineMillis(state.clock)
    // the slices read under this lock, and the fence, live as long as it is held
    const extended = yield* Effect.result(
      store.extend(state.token, state.lockId, [...state.cache.keys()], { claim: state.claim })
    )
    if (Result.isSuccess(extended)) {
      if (extended.success) {
        // extended: the lock lives a full lock expiration from the send, no longer the hand-off's
        state.claim = undefined
        state.confirmedUntil = Math.max(state.confirmedUntil, sentAt + state.env.lockMs)
      } else if (!stopped && state.failed === undefined) lost(state)
    }
    retry ??= yield* Retry.driver(cadence(every, again))
    const delay = yield* retry.next(extended)
    nextAt = Number.POSITIVE_INFINITY
    if (!stopped && Option.isSome(delay)) schedule(timers.now() + Duration.toMillis(delay.value))
  }).pipe(
    Effect.onExit(() =>
      Effect.sync(() => {
        nextAt ??= Number.POSITIVE_INFINITY
      })
    )
  )
  const schedule = (due: number) => {
    const at = onGrid(every, timers.now(), due)
    nextAt = at
    cancel = timers.at(at, () => {
      if (stopped) return undefined
      nextAt = undefined
      return extendOnce
    })
  }
  if (firstAt !== Number.POSITIVE_INFINITY) schedule(firstAt)
  return {
    stop: () => {
      stopped = true
      cancel()
    },
    next: () => nextAt
  }
}

/** The store said the lock is no longer ours: the hold fails, and its serving loop is woken to end. */
const lost = (state: HoldState) => {
  state.failed = new LockLost({ token: state.token, lockId: state.lockId, holder: Option.none() })
  notify(state.session)
}

/** `effect` with a keep-alive for as long as it runs. */
const withKeepAlive = <A>(state: HoldState, ttlMs: number, effect: Effect.Effect<A>) =>
  Effect.acquireUseRelease(
    keepAlive(state, ttlMs),
    () => effect,
    (keeper) => Effect.sync(keeper.stop)
  )

/** Serve `request` and, through the relay, the requests queued behind it that memory can serve. */
const serveFrom = (state: HoldState, request: Request): Effect.Effect<void, InvalidInput | StoreError> =>
  // Steps chained by hand, not `Effect.gen`: every leased modification makes one.
  Effect.suspend(() => {
    const { env, token, cache } = state
    const missing = request.slices.filter((name) => !cache.has(name))
    const served = Effect.suspend(() => {
      const end = new OneShot<void>()
      state.relayEnd = end
      const relayed = relay(state, request, fineMillis(state.clock))
      return relayed
        ? Effect.andThen(
            end.await,
            Effect.suspend(() => afterRelay(state))
          )
        : afterRelay(state)
    })
    if (missing.length === 0) return served
    // Fetched under the lock this worker holds: as current as the grant's reads.
    return Effect.andThen(
      Effect.map(env.store.readSlices(token, missing), (values) => {
        for (const [i, name] of missing.entries()) cache.set(name, values[i] ?? Option.none())
      }),
      served
    )
  })

/** The relay has ended: the warnings of the modifications that held the lock too long in it. */
const afterRelay = (state: HoldState): Effect.Effect<void> => {
  state.relayEnd = undefined
  const longHolds = state.longHolds
  if (longHolds.length === 0) return Effect.void
  state.longHolds = []
  return Effect.forEach(longHolds, ([held, heldMs]) => warnHeld(state.env, state.token, held.event, heldMs), {
    discard: true
  })
}

/**
 * Group commit: one write for every modification served since the last one (`false`: nothing to write).
 *
 * Uninterruptible: the batch leaves `unacked` before its write, and only the write's outcome
 * acknowledges or fails it. Called from the serving loop, which a closing worker interrupts:
 * an interruption during the write would drop the batch, and its callers, decided, would wait
 * for their acknowledgements for ever. The write is bounded (the command timeout; a closed
 * store fails at once), and `finish` would make it anyway.
 */
const flush = (state: HoldState): Effect.Effect<boolean> =>
  // Steps chained by hand, not `Effect.gen`: a leased modification written alone makes one.
  Effect.uninterruptible(
    Effect.suspend(() => {
      const { env, token, lockId, dirty, clock } = state
      if (state.unacked.length === 0) return Effect.succeed(false)
      const batch = state.unacked
      state.unacked = []
      const entries = [...dirty.entries()]
      dirty.clear()
      let started = fineMillis(clock)
      const write = Effect.suspend(() => {
        started = fineMillis(clock)
        return env.store.writeIfHolder(token, lockId, entries, { claim: state.claim })
      })
      // an uncontended lease's commit meets the worker's others at the commit line (nobody waits for its lock)
      const line = env.commitLine
      const written =
        line === undefined || state.mode !== "lease" || state.contended
          ? write
          : Effect.andThen(atLine(state, line), write)
      return Effect.matchEffect(written, {
        onSuccess: () => {
          state.writeMs = fineMillis(clock) - started
          return Effect.map(Metric.update(flushes, 1), () => {
            succeedAcks(batch)
            return true
          })
        },
        onFailure: orDefect((error) => {
          state.writeMs = fineMillis(clock) - started
          // The lock is lost or the store is away: this lease writes nothing more.
          return Metric.update(flushFailures, 1).pipe(
            Effect.andThen(
              Effect.logWarning(`writing the leased modifications of token ${token} failed: ${error.message}`)
            ),
            Effect.map(() => {
              state.failed = error
              failAcks(env, batch, lockId, error)
              return true
            })
          )
        })
      })
    })
  )

/**
 * Wait for the commit line, unless the lease is contended meanwhile: a contender's notice
 * (or the lock lost) ends the wait at once, so that contention still ends the lease within
 * the quantum. Any other change (a modification queued here) is looked at and the wait
 * goes on.
 */
const atLine = (state: HoldState, line: CommitLine): Effect.Effect<void> =>
  Effect.flatMap(checkSignals(state), () =>
    state.contended || state.failed !== undefined
      ? Effect.void
      : Effect.flatMap(
          Effect.suspend(() => line.next(state.session.changed)),
          (reached): Effect.Effect<void> => (reached ? Effect.void : atLine(state, line))
        )
  )

const serve = (state: HoldState, resumed: boolean) =>
  Effect.gen(function* () {
    const { env, session, mode } = state
    const lookForContenders = checkSignals(state)
    if (mode === "lease" && !resumed) {
      yield* Metric.update(leasesStarted, 1)
      session.lease = state
    }
    // parked, the worker's event loop ran freely: what arrived meanwhile has been read
    if (resumed) state.ioAt = fineMillis(state.clock)
    // whether the queue was found empty and one turn of the event loop given for callers to queue again
    let lingered = false
    while (state.failed === undefined) {
      if (mode === "single" && state.served > 0) return
      // Looked for before every modification: a busy local queue never waits for a signal.
      if (mode === "lease" || mode === "batch") yield* lookForContenders
      // Taken before the queue is read: an arrival after the read completes it.
      const changed = session.changed
      const now = fineMillis(state.clock)
      // Served from memory alone, a busy local loop runs on microtasks and the event
      // loop never turns: the socket that brings a contender's signal is not read, and
      // timers do not fire. A turn of the event loop at least every quantum bounds that.
      // A batch writes what it served at least every quantum: its acknowledgements wait for it.
      if (mode === "batch" && state.unacked.length > 0 && now - state.ioAt >= env.yieldMs) {
        yield* flush(state)
        state.ioAt = fineMillis(state.clock)
        continue
      }
      if (mode !== "single" && now - state.ioAt >= env.yieldMs) {
        yield* turnEventLoop
        state.ioAt = fineMillis(state.clock)
        continue
      }
      // Past the deadline nothing more is served, however full the queue: a busy
      // local loop must not keep a remote waiter out. `finish` writes in one step.
      if (state.served > 0 && now >= state.deadline && !(yield* renew(state, now))) return
      const request = nextRequest(state)
      if (request !== undefined && (mode === "lease" || mode === "batch") && !state.watching && state.served > 0) {
        yield* watchContention(state)
        continue
      }
      if (request !== undefined) {
        lingered = false
        yield* serveFrom(state, request)
        continue
      }
      if (now >= state.deadline && !(yield* renew(state, now))) return
      if (mode === "batch" || state.contended) {
        // Nothing queued here, and the modifications served wait for their write. Written
        // now under the grant kept, they are acknowledged, and their callers usually queue
        // their next modification at once (a loop, a burst of events): one turn of the
        // event loop lets them, and the grant serves those too (within the quantum once
        // another worker waits) instead of a release and a hand-off per round.
        // A caller that does not come back costs the grant one write more before its
        // release. While another worker waits, only a write that ends before the deadline
        // (as long as the last one took) is made: the wait of the worker behind stays
        // within the quantum and the last write's release.
        // With nothing to write (acknowledged from memory), the turn is given all the same:
        // the callers acknowledged at once queue their next modification within it.
        // (a grant that served nothing, its only request gone, owes its callers no turn)
        if (lingered || (state.unacked.length === 0 && state.served === 0)) return
        if (state.unacked.length > 0) {
          if (state.contended && now + state.writeMs >= state.deadline) return
          yield* flush(state)
          if (state.failed !== undefined) return
        }
        lingered = true
        yield* turnEventLoop
        state.ioAt = fineMillis(state.clock)
        continue
      }
      if (env.durable && (yield* flush(state))) state.ioAt = fineMillis(state.clock)
      // a failed write ends the lease at once: it can write nothing more
      if (state.failed !== undefined) return
      if (mode === "lease" && !state.watching) {
        yield* watchContention(state)
        continue
      }
      // woken by a modification, a signal, or the deadline
      if (state.timer === undefined) yield* armTimer(state)
      if (mode === "lease") {
        // An idle lease parks (its fiber ends) once it was woken by nothing but its park timer.
        if (yield* park(state, changed)) {
          yield* Metric.update(leasesParked, 1)
          return parking
        }
        state.idleSince = fineMillis(state.clock)
        if (state.parkTimer === undefined) yield* armPark(state)
      }
      yield* changed.await
      state.idleSince = undefined
    }
  })

/**
 * At its deadline, a lease that nobody contends and that served a modification in the last
 * half of its hold time is held for another `leaseHoldTime` instead of released: its
 * keep-alive goes on extending the lock. A release there would cost the token a write and a
 * hand-off, and its next modification a grant and a look for contenders, for nothing. A
 * lease that served nothing lately ends at its deadline as before: the worker keeps the
 * tokens in use, not every token it once served.
 *
 * The invariant of a lease: it serves only before its deadline, and its deadline is within
 * its lock's life. The first is the grant's plus `leaseHoldTime`, less than
 * `lockExpiration` (a lock handed over that lapsed before its first extension is taken back
 * by its claim, or its writes fail). A renewed one is never past the lock's confirmed life
 * less a margin (`confirmedUntil - marginOf`): a renewal is made only while the lock is
 * known to be ours (no claim of a lock handed over pending, the grant or an extension the
 * store confirmed recent enough), and its new deadline is cut at that bound, or it is not
 * made. A lock lost without a notice (a failover that dropped it, a stall past its
 * expiration) or extensions that fail (the store away) end a lease by then; the keep-alive's
 * next extension, answered "not ours", ends it sooner.
 *
 * And only when no other worker is queued for the token, as the store says (one request
 * per hold time of a busy lease): contention is told by notices, and a holder whose
 * subscription is broken unseen would otherwise keep the lock for ever from a waiter whose
 * every attempt it misses.
 */
const renew = (state: HoldState, now: number): Effect.Effect<boolean> => {
  const { env } = state
  if (state.mode !== "lease" || state.contended || state.failed !== undefined || state.claim !== undefined) {
    return Effect.succeed(false)
  }
  if (now - state.servedAt > env.holdMs / 2 || state.confirmedUntil - marginOf(env) <= now) return Effect.succeed(false)
  return Effect.map(
    Effect.orElseSucceed(env.store.queueLength(state.token, env.instanceId), () => 1),
    (queued) => {
      const at = fineMillis(state.clock)
      const until = Math.min(at + env.holdMs, state.confirmedUntil - marginOf(env))
      if (queued > 0 || state.failed !== undefined || until <= at) return false
      state.deadline = until
      return true
    }
  )
}

/**
 * What a renewed lease keeps clear of its lock's confirmed life: the round trip of the
 * reply that confirmed it (the grant's is counted from its reply), a modification under way
 * at the deadline, the final write and release, and the clocks' drift.
 */
const marginOf = (env: HoldState["env"]) => Math.max(1, Math.floor(env.lockMs / 10))

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
 */
const park = (state: HoldState, changed: OneShot<void>) =>
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

/** Whatever ended the hold: finish the modification in progress, write, release. */
export const finish = (state: HoldState) =>
  Effect.gen(function* () {
    const { env, session, token, lockId, dirty } = state
    session.lease = undefined
    // another worker wanted the token before this lease served a second modification
    if (state.mode === "lease" && state.contended && state.served <= 1)
      withholdLease(env, token, fineMillis(state.clock))
    // the relay ends here: the turn in progress, if any, is taken over below
    state.relayEnd = undefined
    state.timer?.()
    state.timer = undefined
    // an interrupted wait did not cancel it (the serving loop does after a wait it finishes)
    state.parkTimer?.()
    state.parkTimer = undefined
    if (state.inProgress !== undefined) {
      const inProgress = state.inProgress
      const outcome = yield* state.keeper === undefined
        ? withKeepAlive(state, env.lockMs, inProgress.done.await)
        : inProgress.done.await
      if (outcome._tag === "Commit") {
        for (const [name, value] of outcome.writes) dirty.set(name, value)
        state.unacked.push(inProgress)
      } else unwritten(state, inProgress)
      state.inProgress = undefined
    }
    state.keeper?.stop()
    if (state.failed !== undefined) {
      // The lock is lost or the store is away: nothing more is written; release what may remain.
      failAcks(env, state.unacked, lockId, state.failed)
      yield* Effect.ignore(env.store.releaseQueued(token, lockId, { instanceId: env.instanceId }))
      return noTurn
    }
    return yield* commitAndRelease(
      env,
      session,
      lockId,
      [...dirty.entries()],
      state.unacked,
      [...state.cache.keys()],
      state.claim
    )
  })
