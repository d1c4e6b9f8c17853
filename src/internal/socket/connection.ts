/**
 * One tab's socket, from link to disconnect: the handshake, the frames read and handled in
 * order (the events waiting together in one modification, each checked against its
 * client's last applied `seq`), the answers, and the close.
 *
 * @internal
 */

import { randomUUID } from "node:crypto"
import * as Arr from "effect/Array"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Socket from "effect/socket/Socket"
import type { Options } from "../../SocketSession.js"
import type * as StateManager from "../../StateManager.js"
import { StateManager as States } from "../../StateManager.js"
import { isValidToken, TokenManager } from "../../TokenManager.js"
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
import { type Applied, type Control, parser, seqOf } from "./frames.js"
import { type Connection, type Registry, Sockets } from "./registry.js"
import * as Seq from "./seq.js"
import { isTooBig, tooBigCloseCode, Upgrades } from "./upgrade.js"

/** What a session is made of: the app's schemas, slices, handler and bounds (`SocketSession.Options`). */
export type Definition<Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R> = Options<
  Ev,
  EvI,
  U,
  UI,
  S,
  E,
  R
>

/** The default bound of frames waiting to be handled on one socket. */
export const defaultMaxPendingFrames = 10_000

/** The default bound of the bytes of the frames waiting on one socket, in frame caps. */
export const defaultPendingFrameCaps = 64

/** The most frames a socket's reader (or writer) takes from its queue at once. */
const frameBatch = 64

/**
 * How long a socket whose token another socket holds waits for that one to go before it
 * is taken for a duplicate tab. A reload opens the new socket while the server may still
 * be closing the old one (its record goes when the close is handled); a duplicate tab's
 * original socket stays open, so the wait ends with a fresh token.
 */
export const reloadGrace = Duration.seconds(1)

const reloadPoll = Duration.millis(50)

/** The close code of a socket whose token another worker's socket holds now: the client reconnects. */
export const lostCloseCode = 4001

/** The close code of a socket whose client opened a newer one on this worker (it had not seen the old one close). */
export const replacedCloseCode = 4002

/** A client id: 1 to 64 characters of `[A-Za-z0-9_-]`. */
const clientPattern = new RegExp(`^[A-Za-z0-9_-]{1,${Seq.maxClientLength}}$`)

/** The key of the `seq` slice among the slices of a modification (a slice name, never an app's key). */
export const seqKey = Seq.seqSlice.name

/**
 * Link a socket to its token, telling a reconnect of the same page (same client id), and a
 * reload (the old socket goes within the grace), from a duplicate tab.
 */
const linkTab = (asked: string | undefined, id: string, client: string | undefined, registry: Registry) =>
  Effect.gen(function* () {
    const tokens = yield* TokenManager
    const link = (token: string) =>
      tokens.link(token, id).pipe(
        Effect.catchTag("RecordNotStored", (error) =>
          // Linked here; the record is written once the store is back (see TokenManager).
          // A fresh token must still reach the tab, or its socket and its reloads part ways.
          Effect.as(Effect.logWarning(error.message), {
            token: error.token,
            fresh: error.fresh === true,
            takenOver: false
          })
        )
      )
    const linked = yield* link(asked ?? randomUUID())
    if (asked === undefined || !linked.fresh) return linked
    // The same page, whose old socket this worker has not seen close (a connection left
    // half-open by a network loss or a sleep): the new one takes its place at once. A
    // duplicated tab has a client id of its own. A holder on another worker is waited for.
    const holder = registry.find(asked)
    if (client !== undefined && holder !== undefined && holder.client === client) {
      yield* registry.close(asked, holder.id, {
        code: replacedCloseCode,
        reason: "replaced by a newer socket of the same client"
      })
      yield* tokens.disconnect(asked, holder.id).pipe(Effect.ignore)
      yield* tokens.disconnect(linked.token, id)
      return yield* link(asked)
    }
    const gone = tokens.owner(asked, { refresh: true }).pipe(
      Effect.map(Option.isNone),
      Effect.orElseSucceed(() => false),
      Effect.delay(reloadPoll),
      Effect.repeat({ until: (gone) => gone }),
      Effect.timeoutOption(reloadGrace)
    )
    if (Option.isNone(yield* gone)) return linked
    // The other socket went: this is its tab, reloaded. Give the fresh token back and take the tab's own.
    yield* tokens.disconnect(linked.token, id)
    return yield* link(asked)
  })

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

