/**
 * Capture log records in a test, to compare the lines a component logs in full.
 */
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"

export interface LogLine {
  readonly level: string
  readonly message: string
}

/**
 * A logger layer that appends every record to `lines`, in place of the default logger:
 * captured lines are asserted, not printed. A logger reaches only what it is provided to: a
 * test provides it to its workers' builds and to its own body, since a modification logs
 * from its caller's fiber.
 */
export const into = (lines: Array<LogLine>): Layer.Layer<never> =>
  Logger.layer([
    Logger.make(({ logLevel, message }) => {
      const parts = Array.isArray(message) ? message : [message]
      lines.push({ level: logLevel.toUpperCase(), message: parts.map(String).join(" ") })
    })
  ])

/** A logger layer that appends every record to `lines` (`into`), with the lines. */
export const capture = (): { readonly lines: Array<LogLine>; readonly layer: Layer.Layer<never> } => {
  const lines: Array<LogLine> = []
  return { lines, layer: into(lines) }
}

/** The lines at INFO level or above, or of the given levels. */
export const atLevels = (lines: ReadonlyArray<LogLine>, levels: ReadonlyArray<string> = ["ERROR", "WARN", "INFO"]) =>
  lines.filter((line) => levels.includes(line.level))

/** Run `effect` with every log record captured into `lines`. */
export const withCapture = <A, E, R>(lines: { readonly layer: Layer.Layer<never> }, effect: Effect.Effect<A, E, R>) =>
  Effect.provide(effect, lines.layer)
