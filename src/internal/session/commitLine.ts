/**
 * The commit line of a worker's leases (`leaseCommitWindow`): the group commit of an
 * uncontended lease waits for the next line of a grid of the window's period, where the
 * commits of the worker's other leases meet it. They leave in the same turn of the event
 * loop, back to back on the command connection, so that Redis reads and answers them
 * together rather than one request at a time. One entry of a heap per line, shared by every
 * commit waiting for it; the line is kept per heap (one per `Clock`), so that a lease on a
 * test clock and one on the live clock never meet at a line of the other's time.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { OneShot } from "../oneShot.js"
import type { TimerHeap, Timers } from "../timers.js"

/** @internal */
export interface CommitLine {
  /**
   * Wait for the next line, or for `unless` to complete, whichever comes first: `true` at
   * the line, `false` when `unless` came first (or had already).
   */
  readonly next: (unless: OneShot<void>) => Effect.Effect<boolean>
}

/** The line a heap's commits wait for, and what opens it. */
interface Line {
  at: number
  gate: OneShot<boolean>
}

const reached = Exit.succeed(true)
const cut = Exit.succeed(false)

/** `undefined` with a window of 0: a commit then waits for nothing, at no cost. @internal */
export const make = (timers: Timers, windowMs: number): CommitLine | undefined => {
  if (windowMs <= 0) return undefined
  const lines = new WeakMap<TimerHeap, Line>()
  const gateOf = (heap: TimerHeap): OneShot<boolean> => {
    const at = (Math.floor(heap.now() / windowMs) + 1) * windowMs
    const line = lines.get(heap)
    if (line !== undefined && line.at === at) return line.gate
    const gate = new OneShot<boolean>()
    lines.set(heap, { at, gate })
    heap.at(at, () => {
      gate.done(reached)
    })
    return gate
  }
  return {
    next: (unless) =>
      Effect.flatMap(timers.heap, (heap) =>
        Effect.suspend(() => {
          if (unless.poll() !== undefined) return Effect.succeed(false)
          const gate = gateOf(heap)
          // one outcome per wait: the line's, or `unless`'s (the shared gate is left alone)
          const outcome = new OneShot<boolean>()
          gate.listen(() => outcome.done(reached))
          unless.listen(() => outcome.done(cut))
          return outcome.await
        })
      )
  }
}
