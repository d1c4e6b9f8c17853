/**
 * The frames a socket's reader took together, handled in order (`framesHandler`): a frame
 * answered where it stands (one with `seq` on a socket without a client id, a malformed one
 * without `seq`), the others judged in the batch's one modification with the `seq` slice
 * (`modifyAll`, or `modifyAllPure` for a pure handler), and every frame answered, also when
 * the write failed (`appliedAfter` tells an error answer's `applied` from the failure).
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
import { StateManager as States } from "../../StateManager.js"
import type { PureOptions } from "../state/modify.js"
import {
  type Handled,
  type Judging,
  judgeEffect,
  judgePure,
  messageOf,
  nextValues,
  type Outcome,
  start
} from "./burst.js"
import { type Applied, type Control, type Parsed, parser } from "./frames.js"
import type { Connection, Registry } from "./registry.js"
import * as Seq from "./seq.js"

type Slices = Record<string, StateManager.Slice<any, any>>

/** The key of the `seq` slice among the slices of a modification (a slice name, never an app's key). */
export const seqKey = Seq.seqSlice.name

/** A frame of a batch: answered at once (`answer`), or handled in the batch's modification. */
type Item<Ev> = { readonly _tag: "Answer"; readonly message: Control } | ({ readonly _tag: "Handle" } & Handled<Ev>)

/**
 * Whether a failed modification may have been written: a store that failed or did not
 * acknowledge after the function returned, or a lock lost around the write, leaves it
 * unknown; an input or value refused before any I/O, or a handler's defect, wrote nothing.
 */
export const appliedAfter = (cause: Cause.Cause<unknown>): Applied => {
  const failure = Cause.findErrorOption(cause)
  if (Option.isNone(failure)) return false
  const tag = (failure.value as { readonly _tag?: unknown })._tag
  return tag === "StoreUnavailable" || tag === "StoreRefused" || tag === "NotAcknowledged" || tag === "LockExpired"
    ? "unknown"
    : false
}

/**
 * What the last run of the modification's function made of each event, and the values it
 * read: when the write fails after it, each frame's answer comes from them (`answerFailed`).
 */
interface Judged<U, S extends Slices> {
  readonly outcomes: ReadonlyArray<Outcome<U>>
  readonly before: StateManager.Values<S>
  /** The client's last applied `seq` as read. */
  readonly last: number
}

/** What the steps of one socket's batches share. */
interface Batches<Ev, EvI, U, UI, S extends Slices, E, R> {
  readonly definition: Options<Ev, EvI, U, UI, S, E, R>
  readonly states: StateManager.StateManager.Service
  readonly registry: Registry
  readonly connection: Connection
  /** The app's slices, and the `seq` slice under `seqKey`. */
  readonly slices: Slices
  /** What the last run of the current batch's function judged, kept for an answer to a failed write. */
  judged: Judged<U, S> | undefined
}

/** Keep what a run of the modification's function judged; its outcomes, and the values it writes. */
const keep = <Ev, EvI, U, UI, S extends Slices, E, R>(
  batches: Batches<Ev, EvI, U, UI, S, E, R>,
  judging: Judging<S, U>,
  values: Record<string, unknown>
) => {
  const { client } = batches.connection
  batches.judged = {
    outcomes: judging.outcomes,
    before: start<S, U>(values, seqKey).app,
    last: client === undefined ? 0 : Seq.lastOf(values[seqKey] as Seq.SeqState, client)
  }
  return [judging.outcomes, nextValues(judging, seqKey) as StateManager.Values<Slices>] as const
}

