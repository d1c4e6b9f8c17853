/**
 * A worker of a multi-worker test, built in a scope of its own inside the test's: a test
 * can close one worker and keep the others.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"

/** Build `layer` with its logs captured by `logs`; `close` closes its scope alone. */
export const buildOwn = <ROut, E>(layer: Layer.Layer<ROut, E>, logs: { readonly layer: Layer.Layer<never> }) =>
  Effect.gen(function* () {
    const own = yield* Scope.fork(yield* Effect.scope, "sequential")
    const built = yield* Layer.buildWithScope(layer, own).pipe(Effect.provide(logs.layer))
    return { built, close: Scope.close(own, Exit.void) }
  })
