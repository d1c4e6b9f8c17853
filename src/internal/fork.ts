/**
 * Forking work that must run to its end into a scope that may already be closed.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"

/**
 * `effect` forked uninterruptible into `scope`. A scope already closed (its worker shutting
 * down) is given a fiber that never starts; then `effect` is forked detached and interrupted
 * at once: being uninterruptible it still runs, and sees the interruption wherever it turns
 * interruptible again (a session finishes its hold and releases; a cleanup runs whole).
 * Without this, a grant or a release would be left to expire.
 *
 * @internal
 */
export const forkInUninterruptible = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  scope: Scope.Scope
): Effect.Effect<Fiber.Fiber<A, E>, never, R> =>
  Effect.suspend(() =>
    scope.state._tag === "Closed"
      ? Effect.tap(Effect.forkDetach(effect, { uninterruptible: true }), (fiber) =>
          Effect.sync(() => fiber.interruptUnsafe())
        )
      : Effect.forkIn(effect, scope, { uninterruptible: true })
  )
