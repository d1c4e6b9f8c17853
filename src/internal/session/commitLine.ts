/**
 * The commit line of a worker's leases (`leaseCommitWindow`): the group commit of an
 * uncontended lease waits for the next line of a grid of the window's period, where the
 * commits of the worker's other leases meet it. They leave in the same turn of the event
 * loop, so the command connection sends them in one pipelined write; Redis reads and answers
 * them in one go instead of one request each. One entry of the worker's timers per line,
 * shared by every commit waiting for it.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { OneShot } from "../oneShot.js"
import type { Timers } from "../timers.js"

/** @internal */
export interface CommitLine {
  /** Wait for the next line (at once with a window of 0). */
  readonly next: Effect.Effect<void>
}

const open = Exit.succeed(undefined)

/** @internal */
export const make = (timers: Timers, windowMs: number): CommitLine => {
  if (windowMs <= 0) return { next: Effect.void }
  // the line being waited for, and what opens it
  let at = Number.NEGATIVE_INFINITY
  let gate = new OneShot<void>()
  return {
    next: Effect.flatMap(timers.wheel, (wheel) =>
      Effect.suspend(() => {
        const line = (Math.floor(wheel.now() / windowMs) + 1) * windowMs
        if (line !== at) {
          at = line
          const opening = new OneShot<void>()
          gate = opening
          wheel.at(line, () => {
            opening.done(open)
          })
        }
        return gate.await
      })
    )
  }
}
