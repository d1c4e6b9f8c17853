/**
 * One tab's socket, from link to disconnect (`handler`): the upgrade, the link
 * (`link.ts`), the greeting and the state, the frames read into a bounded inbox and
 * handled a batch at a time (`batch.ts`), the outgoing frames written a batch at a time,
 * and the close.
 *
 * @internal
 */

import { randomUUID } from "node:crypto"
import * as Arr from "effect/Array"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Queue from "effect/Queue"
import * as Socket from "effect/socket/Socket"
import type { Options } from "../../SocketSession.js"
import type * as StateManager from "../../StateManager.js"
import { StateManager as States } from "../../StateManager.js"
import { isValidToken, TokenManager } from "../../TokenManager.js"
import { framesHandler } from "./batch.js"
import { seqOf } from "./frames.js"
import { linkTab } from "./link.js"
import { type Connection, type Registry, Sockets } from "./registry.js"
import * as Seq from "./seq.js"
import { isTooBig, tooBigCloseCode, type Upgraded, Upgrades } from "./upgrade.js"

export { appliedAfter, seqKey } from "./batch.js"
export { reloadGrace, replacedCloseCode } from "./link.js"

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

/** The close code of a socket whose token another worker's socket holds now: the client reconnects. */
export const lostCloseCode = 4001

/** A client id: 1 to 64 characters of `[A-Za-z0-9_-]`. */
const clientPattern = new RegExp(`^[A-Za-z0-9_-]{1,${Seq.maxClientLength}}$`)

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

/**
 * The frames read and not yet handled: bounded in number and in bytes, since each may be
 * a frame cap; one alone is always taken.
 */
interface Inbox {
  readonly queue: Queue.Queue<string>
  /** The bytes of the frames in `queue`. */
  bytes: number
  readonly maxFrames: number
  readonly maxBytes: number
}

/** The first frames of a socket: `new_token` when its token is not the one it asked for, `hello`, then the state. */
const greet = <S extends Record<string, StateManager.Slice<any, any>>, U>(
  registry: Registry,
  connection: Connection,
  asked: string | undefined,
  linked: { readonly token: string; readonly fresh: boolean },
  hello: { readonly instanceId: string; readonly maxFrameBytes: number },
  definition: { readonly slices: S; readonly view: (values: StateManager.Values<S>) => U }
) =>
  Effect.gen(function* () {
    if (asked === undefined || linked.fresh)
      yield* registry.send(connection, { type: "new_token", token: linked.token })
    yield* registry.send(connection, { type: "hello", token: linked.token, ...hello })
    // Read the state before any event is handled, so that it goes before their answers.
    yield* currentState(linked.token, definition.slices).pipe(
      Effect.flatMap((values) => registry.sendUpdate(connection, "state", definition.view(values), {})),
      Effect.catch((error) => Effect.logWarning(`socket ${connection.id}: no initial state: ${error.message}`))
    )
  })

/**
 * Handle what waits in the inbox, in order: each loop takes what is waiting (up to a
 * batch), so `forever` yields to the scheduler once per batch, not once per frame.
 */
const handleInbox = <R>(
  inbox: Inbox,
  handleFrames: (texts: ReadonlyArray<string>) => Effect.Effect<void, never, R>
): Effect.Effect<never, never, R> =>
  Effect.forever(
    Effect.flatMap(Queue.takeBetween(inbox.queue, 1, frameBatch), (texts) => {
      for (const text of texts) inbox.bytes -= Buffer.byteLength(text)
      return handleFrames(texts)
    })
  ).pipe(Effect.interruptible)

/** Write the socket's outgoing frames, each batch in one write to the connection, not one per frame. */
const writeOutgoing = (connection: Connection, batch: Upgraded["batch"], writer: Socket.Writer) =>
  Effect.forever(
    Effect.flatMap(Queue.takeBetween(connection.outgoing, 1, frameBatch), (frames) => {
      for (const frame of frames) connection.unsent -= frame.length
      return Arr.isReadonlyArrayNonEmpty(frames) ? batch(writer.writeAll(frames)) : Effect.void
    })
  ).pipe(Effect.ignore, Effect.interruptible)

