/**
 * A layer that makes every fiber of its runtime report the operations its run loop executes:
 * the native tracer, with a `context` through which the loop evaluates each primitive. An
 * operation is what Effect's run loop counts in a fiber's `currentOpCount`: each primitive it
 * evaluates, and each continuation a success value is handed to inline without going back to
 * the loop (see `bench/modify-cpu.ts`).
 */
import type * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Tracer from "effect/Tracer"

/** `count(fiber, ops)` after each primitive a fiber evaluates, with the operations it made. */
export const counting = (count: (fiber: Fiber.Fiber<unknown, unknown>, ops: number) => void): Layer.Layer<never> =>
  Layer.succeed(
    Tracer.Tracer,
    Tracer.make({
      span: (options) => Tracer.nativeTracer.span(options),
      context: <X>(primitive: Tracer.EffectPrimitive<X>, fiber: Fiber.Fiber<unknown, unknown>): X => {
        const before = fiber.currentOpCount
        const next = primitive["~effect/Effect/evaluate"](fiber)
        // The loop counted this primitive before calling here; the continuations it ran
        // inline advanced the counter since (a restarted counter means none to add).
        count(fiber, 1 + Math.max(0, fiber.currentOpCount - before))
        return next
      }
    })
  )