/** The handler of a batch of one socket's frames, in order, with its services looked up once. */
const framesHandler = <Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R>(
  definition: Definition<Ev, EvI, U, UI, S, E, R>,
  registry: Registry,
  connection: Connection
) =>
  Effect.gen(function* () {
    const states = yield* States
    const parse = parser(definition.events)
    const slices = { ...definition.slices, [seqKey]: Seq.seqSlice }
    const { client } = connection

    /**
     * What the last run of the modification's function made of each event, and the values it
     * read: when the write fails after it, each frame's answer comes from them (`answerFailed`).
     */
    interface Judged {
      readonly outcomes: ReadonlyArray<Outcome<U>>
      readonly before: StateManager.Values<S>
      /** The client's last applied `seq` as read. */
      readonly last: number
    }
    const judged: { current: Judged | undefined } = { current: undefined }

    /** What the last run of the modification's function judged, kept for an answer to a failed write. */
    const keep = (judging: Judging<S, U>, values: Record<string, unknown>) => {
      judged.current = {
        outcomes: judging.outcomes,
        before: start<S, U>(values, seqKey).app,
        last: client === undefined ? 0 : Seq.lastOf(values[seqKey] as Seq.SeqState, client)
      }
      return [judging.outcomes, nextValues(judging, seqKey) as StateManager.Values<typeof slices>] as const
    }

    /** The events of a batch in one modification: what became of each, in order. */
    const handleAll = (items: ReadonlyArray<Handled<Ev>>): Effect.Effect<ReadonlyArray<Outcome<U>>, unknown, R> => {
      const { decide, handle, view } = definition
      if (decide !== undefined) {
        // A pure burst: one pure modification, its handler's defects logged once it is over.
        const defects: Array<unknown> = []
        // A run that counts for nothing (its step refused or failed) leaves nothing to answer
        // with, nor to log: if the modification then fails before it runs again, nothing is known.
        const options: PureOptions = {
          event: "socket",
          onDiscard: () => {
            judged.current = undefined
            defects.length = 0
          }
        }
        return Effect.clockWith((clock) =>
          states.modifyAllPure(
            connection.token,
            slices,
            (values) => {
              // only the last run counts: on Redis the function may run twice
              defects.length = 0
              // read by each run, once it has its values (after any wait for the lock): a
              // time no earlier than what a modification before it could have stored
              const now = clock.currentTimeMillisUnsafe()
              const judging = start<S, U>(values, seqKey)
              judgePure(judging, items, client, { view, decide }, now, defects)
              return keep(judging, values)
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
      return states.modifyAll(
        connection.token,
        slices,
        (values) => {
          const judging = start<S, U>(values, seqKey)
          return Effect.map(judgeEffect(judging, items, client, { view, handle: handle! }, connection.id), () =>
            keep(judging, values)
          )
        },
        { event: "socket" }
      )
    }

    const answer = (outcome: Outcome<U>, seq: number | undefined): Effect.Effect<void> => {
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
    const answerFailed = (
      outcome: Outcome<U> | undefined,
      attempt: Judged | undefined,
      seq: number | undefined,
      cause: Cause.Cause<unknown>
    ): Effect.Effect<void> => {
      const applied = outcome === undefined ? "unknown" : appliedAfter(cause)
      switch (outcome?._tag) {
        case "Duplicate":
          if (applied === "unknown") break
          // the state as read: the batch's earlier events were not written with it
          return answer({ _tag: "Duplicate", state: definition.view(attempt!.before) }, seq)
        case "Resend":
          if (applied === "unknown") break
          // from the last applied as read: the batch's events before it may not have been written
          return answer({ _tag: "Resend", from: Math.min(outcome.from, attempt!.last + 1) }, seq)
        case "Forgotten":
          return answer(outcome, seq)
      }
      const message = messageOf(Option.getOrElse(Cause.findErrorOption(cause), () => Cause.pretty(cause)))
      return registry.send(
        connection,
        seq === undefined ? { type: "error", message } : { type: "error", message, seq, applied }
      )
    }

    const handleItems = (items: ReadonlyArray<Item<Ev>>) =>
      Effect.gen(function* () {
        const handled = items.filter((item) => item._tag === "Handle")
        judged.current = undefined
        const exit = handled.length === 0 ? Exit.succeed([]) : yield* Effect.exit(handleAll(handled))
        const failed = judged.current as Judged | undefined
        let i = 0
        for (const item of items) {
          if (item._tag === "Answer") {
            yield* registry.send(connection, item.message)
            continue
          }
          const { seq } = item
          if (Exit.isSuccess(exit)) {
            yield* answer(exit.value[i++]!, seq)
            continue
          }
          yield* answerFailed(failed?.outcomes[i++], failed, seq, exit.cause)
        }
        if (Exit.isFailure(exit)) {
          yield* Effect.logWarning(`socket ${connection.id}: events not handled: ${Cause.pretty(exit.cause)}`)
        }
      })

    return (texts: ReadonlyArray<string>) =>
      handleItems(
        texts.map((text): Item<Ev> => {
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
        })
      )
  })

/** The token's current state, read without the lock. */
const currentState = <S extends Record<string, StateManager.Slice<any, any>>>(token: string, slices: S) =>
  Effect.flatMap(States, (states) =>
    Effect.map(
      Effect.forEach(Object.keys(slices), (key) =>
        Effect.map(states.get(token, slices[key]!), (value) => [key, value] as const)
      ),
      (entries) => Object.fromEntries(entries) as StateManager.Values<S>
    )
  )

/** The route of a session: upgrade, link, serve the socket until it closes, then unlink. */
export const handler = <Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R>(
  definition: Definition<Ev, EvI, U, UI, S, E, R>
) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const params = yield* HttpServerRequest.ParsedSearchParams
    const tokens = yield* TokenManager
    const registry = yield* Sockets
    const upgrades = yield* Upgrades
    const maxPending = definition.maxPendingFrames ?? defaultMaxPendingFrames
    const maxPendingBytes = definition.maxPendingBytes ?? defaultPendingFrameCaps * upgrades.maxFrameBytes
    const asked = typeof params.token === "string" && isValidToken(params.token) ? params.token : undefined
    const client = typeof params.client === "string" && clientPattern.test(params.client) ? params.client : undefined
    // Not the platform's `request.upgrade`: its WebSocket server takes no bound from the session.
    const { batch, socket, buffered } = yield* upgrades.upgrade(request)
    const { write, writeAll } = yield* socket.writer
    const id = randomUUID()

    // the token was checked, or minted here: an invalid one is a defect
    const linked = yield* Effect.orDie(linkTab(asked, id, client, registry))
    const connection = yield* Effect.acquireRelease(registry.attach(id, linked.token, client, buffered), (connection) =>
      Effect.andThen(registry.detach(connection), tokens.disconnect(connection.token, id).pipe(Effect.ignore))
    )
    if (asked === undefined || linked.fresh)
      yield* registry.send(connection, { type: "new_token", token: linked.token })
    yield* registry.send(connection, {
      type: "hello",
      token: linked.token,
      instanceId: tokens.instanceId,
      maxFrameBytes: upgrades.maxFrameBytes
    })

    const incoming = yield* Queue.unbounded<string>()
    // The bytes of the frames in `incoming`: bounded as well as their number, since each may be a frame cap.
    let pendingBytes = 0
    const decoder = new TextDecoder()
    const handleFrames = yield* framesHandler(definition, registry, connection)
    // Read the state before any event is handled, so that it goes before their answers.
    yield* currentState(linked.token, definition.slices).pipe(
      Effect.flatMap((values) => registry.sendUpdate(connection, "state", definition.view(values), {})),
      Effect.catch((error) => Effect.logWarning(`socket ${id}: no initial state: ${error.message}`))
    )
    // Each loop takes what is waiting (up to a batch) and handles it in order: `forever`
    // yields to the scheduler once per batch, not once per frame.
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.flatMap(Queue.takeBetween(incoming, 1, frameBatch), (texts) => {
          for (const text of texts) pendingBytes -= Buffer.byteLength(text)
          return handleFrames(texts)
        })
      ).pipe(Effect.interruptible)
    )
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.flatMap(Queue.takeBetween(connection.outgoing, 1, frameBatch), (frames) => {
          for (const frame of frames) connection.unsent -= frame.length
          // one write to the connection for the batch, not one per frame
          return Arr.isReadonlyArrayNonEmpty(frames) ? batch(writeAll(frames)) : Effect.void
        })
      ).pipe(Effect.ignore, Effect.interruptible)
    )
    // Closed from the server: another socket holds the token now, or the client does not read.
    const closedHere = Deferred.await(connection.closed).pipe(
      Effect.tap(({ code, reason }) => write(new Socket.CloseEvent(code, reason))),
      Effect.flatMap(({ code, reason }) => Effect.logInfo(`socket ${id}: closed with ${code}: ${reason}`)),
      Effect.ignore
    )
    if (linked.takenOver) {
      yield* Effect.logInfo(`socket ${id}: token ${linked.token} taken over from a worker that was gone`)
    }
    // The WebSocket opens here (the handshake completed), its messages read until it closes.
    const reading = Effect.gen(function* () {
      const pull = yield* socket.reader
      while (true) {
        for (const data of yield* pull.pull) {
          const text = typeof data === "string" ? data : decoder.decode(data)
          const bytes = Buffer.byteLength(text)
          // Queued synchronously, in the order the frames arrived; one alone is always taken.
          const size = Queue.sizeUnsafe(incoming)
          if (size === 0 || (size < maxPending && pendingBytes + bytes <= maxPendingBytes)) {
            Queue.offerUnsafe(incoming, text)
            pendingBytes += bytes
            continue
          }
          const seq = client === undefined ? undefined : seqOf(text)
          // Not applied, and its seq not counted: the client sends it again, from it.
          yield* registry.send(
            connection,
            seq === undefined
              ? {
                  type: "error",
                  message: `too many messages waiting (${maxPending}, or ${maxPendingBytes} bytes): message dropped`
                }
              : { type: "resend", from: seq, seq }
          )
        }
      }
    }).pipe(Effect.scoped)
    yield* reading.pipe(
      Effect.catchIf(Socket.isSocketError, (error) =>
        (isTooBig(error)
          ? Effect.logWarning(`socket ${id}: a message over the frame cap, closed with ${tooBigCloseCode}`)
          : Effect.logDebug(`socket ${id} closed: ${error.message}`)
        ).pipe(Effect.annotateLogs({ token: connection.token }))
      ),
      Effect.raceFirst(closedHere)
    )
    return HttpServerResponse.empty()
  }).pipe(
    Effect.catchTag("HttpServerError", (error) =>
      Effect.succeed(
        HttpServerResponse.jsonUnsafe({ error: `not a WebSocket request: ${error.message}` }, { status: 400 })
      )
    ),
    Effect.scoped
  )