/** Closed from the server: another socket holds the token now, or the client does not read. */
const closedHere = (connection: Connection, writer: Socket.Writer) =>
  Deferred.await(connection.closed).pipe(
    Effect.tap(({ code, reason }) => writer.write(new Socket.CloseEvent(code, reason))),
    Effect.flatMap(({ code, reason }) => Effect.logInfo(`socket ${connection.id}: closed with ${code}: ${reason}`)),
    Effect.ignore
  )

/**
 * The WebSocket opened (the handshake completed) and its messages read until it closes,
 * each queued in the inbox synchronously, in the order the frames arrived, or, over the
 * inbox's bounds, refused.
 */
const readInto = (socket: Socket.Socket, inbox: Inbox, registry: Registry, connection: Connection) =>
  Effect.gen(function* () {
    const decoder = new TextDecoder()
    const pull = yield* socket.reader
    while (true) {
      for (const data of yield* pull.pull) {
        const text = typeof data === "string" ? data : decoder.decode(data)
        const bytes = Buffer.byteLength(text)
        const size = Queue.sizeUnsafe(inbox.queue)
        if (size === 0 || (size < inbox.maxFrames && inbox.bytes + bytes <= inbox.maxBytes)) {
          Queue.offerUnsafe(inbox.queue, text)
          inbox.bytes += bytes
          continue
        }
        const seq = connection.client === undefined ? undefined : seqOf(text)
        // Not applied, and its seq not counted: the client sends it again, from it.
        yield* registry.send(
          connection,
          seq === undefined
            ? {
                type: "error",
                message: `too many messages waiting (${inbox.maxFrames}, or ${inbox.maxBytes} bytes): message dropped`
              }
            : { type: "resend", from: seq, seq }
        )
      }
    }
  }).pipe(
    Effect.scoped,
    Effect.catchIf(Socket.isSocketError, (error) =>
      (isTooBig(error)
        ? Effect.logWarning(`socket ${connection.id}: a message over the frame cap, closed with ${tooBigCloseCode}`)
        : Effect.logDebug(`socket ${connection.id} closed: ${error.message}`)
      ).pipe(Effect.annotateLogs({ token: connection.token }))
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
    const asked = typeof params.token === "string" && isValidToken(params.token) ? params.token : undefined
    const client = typeof params.client === "string" && clientPattern.test(params.client) ? params.client : undefined
    // Not the platform's `request.upgrade`: its WebSocket server takes no bound from the session.
    const { batch, socket, buffered } = yield* upgrades.upgrade(request)
    const writer = yield* socket.writer
    const id = randomUUID()

    // the token was checked, or minted here: an invalid one is a defect
    const linked = yield* Effect.orDie(linkTab(asked, id, client, registry))
    const connection = yield* Effect.acquireRelease(registry.attach(id, linked.token, client, buffered), (connection) =>
      Effect.andThen(registry.detach(connection), tokens.disconnect(connection.token, id).pipe(Effect.ignore))
    )
    yield* greet(
      registry,
      connection,
      asked,
      linked,
      { instanceId: tokens.instanceId, maxFrameBytes: upgrades.maxFrameBytes },
      definition
    )
    const handleFrames = yield* framesHandler(definition, registry, connection)
    const inbox: Inbox = {
      queue: yield* Queue.unbounded<string>(),
      bytes: 0,
      maxFrames: definition.maxPendingFrames ?? defaultMaxPendingFrames,
      maxBytes: definition.maxPendingBytes ?? defaultPendingFrameCaps * upgrades.maxFrameBytes
    }
    yield* Effect.forkScoped(handleInbox(inbox, handleFrames))
    yield* Effect.forkScoped(writeOutgoing(connection, batch, writer))
    if (linked.takenOver) {
      yield* Effect.logInfo(`socket ${id}: token ${linked.token} taken over from a worker that was gone`)
    }
    yield* readInto(socket, inbox, registry, connection).pipe(Effect.raceFirst(closedHere(connection, writer)))
    return HttpServerResponse.empty()
  }).pipe(
    Effect.catchTag("HttpServerError", (error) =>
      Effect.succeed(
        HttpServerResponse.jsonUnsafe({ error: `not a WebSocket request: ${error.message}` }, { status: 400 })
      )
    ),
    Effect.scoped
  )