/** A pure burst: one pure modification, its handler's defects logged once it is over. */
const handlePure = <Ev, EvI, U, UI, S extends Slices, E, R>(
  batches: Batches<Ev, EvI, U, UI, S, E, R>,
  items: ReadonlyArray<Handled<Ev>>,
  decide: NonNullable<Options<Ev, EvI, U, UI, S, E, R>["decide"]>
): Effect.Effect<ReadonlyArray<Outcome<U>>, unknown> => {
  const { connection, definition } = batches
  const { view } = definition
  const defects: Array<unknown> = []
  // A run that counts for nothing (its step refused or failed) leaves nothing to answer
  // with, nor to log: if the modification then fails before it runs again, nothing is known.
  const options: PureOptions = {
    event: "socket",
    onDiscard: () => {
      batches.judged = undefined
      defects.length = 0
    }
  }
  return Effect.clockWith((clock) =>
    batches.states.modifyAllPure(
      connection.token,
      batches.slices,
      (values) => {
        // only the last run counts: on Redis the function may run twice
        defects.length = 0
        // read by each run, once it has its values (after any wait for the lock): a
        // time no earlier than what a modification before it could have stored
        const now = clock.currentTimeMillisUnsafe()
        const judging = start<S, U>(values, seqKey)
        judgePure(judging, items, connection.client, { view, decide }, now, defects)
        return keep(batches, judging, values)
      },
      options
    )
  ).pipe(
    Effect.ensuring(
      Effect.suspend(() =>
        Effect.forEach(
          defects,
          (defect) => Effect.logError(`socket ${connection.id}: an event's handler died`, Cause.die(defect)),
          { discard: true }
        )
      )
    )
  )
}

/** The events of a batch in one modification: what became of each, in order. */
const handleAll = <Ev, EvI, U, UI, S extends Slices, E, R>(
  batches: Batches<Ev, EvI, U, UI, S, E, R>,
  items: ReadonlyArray<Handled<Ev>>
): Effect.Effect<ReadonlyArray<Outcome<U>>, unknown, R> => {
  const { connection } = batches
  const { decide, handle, view } = batches.definition
  if (decide !== undefined) return handlePure(batches, items, decide)
  return batches.states.modifyAll(
    connection.token,
    batches.slices,
    (values) => {
      const judging = start<S, U>(values, seqKey)
      return Effect.map(
        judgeEffect(judging, items, connection.client, { view, handle: handle! }, `socket ${connection.id}`),
        () => keep(batches, judging, values)
      )
    },
    { event: "socket" }
  )
}

/** The answer to a frame whose event was judged and written. */
const answer = <U>(
  registry: Registry,
  connection: Connection,
  outcome: Outcome<U>,
  seq: number | undefined
): Effect.Effect<void> => {
  switch (outcome._tag) {
    case "Applied":
      return registry.sendUpdate(connection, "update", outcome.update, { seq })
    case "Duplicate":
      return registry.sendUpdate(connection, "state", outcome.state, { seq, duplicate: true })
    case "Refused":
      return registry.send(
        connection,
        seq === undefined
          ? { type: "error", message: outcome.message }
          : { type: "error", message: outcome.message, seq, applied: false }
      )
    case "Resend":
      return registry.send(connection, { type: "resend", from: outcome.from, seq: seq! })
    case "Forgotten":
      return registry.send(connection, { type: "forgotten", seq: seq! })
  }
}

/**
 * The answer to a frame of a batch whose write failed. Before the function ran (or after a
 * run that counted for nothing, its step refused), nothing is known of the frames: one with
 * `seq` may be a duplicate, whose event was applied. After it, the events to be written are
 * answered with the write's outcome. A duplicate or a frame over a gap was judged on the
 * values read, which may hold writes not yet acknowledged (a lease's group commit still
 * owed): when the store failed or did not acknowledge, those may be lost with it, and the
 * frame's event with them, so it is of unknown outcome too (the client resends it with its
 * `seq`). A value the modification refused itself (over `maxValueBytes`, or one its
 * slice cannot encode) leaves it answered as it would have been. A forgotten client is
 * told so: it takes its unanswered events as of unknown outcome anyway.
 */
