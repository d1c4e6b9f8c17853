/**
 * One timer for many: the deadlines of a worker's holds and waits (a lease's hold time, a
 * quantum's end, a keep-alive's next extension, a waiter's re-check) kept in one heap and
 * served by one fiber, instead of a fiber and a timer of their own each. A held lease then
 * costs an entry here, not two sleeping fibers with their continuations.
 *
 * Time is Effect's `Clock` (the fiber's, so `TestClock` drives it): an entry runs once the
 * clock reads its time, never before, whatever the platform timer did.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { OneShot } from "./oneShot.js"

/** The clock every fiber has until a program provides another (`TestClock`, say). */
const liveClock: Clock.Clock = Effect.runSync(Effect.clockWith(Effect.succeed))

/**
 * The clock's time in milliseconds with a fraction: `Clock.unsafeCurrentTimeMillis` reads
 * whole milliseconds, too coarse for a quantum of two. Under `TestClock` the two agree.
 * Not to be compared with the heap's times (whole milliseconds of the wall clock): a
 * wait measured with it goes to the heap as a delay (`TimerHeap.after`).
 *
 * The live clock's nanoseconds are a `bigint` made of the wall clock and the monotonic
 * one at every read, a measured share of an uncontended modification (read twice in
 * each); its time is read here as the performance timeline's, in the same milliseconds
 * since the epoch (both are the monotonic clock from an origin taken on the wall clock).
 * Only differences of two readings are used, so the two agree where it matters.
 *
 * @internal
 */
export const preciseMillis = (clock: Clock.Clock): number =>
  clock === liveClock ? performance.timeOrigin + performance.now() : Number(clock.currentTimeNanosUnsafe()) / 1_000_000

/** `preciseMillis` of the fiber's clock. @internal */
export const currentPreciseMillis: Effect.Effect<number> = Effect.clockWith((clock) =>
  Effect.succeed(preciseMillis(clock))
)

/**
 * What an entry does when its time comes: something quick (mark, `notify`), and, where its
 * work waits for I/O, the effect to start for it (in a fiber of the timers' scope).
 *
 * @internal
 */
export type Action = () => Effect.Effect<void> | undefined | void

/**
 * The timers of one clock: entries in that clock's time, served by one fiber that runs on
 * that clock.
 *
 * @internal
 */
export interface TimerHeap {
  /** Run `action` once the clock reads `at` (ms); the function returned cancels it. */
  readonly at: (at: number, action: Action) => () => void
  /** `at(now + ms, action)`. */
  readonly after: (ms: number, action: Action) => () => void
  /** The clock's time, as the heap reads it (whole ms). */
  readonly now: () => number
  /**
   * Fire `timer` once the clock reads `at` (ms), moving it if it is armed already: an entry
   * its owner is, where a held object would otherwise keep an entry and two closures beside it.
   */
  readonly arm: (timer: Timer, at: number) => void
  /** `timer` does not fire (unless it did already). */
  readonly disarm: (timer: Timer) => void
}

/**
 * An entry that its owner is (`TimerHeap.arm`): `at` and `index` are the heap's.
 *
 * @internal
 */
export interface Timer {
  at: number
  /** Its place in the heap; -1 while not armed. */
  index: number
  readonly fire: () => ReturnType<Action>
}

/** @internal */
export interface Timers {
  /**
   * The heap of the calling fiber's `Clock` (made on first use): a deadline read from that
   * clock is served on it, whichever clock the service was built with.
   */
  readonly heap: Effect.Effect<TimerHeap>
}

type Entry = Timer

/** An entry made by `TimerHeap.at` for an action. */
class ActionEntry implements Timer {
  index = -1
  constructor(
    readonly at: number,
    readonly action: Action
  ) {}
  fire() {
    return this.action()
  }
}

/** A binary min-heap of entries by time, each knowing its index so that it can be removed. */
class Heap {
  private readonly items: Array<Entry> = []

  get size(): number {
    return this.items.length
  }

  peek(): Entry | undefined {
    return this.items[0]
  }

  push(entry: Entry): void {
    entry.index = this.items.length
    this.items.push(entry)
    this.up(entry.index)
  }

  pop(): Entry | undefined {
    const first = this.items[0]
    if (first !== undefined) this.remove(first)
    return first
  }

  remove(entry: Entry): void {
    const i = entry.index
    if (i < 0) return
    entry.index = -1
    const last = this.items.pop()!
    if (i === this.items.length) return
    this.items[i] = last
    last.index = i
    this.up(i)
    this.down(last.index)
  }

