/**
 * The per-token sessions of a worker: the local queue of a token's modifications, the
 * lock its head holds, and the lease (oplock) that keeps the lock while this worker alone
 * uses the token (DESIGN §4–§5).
 *
 * A session exists while a token has queued modifications or a lease on this worker, and
 * is dropped as soon as it has neither: memory does not grow with the tokens ever seen.
 * Modifications run in their callers' fibers; the session gives each its turn in order,
 * with the encoded slices it asked for, and writes what it changed.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { OneShot } from "./internal/oneShot.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import { type Grant, type LocalQueue, Lock, type Previous } from "./Lock.js"
import { type SignalEvent, Signals } from "./Signals.js"
import { LockExpired } from "./StateError.js"
import { type SliceEntry, Store } from "./Store.js"
import type { InvalidToken, LockLost, StoreError } from "./StoreError.js"

/**
 * What a modification receives when its turn comes.
 *
 * @since 0.1.0
 * @category models
 */
export interface Turn {
  /** The encoded slices it asked for (`None`: nothing stored). */
  readonly values: ReadonlyMap<string, Option.Option<string>>
  /** The fencing number of the grant it runs under. */
  readonly fence: number
}

/**
 * What a modification hands back: the slices whose encoding changed, or nothing to write.
 *
 * @since 0.1.0
 * @category models
 */
export type Outcome =
  | { readonly _tag: "Commit"; readonly writes: ReadonlyArray<SliceEntry> }
  | { readonly _tag: "Abort" }

/**
 * A modification queued on a token.
 *
 * @since 0.1.0
 * @category models
 */
export interface Request {
  readonly slices: ReadonlyArray<string>
  readonly event: Option.Option<string>
  /** Completed by the session when the turn comes, or failed when it cannot come. */
  readonly turn: OneShot<Turn, InvalidToken | StoreError>
  /** Completed by the caller once its modification is decided. */
  readonly done: OneShot<Outcome>
  /** Completed by the session once the outcome is durable (or failed). */
  readonly ack: OneShot<void, LockExpired | StoreError>
  cancelled: boolean
}

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Lease {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * Start a modification (the token is already validated). With nothing queued on the
     * token here, the caller makes the uncontended attempt itself; when that grants a lock
     * to be held for this one modification, the turn is returned and the caller decides in
     * its own fiber, completes `done` and calls `complete`. Otherwise (`None`) the request
     * is queued: the caller awaits its turn. Uninterruptible: a lock granted
     * to a caller that left would stay taken until it expires.
     */
    readonly begin: (token: string, request: Request) => Effect.Effect<Option.Option<Turn>, InvalidToken | StoreError>
    /** After a turn from `begin`, with `done` completed: write, release, then complete `ack`. */
    readonly complete: (token: string, request: Request) => Effect.Effect<void>
    /** A request cancelled by its caller: the session skips it. */
    readonly cancel: (token: string, request: Request) => Effect.Effect<void>
    /** The encoded slice under this worker's lease, if it holds one on the token and has the slice. */
    readonly cached: (token: string, slice: string) => Option.Option<Option.Option<string>>
    /** Whether this worker holds a lease on the token now. */
    readonly isLeased: (token: string) => boolean
    /** The number of tokens with a session on this worker. */
    readonly sessions: Effect.Effect<number>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Lease extends Context.Tag("leasehold/Lease")<Lease, Lease.Service>() {}

/**
 * @since 0.1.0
 * @category metrics
 */
export const leasesStarted = Metric.counter("leasehold_leases_started_total", { incremental: true })

/**
 * @since 0.1.0
 * @category metrics
 */
export const leasesBroken = Metric.counter("leasehold_leases_broken_total", {
  description: "leases ended early because another instance contended",
  incremental: true
})

/**
 * @since 0.1.0
 * @category metrics
 */
export const flushes = Metric.counter("leasehold_lease_flushes_total", {
  description: "group commits of leased modifications",
  incremental: true
})

/**
 * @since 0.1.0
 * @category metrics
 */
export const flushFailures = Metric.counter("leasehold_lease_flush_failures_total", { incremental: true })

interface LeaseState {
  readonly cache: Map<string, Option.Option<string>>
}

interface Session {
  readonly token: string
  readonly queue: Array<Request>
  /** Completed (and renewed) at every change: a request queued or cancelled, a signal received, a poke. */
  changed: OneShot<void>
  /** Where the session's signal subscription lives; closed when the session ends. */
  scope: Scope.CloseableScope | undefined
  signals: Queue.Dequeue<SignalEvent> | undefined
  lease: LeaseState | undefined
  /** The grant a caller holds in its own fiber (`begin`); its turn began at the grant. */
  own: Grant | undefined
}

/**
 * Let the event loop turn once: the I/O that arrived meanwhile (a contender's signal) is
 * read before this resumes. `Effect.sleep(0)` would do it too, but as a timer it waits at
 * least 1 ms, and a hold that was idle pays it on its first step after waking.
 */
const turnEventLoop: Effect.Effect<void> = Effect.async<void>((resume) => {
  const handle = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(handle))
})