const answerFailed = <Ev, EvI, U, UI, S extends Slices, E, R>(
  batches: Batches<Ev, EvI, U, UI, S, E, R>,
  outcome: Outcome<U> | undefined,
  attempt: Judged<U, S> | undefined,
  seq: number | undefined,
  cause: Cause.Cause<unknown>
): Effect.Effect<void> => {
  const { registry, connection } = batches
  const applied = outcome === undefined ? "unknown" : appliedAfter(cause)
  switch (outcome?._tag) {
    case "Duplicate":
      if (applied === "unknown") break
      // the state as read: the batch's earlier events were not written with it
      return answer(registry, connection, { _tag: "Duplicate", state: batches.definition.view(attempt!.before) }, seq)
    case "Resend":
      if (applied === "unknown") break
      // from the last applied as read: the batch's events before it may not have been written
      return answer(registry, connection, { _tag: "Resend", from: Math.min(outcome.from, attempt!.last + 1) }, seq)
    case "Forgotten":
      return answer(registry, connection, outcome, seq)
  }
  const message = messageOf(Option.getOrElse(Cause.findErrorOption(cause), () => Cause.pretty(cause)))
  return registry.send(
    connection,
    seq === undefined ? { type: "error", message } : { type: "error", message, seq, applied }
  )
}

/** A batch's frames: those to handle in one modification, then every frame answered in order. */
const handleItems = <Ev, EvI, U, UI, S extends Slices, E, R>(
  batches: Batches<Ev, EvI, U, UI, S, E, R>,
  items: ReadonlyArray<Item<Ev>>
) =>
  Effect.gen(function* () {
    const { registry, connection } = batches
    const handled = items.filter((item) => item._tag === "Handle")
    batches.judged = undefined
    const exit = handled.length === 0 ? Exit.succeed([]) : yield* Effect.exit(handleAll(batches, handled))
    const failed = batches.judged as Judged<U, S> | undefined
    let i = 0
    for (const item of items) {
      if (item._tag === "Answer") {
        yield* registry.send(connection, item.message)
        continue
      }
      const { seq } = item
      if (Exit.isSuccess(exit)) {
        yield* answer(registry, connection, exit.value[i++]!, seq)
        continue
      }
      yield* answerFailed(batches, failed?.outcomes[i++], failed, seq, exit.cause)
    }
    if (Exit.isFailure(exit)) {
      yield* Effect.logWarning(`socket ${connection.id}: events not handled: ${Cause.pretty(exit.cause)}`)
    }
  })

/** A frame parsed, and whether it is answered where it stands or handled in the modification. */
const itemOf =
  <Ev>(parse: (text: string) => Parsed<Ev>, client: string | undefined) =>
  (text: string): Item<Ev> => {
    const parsed = parse(text)
    const { seq } = parsed
    if (seq !== undefined && client === undefined) {
      return {
        _tag: "Answer",
        message: {
          type: "error",
          message: "a frame with seq needs the socket's client id (client=C in the URL)",
          seq,
          applied: false
        }
      }
    }
    // A malformed frame without seq is answered where it stands; with seq, its seq is counted
    // in the modification, so that the frames after it are not held up by a gap.
    if (seq === undefined && Result.isFailure(parsed.event)) {
      return { _tag: "Answer", message: { type: "error", message: parsed.event.failure } }
    }
    return { _tag: "Handle", parsed, seq }
  }

/**
 * The handler of a batch of one socket's frames, in order, with its services looked up once.
 *
 * @internal
 */
export const framesHandler = <Ev, EvI, U, UI, S extends Slices, E, R>(
  definition: Options<Ev, EvI, U, UI, S, E, R>,
  registry: Registry,
  connection: Connection
) =>
  Effect.gen(function* () {
    const batches: Batches<Ev, EvI, U, UI, S, E, R> = {
      definition,
      states: yield* States,
      registry,
      connection,
      slices: { ...definition.slices, [seqKey]: Seq.seqSlice },
      judged: undefined
    }
    const item = itemOf(parser(definition.events), connection.client)
    return (texts: ReadonlyArray<string>) => handleItems(batches, texts.map(item))
  })