  private up(i: number): void {
    const items = this.items
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (items[parent]!.at <= items[i]!.at) return
      this.swap(i, parent)
      i = parent
    }
  }

  private down(i: number): void {
    const items = this.items
    while (true) {
      const left = 2 * i + 1
      const right = left + 1
      let least = i
      if (left < items.length && items[left]!.at < items[least]!.at) least = left
      if (right < items.length && items[right]!.at < items[least]!.at) least = right
      if (least === i) return
      this.swap(i, least)
      i = least
    }
  }

  private swap(a: number, b: number): void {
    const items = this.items
    const x = items[a]!
    const y = items[b]!
    items[a] = y
    items[b] = x
    x.index = b
    y.index = a
  }
}

/**
 * One clock's heap, its fiber forked in `scope`, where the effects its entries start run too.
 */
const makeHeap = (clock: Clock.Clock, scope: Scope.Scope) => {
  const entries = new Heap()
  // Completed when the time slept for has come, or when an entry earlier than it arrives.
  let wake = new OneShot<void>()
  let sleepingUntil = Number.POSITIVE_INFINITY

  const push = (entry: Entry) => {
    entries.push(entry)
    if (entry.at < sleepingUntil) {
      sleepingUntil = entry.at
      wake.done(Exit.void)
    }
  }
  const at = (time: number, action: Action) => {
    const entry = new ActionEntry(time, action)
    push(entry)
    return () => entries.remove(entry)
  }
  const arm = (timer: Timer, time: number) => {
    entries.remove(timer)
    timer.at = time
    push(timer)
  }

  /** The entries due now, in time order; the effects they start. */
  const runDue = (now: number) => {
    let started: Array<Effect.Effect<void>> | undefined
    let next = entries.peek()
    while (next !== undefined && next.at <= now) {
      entries.pop()
      try {
        const effect = next.fire()
        if (effect !== undefined) {
          started ??= []
          started.push(effect)
        }
      } catch {
        // an entry's own fault: the others still run
      }
      next = entries.peek()
    }
    return started
  }

  const serve = Effect.gen(function* () {
    const now = clock.currentTimeMillisUnsafe()
    const started = runDue(now)
    if (started !== undefined) {
      for (const effect of started) {
        yield* Effect.forkIn(
          Effect.interruptible(
            Effect.catchCause(effect, (cause) => Effect.logError("timers: an entry's work failed", cause))
          ),
          scope
        )
      }
    }
    const next = entries.peek()
    const woken = new OneShot<void>()
    wake = woken
    if (next === undefined) {
      sleepingUntil = Number.POSITIVE_INFINITY
      return yield* woken.await
    }
    sleepingUntil = next.at
    // One sleeper per wait of this fiber, cut short when an earlier entry wakes it.
    const sleeper = yield* Effect.forkChild(
      Effect.interruptible(
        Effect.andThen(
          Effect.sleep(Math.max(1, next.at - now)),
          Effect.sync(() => woken.done(Exit.void))
        )
      )
    )
    yield* woken.await
    sleeper.interruptUnsafe()
  })
  // A defect in the loop is logged and the loop goes on: every deadline depends on it.
  const loop = Effect.forever(
    Effect.catchDefect(serve, (defect) => Effect.logError("timers: the loop failed; it goes on", defect))
  )
  const now = () => clock.currentTimeMillisUnsafe()
  const timerHeap: TimerHeap = {
    at,
    after: (ms, action) => at(now() + ms, action),
    now,
    arm,
    disarm: (timer) => entries.remove(timer)
  }
  return { heap: timerHeap, loop: Effect.interruptible(Effect.provideService(loop, Clock.Clock, clock)) }
}

/**
 * The timers of one service. Their fibers, and the effects their entries start (a
 * keep-alive's extension), run in a scope of their own made now, so that they close after
 * whatever the service forks later (its sessions, which may still need an extension while
 * they finish).
 *
 * @internal
 */
export const make: Effect.Effect<Timers, never, Scope.Scope> = Effect.gen(function* () {
  const scope = yield* Scope.fork(yield* Effect.scope, "sequential")
  const heaps = new Map<Clock.Clock, TimerHeap>()
  const heap = Effect.clockWith((clock) => {
    const found = heaps.get(clock)
    if (found !== undefined) return Effect.succeed(found)
    return Effect.uninterruptible(
      Effect.suspend(() => {
        const again = heaps.get(clock)
        if (again !== undefined) return Effect.succeed(again)
        const made = makeHeap(clock, scope)
        heaps.set(clock, made.heap)
        return Effect.as(Effect.forkIn(made.loop, scope), made.heap)
      })
    )
  })
  return { heap } satisfies Timers
})