const notify = (session: Session) => {
  const current = session.changed
  session.changed = new OneShot<void>()
  current.done(Exit.void)
}

const prune = (session: Session) => {
  let i = 0
  while (i < session.queue.length) {
    if (session.queue[i]!.cancelled) session.queue.splice(i, 1)
    else i++
  }
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Lease.Service, never, Scope.Scope | Store | Lock | Signals | LeaseholdConfig> =
  Effect.gen(function* () {
    const store = yield* Store
    const lock = yield* Lock
    const signals = yield* Signals
    const config = yield* LeaseholdConfig
    const scope = yield* Effect.scope
    const instanceId = lock.instanceId
    const sessions = new Map<string, Session>()

    const lockMs = Duration.toMillis(config.lockExpiration)
    const holdMs = Duration.toMillis(config.leaseHoldTime)
    const quantumMs = Duration.toMillis(config.leaseQuantum)
    const yieldMs = Math.max(1, quantumMs)
    const warnMs = Duration.toMillis(config.lockWarningThreshold)
    const durable = config.leaseDurability === "batch"

    const lockExpired = (request: Request, lockId: string, error: LockLost) =>
      new LockExpired({
        token: error.token,
        event: request.event,
        expected: lockId,
        current: error.holder,
        lockExpirationMs: lockMs
      })

    const failAcks = (requests: ReadonlyArray<Request>, lockId: string, error: LockLost | StoreError) => {
      for (const request of requests) {
        request.ack.done(Exit.fail(error._tag === "LockLost" ? lockExpired(request, lockId, error) : error))
      }
    }

    /** Tokens are validated before a session exists: an InvalidToken here is a defect. */
    const writeOrFail = <A>(effect: Effect.Effect<A, InvalidToken | LockLost | StoreError>) =>
      Effect.catchTag(effect, "InvalidToken", (error) => Effect.die(error))

    const succeedAcks = (requests: ReadonlyArray<Request>) => {
      for (const request of requests) request.ack.done(Exit.void)
    }

    /** The token's signals, subscribed once per session and kept until the session ends. */
    const openSignals = (session: Session): Effect.Effect<Queue.Dequeue<SignalEvent>, InvalidToken | StoreError> =>
      Effect.suspend(() => {
        if (session.signals !== undefined) return Effect.succeed(session.signals)
        return Effect.gen(function* () {
          // made on first use (most sessions never wait and never lease); closed with the session
          if (session.scope === undefined) session.scope = yield* Scope.make()
          const sessionScope = session.scope
          const events = yield* Scope.extend(signals.subscribe(session.token), sessionScope)
          const queue = yield* Queue.unbounded<SignalEvent>()
          yield* events.pipe(
            Stream.runForEach((event) => Effect.map(Queue.offer(queue, event), () => notify(session))),
            Effect.interruptible,
            Effect.forkIn(sessionScope)
          )
          session.signals = queue
          return queue as Queue.Dequeue<SignalEvent>
        })
      })

    /** How a grant is held: for one modification, a quantum's worth, or as a lease. */
    const modeOf = (grant: Grant): "single" | "quantum" | "lease" =>
      !config.oplock ? "single" : grant.contenders === 0 ? "lease" : quantumMs === 0 ? "single" : "quantum"

    const warnIfLong = (token: string, request: Request, started: number) =>
      Effect.clockWith((clock) => {
        const heldMs = clock.unsafeCurrentTimeMillis() - started
        return heldMs > warnMs
          ? Effect.logWarning(
              `lock of token ${token} was held too long: ${heldMs} ms by one modification` +
                `${Option.match(request.event, { onNone: () => "", onSome: (e) => ` (event ${e})` })}; ` +
                `the threshold is ${warnMs} ms. Move long work out of modifications.`
            )
          : Effect.void
      })

    /** Hold a grant: serve turns (one, a quantum's worth, or a lease's), then commit and release. */
    const hold = (session: Session, grant: Grant) =>
      Effect.gen(function* () {
        const { token, lockId } = grant
        const mode = modeOf(grant)
        const cache = new Map(grant.values)
        const dirty = new Map<string, string>()
        let unacked: Array<Request> = []
        let inProgress: Request | undefined
        let served = 0
        let deadline = grant.grantedAt + (mode === "lease" ? holdMs : mode === "quantum" ? quantumMs : 0)
        let contended = mode !== "lease"
        let failed: LockLost | StoreError | undefined

        /**
         * Wakes the serving loop once the clock reads the deadline; armed again when the
         * deadline moves earlier. It sleeps again while the clock reads less: a timer may
         * fire before the wall clock has reached its time (Node's timers run on a clock of
         * their own), and a loop woken early with no timer left would wait for the next
         * signal or request, however late.
         */
        let timer: Fiber.RuntimeFiber<void> | undefined
        const untilDeadline = Effect.gen(function* () {
          while (true) {
            const ms = deadline - (yield* Clock.currentTimeMillis)
            if (ms <= 0) return notify(session)
            yield* Effect.sleep(ms)
          }
        })
        const armTimer = Effect.gen(function* () {
          if (timer !== undefined) yield* Fiber.interruptFork(timer)
          timer = yield* Effect.fork(Effect.interruptible(untilDeadline))
        })

        const contend = Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.suspend(() => {
            if (contended) return Effect.void
            contended = true
            deadline = Math.min(deadline, now + quantumMs)
            return Effect.zipRight(Metric.increment(leasesBroken), armTimer)
          })
        )

        /**
         * A lease is told of contention by signals. Subscribed before the attempt that
         * granted it, it needs nothing more: the grant counted the contenders registered
         * before it, and every later registration is a signal on that subscription. A lease
         * granted first subscribes now and then asks the store once, for the registrations
         * in between; it does so once the requests queued at its grant are served, or
         * before a second one, so that the first is not kept waiting for it.
         */
        let watching = session.signals !== undefined
        const watchContention = Effect.gen(function* () {
          watching = true
          const events = yield* openSignals(session)
          // what came before the check is covered by it
          yield* Queue.takeAll(events)
          if ((yield* store.otherContenders(token, instanceId)) > 0) yield* contend
        })

        /** After a resubscription a contender may have registered unseen: ask the store. */
        const recheckContenders = Effect.flatMap(
          Effect.orElseSucceed(store.otherContenders(token, instanceId), () => 1),
          (n) => (n > 0 ? contend : Effect.void)
        )
        const isOtherContender = (event: SignalEvent) => event._tag === "Contended" && event.instanceId !== instanceId

        /** Between two modifications: has another instance registered meanwhile? */
        const checkSignals = Effect.suspend(() => {
          const events = session.signals
          if (events === undefined || contended) return Effect.void
          return Effect.flatMap(Queue.takeAll(events), (chunk) => {
            let resubscribed = false
            for (const event of chunk) {
              if (isOtherContender(event)) return contend
              if (event._tag === "Resubscribed") resubscribed = true
            }
            return resubscribed ? recheckContenders : Effect.void
          })
        })

        /**
         * Keeps the lock from expiring under a slow modification. Interruptible: it is raced
         * from uninterruptible code too. A lease runs one for its whole hold (a lease is
         * shorter than the lock expiration, so an idle lease extends at most twice). An
         * extension that fails (the store away for a moment) is tried again sooner, until
         * one succeeds: only the store saying the lock is no longer ours ends it.
         */
        const keepAlive = Effect.gen(function* () {
          const every = Math.max(1, Math.floor(lockMs / 3))
          const again = Math.max(1, Math.floor(every / 4))
          let delay = every
          while (true) {
            // the slices read under this lock, and the fence, live as long as it is held
            const extended = yield* Effect.either(Effect.delay(store.extend(token, lockId, [...cache.keys()]), delay))
            if (extended._tag === "Right" && !extended.right) return
            delay = extended._tag === "Right" ? every : again
          }
        }).pipe(Effect.zipRight(Effect.never), Effect.interruptible)
        const withKeepAlive = <A>(effect: Effect.Effect<A>) => Effect.raceFirst(effect, keepAlive)
        const keeper = mode === "lease" ? yield* Effect.fork(keepAlive) : undefined

        const serveOne = (request: Request) =>
          Effect.gen(function* () {
            const missing = request.slices.filter((name) => !cache.has(name))
            if (missing.length > 0) {
              // Fetched under the lock this worker holds: as current as the grant's reads.
              const values = yield* store.readSlices(token, missing)
              for (const [i, name] of missing.entries()) cache.set(name, values[i] ?? Option.none())
            }
            const given = yield* Effect.sync(() => {
              // Taken off the queue only now: after a failed read it waits for the next grant,
              // or fails with the store's error, instead of waiting for a turn nobody gives.
              if (session.queue[0] === request) session.queue.shift()
              if (request.cancelled) return false
              inProgress = request
              served++
              request.turn.done(
                Exit.succeed({
                  values: new Map(request.slices.map((name) => [name, cache.get(name) ?? Option.none()])),
                  fence: grant.fence
                })
              )
              return true
            })
            if (!given) return
            const started = yield* Clock.currentTimeMillis
            const outcome = yield* request.done.await
            inProgress = undefined
            yield* warnIfLong(token, request, started)
            if (outcome._tag === "Abort") return
            for (const [name, value] of outcome.writes) {
              cache.set(name, Option.some(value))
              dirty.set(name, value)
            }
            if (mode !== "single" && !durable) request.ack.done(Exit.void)
            else unacked.push(request)
          })

        /** Group commit: one write for every modification served since the last one. */
        const flush = Effect.gen(function* () {
          if (unacked.length === 0) return false
          const batch = unacked
          unacked = []
          const entries = [...dirty.entries()]
          dirty.clear()
          const result = yield* Effect.either(writeOrFail(store.writeIfHolder(token, lockId, entries)))
          if (result._tag === "Right") {
            yield* Metric.increment(flushes)
            succeedAcks(batch)
            return true
          }
          // The lock is lost or the store is away: this lease writes nothing more.
          yield* Metric.increment(flushFailures)
          yield* Effect.logWarning(`writing the leased modifications of token ${token} failed: ${result.left.message}`)
          failed = result.left
          failAcks(batch, lockId, result.left)
          return true
        })

        const nextRequest = () => {
          prune(session)
          return session.queue[0]
        }

        const serve = Effect.gen(function* () {
          if (mode === "lease") {
            yield* Metric.increment(leasesStarted)
            session.lease = { cache }
          }
          // when the serving last waited for the store (or for the event loop)
          let ioAt = grant.grantedAt
          while (failed === undefined) {
            if (mode === "single" && served > 0) return
            // Looked for before every modification: a busy local queue never waits for a signal.
            if (mode === "lease") yield* checkSignals
            // Taken before the queue is read: an arrival after the read completes it.
            const changed = session.changed
            const now = yield* Clock.currentTimeMillis
            // Served from memory alone, a busy local loop runs on microtasks and the event
            // loop never turns: the socket that brings a contender's signal is not read, and
            // timers do not fire. A turn of the event loop at least every quantum bounds that.
            if (mode !== "single" && now - ioAt >= yieldMs) {
              yield* turnEventLoop
              ioAt = yield* Clock.currentTimeMillis
              continue
            }
            // Past the deadline nothing more is served, however full the queue: a busy
            // local loop must not keep a remote waiter out. `finish` writes in one step.
            if (served > 0 && now >= deadline) return
            const request = nextRequest()
            if (request !== undefined && mode === "lease" && !watching && served > 0) {
              yield* watchContention
              continue
            }
            if (request !== undefined) {
              yield* serveOne(request)
              continue
            }
            if (now >= deadline) return
            // Another instance waits and nothing is queued here: the quantum is for the
            // modifications this worker has queued, not for ones that might still come.
            if (contended) return
            if (durable && (yield* flush)) ioAt = yield* Clock.currentTimeMillis
            // a failed write ends the lease at once: it can write nothing more
            if (failed !== undefined) return
            if (mode === "lease" && !watching) {
              yield* watchContention
              continue
            }
            // woken by a modification, a signal, or the deadline
            if (timer === undefined) yield* armTimer
            yield* changed.await
          }
        })

        /** Whatever ended the hold: finish the modification in progress, write, release. */
        const finish = Effect.gen(function* () {
          session.lease = undefined
          if (timer !== undefined) yield* Fiber.interruptFork(timer)
          if (inProgress !== undefined) {
            const outcome = yield* keeper === undefined ? withKeepAlive(inProgress.done.await) : inProgress.done.await
            if (outcome._tag === "Commit") {
              for (const [name, value] of outcome.writes) dirty.set(name, value)
              unacked.push(inProgress)
            }
            inProgress = undefined
          }
          if (keeper !== undefined) yield* Fiber.interruptFork(keeper)
          if (failed !== undefined) {
            // The lock is lost or the store is away: nothing more is written; release what may remain.
            failAcks(unacked, lockId, failed)
            yield* Effect.ignore(store.release(token, lockId, { instanceId }))
            return noTurn
          }
          return yield* commitAndRelease(session, lockId, [...dirty.entries()], unacked)
        })

        // The session's fiber is uninterruptible (see `start`): only the serving is interrupted.
        return yield* Effect.zipRight(Effect.exit(Effect.interruptible(serve)), finish)
      })

    /** After a hold: whether the release registered this worker, and whether it owes others a turn. */
    const noTurn: Previous = { registered: false, yieldFirst: false }

    /** The last write of a grant, with its release; registers this worker if requests wait here. */
    const commitAndRelease = (
      session: Session,
      lockId: string,
      writes: ReadonlyArray<SliceEntry>,
      requests: ReadonlyArray<Request>
    ): Effect.Effect<Previous> =>
      Effect.gen(function* () {
        const { token } = session
        prune(session)
        const waiting = session.queue.length > 0
        const result = yield* Effect.either(
          writeOrFail(store.commitAndRelease(token, lockId, writes, { instanceId, register: waiting }))
        )
        if (result._tag === "Right") {
          succeedAcks(requests)
          return { registered: waiting, yieldFirst: result.right > 0 }
        }
        yield* Metric.increment(flushFailures)
        yield* Effect.logWarning(`writing the modifications of token ${token} failed: ${result.left.message}`)
        failAcks(requests, lockId, result.left)
        // A refused commit (no memory left) wrote nothing and kept the lock: left held, it
        // would block every worker on this token until it expires.
        if (result.left._tag !== "LockLost") yield* Effect.ignore(store.release(token, lockId, { instanceId }))
        return noTurn
      })

    const localQueue = (session: Session): LocalQueue => ({
      look: Effect.sync(() => {
        const changed = session.changed
        prune(session)
        return { wanted: session.queue.length > 0, changed: changed.await }
      }),
      signals: openSignals(session),
      drain: Effect.suspend(() =>
        session.signals === undefined ? Effect.void : Effect.asVoid(Queue.takeAll(session.signals))
      ),
      poke: Effect.sync(() => notify(session))
    })

    /** The session's fiber, from a grant already taken or from what the last release left. */
    const run = (session: Session, start: Grant | Previous) =>
      Effect.gen(function* () {
        let after = "lockId" in start ? yield* hold(session, start) : start
        while (true) {
          const next = yield* Effect.sync(() => {
            prune(session)
            if (session.queue.length > 0) return "work" as const
            // owing others a turn, the session stays a little to keep a new local
            // modification from taking the lock back before them
            if (after.yieldFirst) return "linger" as const
            sessions.delete(session.token)
            return "exit" as const
          })
          if (next === "exit") {
            // registered by the last release for waiters that have left since
            if (after.registered) yield* Effect.ignore(store.deregisterWaiter(session.token, instanceId))
            return
          }
          if (next === "linger") {
            const arrived = yield* Effect.interruptible(lock.linger(session.token, localQueue(session)))
            if (!arrived) after = { registered: after.registered, yieldFirst: false }
            continue
          }
          const slices = [...new Set(session.queue.flatMap((request) => request.slices))]
          const grant: Option.Option<Grant> = yield* Effect.interruptible(
            lock.acquire(session.token, slices, localQueue(session), after)
          )
          after = Option.isSome(grant) ? yield* hold(session, grant.value) : noTurn
        }
      }).pipe(
        Effect.onExit((exit) =>
          Effect.suspend(() => {
            if (sessions.get(session.token) === session) sessions.delete(session.token)
            const left = session.queue.splice(0)
            const scope = session.scope
            const closeScope = scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
            if (Exit.isSuccess(exit)) return closeScope
            const error = Option.getOrUndefined(Cause.failureOption(exit.cause))
            return Effect.forEach(
              left,
              (request) =>
                Effect.sync(() =>
                  request.turn.done(error === undefined ? Exit.interrupt(FiberId.none) : Exit.fail(error))
                ),
              { discard: true }
            ).pipe(Effect.zipRight(closeScope))
          })
        )
      )

    // Uninterruptible but where it waits (acquiring, lingering, serving): an interruption
    // between a grant and its hold, even before the fiber's first step, would leave the
    // lock taken until it expires. Its callers are uninterruptible too, and the fiber
    // inherits that.
    const start = (session: Session, from: Grant | Previous) =>
      Effect.asVoid(Effect.forkIn(Effect.uninterruptible(run(session, from)), scope))

    const newSession = (token: string): Session => {
      const session: Session = {
        token,
        queue: [],
        changed: new OneShot<void>(),
        scope: undefined,
        signals: undefined,
        lease: undefined,
        own: undefined
      }
      sessions.set(token, session)
      return session
    }

    /** Queued behind an existing session: `true`; the caller then awaits its turn. */
    const join = (token: string, request: Request) => {
      const existing = sessions.get(token)
      if (existing === undefined) return false
      existing.queue.push(request)
      notify(existing)
      return true
    }

    const noOwnTurn = Effect.succeed(Option.none<Turn>())

    // A session in the map always has a fiber or a caller holding its grant (`own`): whoever
    // holds it looks at the queue when it is done, so a request queued meanwhile is served.
    const begin = (token: string, request: Request) =>
      Effect.suspend(() => {
        if (join(token, request)) return noOwnTurn
        const session = newSession(token)
        return Effect.matchCauseEffect(lock.attempt(token, request.slices), {
          // Whatever ended the attempt (an error, a defect, an interruption), the session must
          // not stay in the map with nobody serving it: the requests queued meanwhile would
          // wait for ever.
          onFailure: (cause) => {
            // The requests queued meanwhile make their own attempts. A failed attempt may
            // still have registered this worker: the session deregisters it if it ends
            // without a grant (the registration's own deadline covers the rest).
            if (session.queue.length > 0) {
              return Effect.zipRight(start(session, { registered: true, yieldFirst: false }), Effect.failCause(cause))
            }
            if (sessions.get(token) === session) sessions.delete(token)
            return Effect.failCause(cause)
          },
          onSuccess: (grant) => {
            if (Option.isNone(grant)) {
              session.queue.unshift(request)
              // the refused attempt registered this worker
              return Effect.as(start(session, { registered: true, yieldFirst: false, attempted: true }), Option.none())
            }
            // a quantum or a lease serves the modifications that queue meanwhile: its fiber does
            if (modeOf(grant.value) !== "single") {
              session.queue.unshift(request)
              return Effect.as(start(session, grant.value), Option.none())
            }
            session.own = grant.value
            return Effect.succeed(Option.some<Turn>({ values: grant.value.values, fence: grant.value.fence }))
          }
        })
      })

    const complete = (token: string, request: Request) =>
      Effect.gen(function* () {
        const session = sessions.get(token)
        const own = session?.own
        if (session === undefined || own === undefined)
          return yield* Effect.dieMessage("complete without a turn from begin")
        session.own = undefined
        const { lockId } = own
        const outcome = request.done.poll()
        const writes =
          outcome !== undefined && Exit.isSuccess(outcome) && outcome.value._tag === "Commit"
            ? outcome.value.writes
            : []
        yield* warnIfLong(token, request, own.grantedAt)
        const after = yield* commitAndRelease(session, lockId, writes, [request])
        prune(session)
        if (session.queue.length > 0 || after.yieldFirst) return yield* start(session, after)
        sessions.delete(token)
        if (after.registered) yield* Effect.ignore(store.deregisterWaiter(token, instanceId))
        // A store that answers synchronously (the embedded one) never made this fiber wait:
        // without a yield, a loop of modifications would keep every other fiber (and timer)
        // from running. On Redis the yield costs next to nothing beside its round trips.
        yield* Effect.yieldNow()
      })

    return Lease.of({
      begin,
      complete,
      cancel: (token, request) =>
        Effect.sync(() => {
          request.cancelled = true
          const session = sessions.get(token)
          if (session !== undefined) notify(session)
        }),
      cached: (token, slice) => {
        const lease = sessions.get(token)?.lease
        return lease === undefined || !lease.cache.has(slice) ? Option.none() : Option.some(lease.cache.get(slice)!)
      },
      isLeased: (token) => sessions.get(token)?.lease !== undefined,
      sessions: Effect.sync(() => sessions.size)
    })
  })

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Lease, never, Store | Lock | Signals | LeaseholdConfig> = Layer.scoped(Lease, make)
