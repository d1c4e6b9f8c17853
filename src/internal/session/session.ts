/**
 * A token's session on this worker (its local queue of modifications, its signal
 * subscription, its lease) and the environment every part of the session machinery
 * shares: the services and the numbers derived from the configuration, built once by
 * `Lease.make`. The helpers here take that environment explicitly rather than closing
 * over `make`'s locals.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { LockExpired } from "../../StateError.js"
import type { SliceEntry, Store } from "../../Store.js"
import type { AcknowledgedError, InvalidInput, StoreError } from "../../StoreError.js"
import type { Turn } from "../lease.js"
import type { Engine, Grant, LocalQueue, SignalInbox } from "../lock/service.js"
import { OneShot } from "../oneShot.js"
import type { SignalEvent, Signals } from "../signals.js"
import { preciseMillis, type Timers } from "../timers.js"
import type { CommitLine } from "./commitLine.js"
import type { HoldState } from "./holdState.js"
import type { ParkedLease } from "./parking.js"
import type { TokenMarks } from "./tokenMarks.js"

/**
 * What the session machinery of one `Lease` service shares.
 *
 * @internal
 */
export interface SessionEnv {
  readonly store: Store.Service
  readonly lock: Engine
  readonly signals: Signals.Service
  readonly instanceId: string
  /** The tokens with a session on this worker. */
  readonly sessions: Map<string, Session>
  /** Deadlines and keep-alives of the holds, served by one fiber. */
  readonly timers: Timers
  /** The service's scope: session fibers are forked in it. */
  readonly scope: Scope.Scope
  readonly lockMs: number
  /** How long a pending grant waits for its claim. */
  readonly handoffMs: number
  readonly holdMs: number
  readonly quantumMs: number
  /** How often a busy local loop lets the event loop turn (at least 1 ms). */
  readonly yieldMs: number
  readonly warnMs: number
  /** Leased modifications are acknowledged once written (`leaseDurability: "batch"`). */
  readonly durable: boolean
  /** What an uncontended lease's group commit waits for (`leaseCommitWindow`); `undefined` for nothing. */
  readonly commitLine: CommitLine | undefined
  readonly oplock: boolean
  /**
   * How long an idle lease's hold waits for something to do before it parks: its fiber
   * ends, and the lease is its state alone until something wakes it (`notify`).
   */
  readonly parkMs: number
  /** Continue a parked hold in a new session fiber (`notify` calls it). */
  readonly resume: (session: Session, parked: ParkedLease) => void
  /** The modifications made in one step of the store since the last yield after one (`modify.ts`). */
  readonly inStep: { made: number }
  /** The clock of the fiber that built the worker: what a step of the store's own grant times a decision with (`modify.ts`). */
  readonly clock: Clock.Clock
  /** The tokens whose lease this worker gave up unused (`withholdLease`), until when. */
  readonly withheld: TokenMarks
  /**
   * The tokens whose callers came back at once here (within a grant's linger, or just after
   * a contended grant that did not linger), for `holdMs` from the last time (`idle.ts`): a
   * contended grant of one of them that served one modification lingers for them.
   */
  readonly returning: TokenMarks
  /** The tokens whose contended grant here just ended without lingering, for `comebackMs` (`idle.ts`). */
  readonly released: TokenMarks
}

/**
 * A lease given up to another worker before it served a second modification saved nothing
 * and cost a hand-off each way: the callers of that token move between workers (API calls
 * spread over a cluster, say). For `holdMs` this worker does not lease the token again; its
 * modifications of it run as with the oplock off (a grant each, or a batch of the ones that
 * queue here), so another worker's next modification finds the lock free instead of breaking
 * a lease. A lease that served more (a socket's burst of events) is taken again as before.
 *
 * @internal
 */
export const withholdLease = (env: SessionEnv, token: string, now: number) => {
  // an entry lives `holdMs`; a worker giving up thousands of leases at once (another worker
  // contending on all of them) sweeps the marks a few times, not at each
  env.withheld.mark(token, now, now + env.holdMs)
}

/**
 * Whether this worker leases `token` now: the oplock is on and no lease of the token was
 * given up unused in the last `holdMs`.
 *
 * @internal
 */
export const leases = (env: SessionEnv, token: string): boolean => {
  if (!env.oplock) return false
  return env.withheld.size === 0 || !env.withheld.has(token, preciseMillis(env.clock))
}

/**
 * What a modification's decision hands the session: the slices whose encoding changed, or
 * nothing to write.
 *
 * @internal
 */
export type Outcome =
  | { readonly _tag: "Commit"; readonly writes: ReadonlyArray<SliceEntry> }
  | { readonly _tag: "Abort" }

/**
 * A modification queued on a token's session, or under a grant its caller holds
 * (`modify.ts`).
 *
 * @internal
 */
