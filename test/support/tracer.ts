/**
 * A tracer a test installs (`Effect.withTracer`) to see which spans are made: it records
 * each span's name and hands the span itself to the tracer the fiber had before.
 */
import * as Effect from "effect/Effect"
import * as Tracer from "effect/Tracer"

export const recordingTracer = Effect.map(Effect.tracer, (base) => {
  const names: Array<string> = []
  const tracer = Tracer.make({
    span: (options) => {
      names.push(options.name)
      return base.span(options)
    },
    ...(base.context === undefined ? {} : { context: base.context })
  })
  return { tracer, names }
})
