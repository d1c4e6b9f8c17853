/**
 * Waiting on output that callbacks collect (a child's lines, a socket's frames): every
 * collector calls its listeners when something arrives.
 */
import * as Effect from "effect/Effect"

/** Wait until `check` returns a value, re-checking whenever a listener is called; dies after `ms`. */
export const waitUntil = <A>(
  listeners: Set<() => void>,
  check: () => A | undefined,
  ms: number,
  describe: () => string
): Effect.Effect<A> =>
  Effect.callback<A>((resume) => {
    const attempt = () => {
      const found = check()
      if (found !== undefined) {
        listeners.delete(attempt)
        clearTimeout(timer)
        resume(Effect.succeed(found))
      }
    }
    const timer = setTimeout(() => {
      listeners.delete(attempt)
      resume(Effect.die(describe()))
    }, ms)
    listeners.add(attempt)
    attempt()
    return Effect.sync(() => {
      listeners.delete(attempt)
      clearTimeout(timer)
    })
  })