export interface Request {
  readonly slices: ReadonlyArray<string>
  readonly event: Option.Option<string>
  /** Completed by the session when the turn comes, or failed when it cannot come. */
  readonly turn: OneShot<Turn, InvalidInput | AcknowledgedError>
  /** Completed once the modification is decided. */
  readonly done: OneShot<Outcome>
  /**
   * A modification decided by a plain function: the session decides it itself when its
   * turn comes, in the step that gives the turn, instead of completing `turn` and waiting
   * for the caller's fiber to run. It completes nothing.
   */
  readonly decideOnTurn: ((turn: Turn) => Outcome) | undefined
  /**
   * Completed by the session once the outcome is durable (or failed). A turn that writes
   * nothing is acknowledged at once, or, when it may have read writes of its session not yet
   * acknowledged, with them (failed if they fail). A turn under the caller's own grant is
   * acknowledged by its write (`caller.complete`).
   */
  readonly ack: OneShot<void, LockExpired | AcknowledgedError>
  cancelled: boolean
}

/** @internal */
export interface Session {
  readonly token: string
  readonly queue: Array<Request>
  /** Completed (and renewed) at every change: a request queued or cancelled, a signal received, a wake. */
  changed: OneShot<void>
  /** Ends the session's listening to the token's signals; called when the session ends. */
  unlisten: (() => void) | undefined
  signals: Inbox | undefined
  /** The lease's hold, running or waiting; or, parked, what is left of it. */
  lease: HoldState | ParkedLease | undefined
  /** The grant a caller holds in its own fiber (`begin`); its turn began at the grant. */
  callerGrant: Grant | undefined
  /**
   * A lease's hold with no fiber: parked once it was idle for `parkMs`, it keeps the lock
   * (its record is the timer of its deadline and next extension) and goes on in a new
   * fiber at the next change.
   */
  parked: ParkedLease | undefined
}

/**
 * Let the event loop turn once: the I/O that arrived meanwhile (a contender's signal) is
 * read before this resumes. `Effect.sleep(0)` would do it too, but as a timer it waits at
 * least 1 ms, and a hold that was idle pays it on its first step after waking.
 *
 * @internal
 */
export const turnEventLoop: Effect.Effect<void> = Effect.callback<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

/** @internal */
export const notify = (session: Session) => {
  const current = session.changed
  session.changed = new OneShot<void>()
  current.done(Exit.void)
  const parked = session.parked
  if (parked !== undefined) {
    parked.unpark()
    parked.env.resume(session, parked)
  }
}

/** @internal */
export const prune = (session: Session) => {
  let i = 0
  while (i < session.queue.length) {
    if (session.queue[i]!.cancelled) session.queue.splice(i, 1)
    else i++
  }
}

/** @internal */
export const newSession = (env: SessionEnv, token: string): Session => {
  const session: Session = {
    token,
    queue: [],
    changed: new OneShot<void>(),
    unlisten: undefined,
    signals: undefined,
    lease: undefined,
    callerGrant: undefined,
    parked: undefined
  }
  env.sessions.set(token, session)
  return session
}

const none: ReadonlyArray<SignalEvent> = []

/**
 * A session's signals not yet taken: a plain array, since every reader takes all at once
 * and none waits on it (a session waits on `changed`, which each signal completes).
 *
 * @internal
 */
export class Inbox implements SignalInbox {
  // made by the first signal: most sessions' leases end with none received
  private items: Array<SignalEvent> | undefined = undefined
  /** How many signals wait to be taken. */
  get size(): number {
    return this.items?.length ?? 0
  }
  push(event: SignalEvent): void {
    if (this.items === undefined) this.items = [event]
    else this.items.push(event)
  }
  take(): ReadonlyArray<SignalEvent> {
    const taken = this.items
    if (taken === undefined) return none
    this.items = undefined
    return taken
  }
}

/**
 * The listener of a session's signals, made here: it captures the inbox and the session
 * alone (a leased token keeps it as long as its lease), not `openSignals`'s locals.
 */
const inboxListener = (inbox: Inbox, session: Session) => (event: SignalEvent) => {
  inbox.push(event)
  notify(session)
}

/**
 * The token's signals, listened to once per session and until the session ends: a
 * listener that puts each signal in the session's queue and wakes whatever waits on it.
 *
 * @internal
 */
export const openSignals = (env: SessionEnv, session: Session): Effect.Effect<Inbox, InvalidInput | StoreError> =>
  Effect.suspend(() => {
    if (session.signals !== undefined) return Effect.succeed(session.signals)
    // Recorded in the same uninterruptible step as the listening succeeds: an interruption
    // in between would leave a listener that nothing removes.
    return Effect.uninterruptibleMask((restore) =>
      Effect.gen(function* () {
        const inbox = new Inbox()
        session.unlisten = yield* restore(env.signals.listen(session.token, inboxListener(inbox, session)))
        session.signals = inbox
        return inbox
      })
    )
  })

/** @internal */
export const localQueue = (env: SessionEnv, session: Session): LocalQueue => ({
  look: Effect.sync(() => {
    const changed = session.changed
    prune(session)
    return { wanted: session.queue.length > 0, changed: changed.await }
  }),
  signals: openSignals(env, session),
  drain: Effect.sync(() => {
    session.signals?.take()
  }),
  listening: Effect.sync(() => session.signals !== undefined),
  wake: () => notify(session),
  missedSince: (mark) => env.signals.missedSince(session.token, mark)
})
