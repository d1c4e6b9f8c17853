/**
 * `OneShot`: a value set once and awaited by fibers, cheaper than a `Deferred` on the hot
 * path of a modification.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"

/**
 * A value set once and awaited by fibers: what `Deferred` does, for the hot path of a
 * modification, where a `Deferred` costs more to create than the rest of the hand-off.
 *
 * @internal
 */
export class OneShot<A, E = never> {
  private exit: Exit.Exit<A, E> | undefined = undefined
  private waiters: Array<(exit: Exit.Exit<A, E>) => void> | undefined = undefined
  private awaiting: Effect.Effect<A, E> | undefined = undefined

  /** Complete it; `false` when it already was. */
  done(exit: Exit.Exit<A, E>): boolean {
    if (this.exit !== undefined) return false
    this.exit = exit
    const waiters = this.waiters
    this.waiters = undefined
    if (waiters !== undefined) for (const resume of waiters) resume(exit)
    return true
  }

  /**
   * Call `callback` with the exit once completed (at once when it already is), in the
   * completer's call stack: for a plain state machine that reacts to it without a fiber.
   */
  listen(callback: (exit: Exit.Exit<A, E>) => void): void {
    if (this.exit !== undefined) {
      callback(this.exit)
      return
    }
    if (this.waiters === undefined) this.waiters = []
    this.waiters.push(callback)
  }

  /** The exit, once completed. */
  poll(): Exit.Exit<A, E> | undefined {
    return this.exit
  }

  /** Wait for it (interruptible: the waiter is removed). Made at its first use: most are never awaited. */
  get await(): Effect.Effect<A, E> {
    this.awaiting ??= Effect.callback<A, E>((resume) => {
      if (this.exit !== undefined) return resume(this.exit)
      if (this.waiters === undefined) this.waiters = []
      this.waiters.push(resume)
      return Effect.sync(() => {
        const index = this.waiters?.indexOf(resume) ?? -1
        if (index >= 0) this.waiters!.splice(index, 1)
      })
    })
    return this.awaiting
  }
}
