/**
 * leasehold's spans (`StateManager.modify`, `TokenManager.link` …), made where a tracer
 * exports them. Under Effect's built-in tracer, which a program has until it installs
 * another (an OpenTelemetry layer, say) and which hands its spans to nobody, a span costs
 * about a fifth of the CPU of an uncontended modification on the embedded store (its two
 * random ids, its attributes, a copy of the fiber's context) and gives only a name in a
 * failure's `Cause.pretty` (docs/operations.md, "Tracing").
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Tracer from "effect/Tracer"

/** The tracer every fiber has until a program installs another. */
const builtIn: Tracer.Tracer = Effect.runSync(Effect.tracer)

/**
 * `Effect.withSpan`, when the fiber's tracer is not the built-in one.
 *
 * @internal
 */
export const withSpan =
  (name: string, options?: Tracer.SpanOptions) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(Effect.tracer, (tracer) => (tracer === builtIn ? effect : Effect.withSpan(effect, name, options)))
