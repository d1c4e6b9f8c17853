/**
 * A burst of one socket's events judged in one modification: each checked against its
 * client's last applied `seq`, then handled on the values the events before it left. The
 * handler is an effect (`handle`) or a pure function (`decide`): the pure one makes the
 * whole burst a pure modification, which the store decides in one step.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type { Options } from "../../SocketSession.js"
import type * as StateManager from "../../StateManager.js"
import type { Parsed } from "./frames.js"
import * as Seq from "./seq.js"

/** The refusal of an event whose handler died: the defect itself is logged, not sent. */
export const defectMessage = "the event's handler failed unexpectedly"

/** What became of one frame of a burst. */
export type Outcome<U> =
  | { readonly _tag: "Applied"; readonly update: U }
  | {
      readonly _tag: "Refused"
      readonly message: string
      /** The tag of the handler's error; `Defect` for a defect, `InvalidEvent` for an event that did not decode. */
      readonly code: string
    }
  | { readonly _tag: "Duplicate"; readonly state: U }
  | { readonly _tag: "Resend"; readonly from: number }
  | { readonly _tag: "Forgotten" }

/** A frame of a burst handled in its modification. */
export interface Handled<Ev> {
  readonly parsed: Parsed<Ev>
  readonly seq: number | undefined
}

/** The message of a handler's failure: its `message` when it has one. */
export const messageOf = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)

/** The tag of an error, when it has one. */
export const codeOf = (error: unknown, otherwise: string): string =>
  typeof error === "object" && error !== null && "_tag" in error && typeof error._tag === "string"
    ? error._tag
    : otherwise

/** A burst being judged: the `seq` slice and the app's values so far, and each frame's outcome. */
export interface Judging<S extends Record<string, StateManager.Slice<any, any>>, U> {
  seq: Seq.SeqState
  app: StateManager.Values<S>
  readonly outcomes: Array<Outcome<U>>
}

/** A burst's start from the modification's values (the app's slices and the `seq` slice under `seqKey`). */
export const start = <S extends Record<string, StateManager.Slice<any, any>>, U>(
  values: Record<string, unknown>,
  seqKey: string
): Judging<S, U> => {
  const { [seqKey]: seq, ...app } = values
  return { seq: seq as Seq.SeqState, app: app as StateManager.Values<S>, outcomes: [] }
}

/** The next values of a judged burst, with its `seq` slice under `seqKey`. */
export const nextValues = (judging: Judging<any, unknown>, seqKey: string) => ({
  ...judging.app,
  [seqKey]: judging.seq
})

/**
 * A frame's verdict before its handler: its outcome when it is not to be handled (a
 * duplicate, a resend, a forgotten client, a malformed event), else the event. Its `seq`,
 * when applied, is counted even if the handler then refuses it: its answer is final, and the
 * next `seq` may follow.
 */
export const admit = <Ev, U, S extends Record<string, StateManager.Slice<any, any>>>(
  judging: Judging<S, U>,
  item: Handled<Ev>,
  client: string | undefined,
  view: (values: StateManager.Values<S>) => U
): Result.Result<Ev, Outcome<U>> => {
  const { parsed, seq } = item
  if (seq !== undefined && client !== undefined) {
    const verdict = Seq.check(judging.seq, client, seq)
    if (verdict._tag === "Duplicate") return Result.fail({ _tag: "Duplicate", state: view(judging.app) })
    if (verdict._tag !== "Apply") return Result.fail(verdict)
    judging.seq = Seq.advance(judging.seq, client, seq)
  }
  if (Result.isFailure(parsed.event))
    return Result.fail({ _tag: "Refused", message: parsed.event.failure, code: "InvalidEvent" })
  return Result.succeed(parsed.event.success)
}

/**
 * The burst judged by a pure handler: synchronous, with no effect. A handler's throw refuses
 * its own event; the defect is kept in `defects`, to be logged once the modification is over.
 */
export const judgePure = <Ev, U, S extends Record<string, StateManager.Slice<any, any>>, E>(
  judging: Judging<S, U>,
  items: ReadonlyArray<Handled<Ev>>,
  client: string | undefined,
  definition: Pick<Options<Ev, any, U, any, S, E, never>, "view"> & {
    readonly decide: NonNullable<Options<Ev, any, U, any, S, E, never>["decide"]>
  },
  now: number,
  defects: Array<unknown>
): void => {
  for (const item of items) {
    const admitted = admit(judging, item, client, definition.view)
    if (Result.isFailure(admitted)) {
      judging.outcomes.push(admitted.failure)
      continue
    }
    let decided: Result.Result<readonly [U, StateManager.Values<S>], E>
    try {
      decided = definition.decide(admitted.success, judging.app, now)
    } catch (defect) {
      defects.push(defect)
      judging.outcomes.push({ _tag: "Refused", message: defectMessage, code: "Defect" })
      continue
    }
    if (Result.isFailure(decided)) {
      judging.outcomes.push({
        _tag: "Refused",
        message: messageOf(decided.failure),
        code: codeOf(decided.failure, "Refused")
      })
      continue
    }
    judging.app = decided.success[1]
    judging.outcomes.push({ _tag: "Applied", update: decided.success[0] })
  }
}

/**
 * The burst judged by an effectful handler, in order. A failure or a defect refuses its own
 * event (the defect logged); an interruption ends the modification, nothing of it written.
 */
export const judgeEffect = <Ev, U, S extends Record<string, StateManager.Slice<any, any>>, E, R>(
  judging: Judging<S, U>,
  items: ReadonlyArray<Handled<Ev>>,
  client: string | undefined,
  definition: Pick<Options<Ev, any, U, any, S, E, R>, "view"> & {
    readonly handle: NonNullable<Options<Ev, any, U, any, S, E, R>["handle"]>
  },
  /** Who sent the events, for the log of a defect (`socket <id>`). */
  source: string
): Effect.Effect<void, never, R> =>
  Effect.gen(function* () {
    for (const item of items) {
      const admitted = admit(judging, item, client, definition.view)
      if (Result.isFailure(admitted)) {
        judging.outcomes.push(admitted.failure)
        continue
      }
      const handled = yield* Effect.exit(definition.handle(admitted.success, judging.app))
      if (Exit.isSuccess(handled)) {
        judging.app = handled.value[1]
        judging.outcomes.push({ _tag: "Applied", update: handled.value[0] })
        continue
      }
      const failure = Cause.findErrorOption(handled.cause)
      if (Option.isSome(failure)) {
        judging.outcomes.push({
          _tag: "Refused",
          message: messageOf(failure.value),
          code: codeOf(failure.value, "Refused")
        })
        continue
      }
      // An interruption ends the modification: nothing of the batch is written.
      if (!Cause.hasDies(handled.cause)) return yield* Effect.failCause(handled.cause as Cause.Cause<never>)
      // A defect refuses its own event only: the burst's others were judged on their own.
      yield* Effect.logError(`${source}: an event's handler died`, handled.cause)
      judging.outcomes.push({ _tag: "Refused", message: defectMessage, code: "Defect" })
    }
  })
