/**
 * `GET /ws?token=T`: one tab's socket, from link to disconnect.
 *
 * The socket is linked to its token before anything is read from it. Frames from the
 * client are queued as they arrive and handled in order by one fiber, so bumps run in the
 * order sent (the bumps that wait together are made in one modification); frames to the
 * client go through the connection's queue (see
 * `Sockets`). When the socket closes, or the server shuts down, the connection is
 * detached and the token's record removed. A socket whose token another worker took over
 * (this worker seemed gone to it) is closed by the server with code 4001, and its tab
 * reconnects. A tab whose record was taken over from a dead worker keeps its token, and
 * is sent its current state as on every link. A message over `MAX_FRAME_BYTES` closes the
 * socket with code 1009 before it is read (see `Upgrade`).
 */
import { randomUUID } from "node:crypto"
import * as Arr from "effect/Array"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Socket from "effect/socket/Socket"
import { StateManager } from "leasehold/StateManager"
import { isValidToken, TokenManager } from "leasehold/TokenManager"
import * as Counter from "./Counter.js"
import { parseClientMessage } from "./Protocol.js"
import { type Connection, Sockets } from "./Sockets.js"
import { isTooBig, tooBigCloseCode, Upgrades } from "./Upgrade.js"

/**
 * The most frames of one socket waiting to be handled (beside the batch being handled). A
 * client that sends faster than its bumps can be stored gets an error frame for each frame
 * beyond it, rather than growing this worker's memory without bound.
 */
export const maxPendingFrames = 10_000

/** The most frames a socket's reader (or writer) takes from its queue at once. */
const frameBatch = 64

/** A token for a tab that brought none (or one that cannot be used). */
export const freshToken = (): string => randomUUID()

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

/** Link a socket to its token, telling a reload (the old socket goes within the grace) from a duplicate tab. */
const linkTab = (asked: string | undefined, id: string) =>
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
    const linked = yield* link(asked ?? freshToken())
    if (asked === undefined || !linked.fresh) return linked
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

/**
 * The handler of a batch of one socket's client frames, in order: the bumps of each run of
 * consecutive bumps made in one modification (`Counter.bumpAll`: one lock turn and one
 * write for the run), then an update for each, or an error frame for each bump that failed
 * and each frame that is not a bump. Its services are looked up once per socket, not once
 * per batch.
 */
const framesHandler = (connection: Connection) =>
  Effect.gen(function* () {
    const sockets = yield* Sockets
    const states = yield* StateManager
    const send = yield* Counter.Updates.sender
    const refuse = (message: string) => sockets.send(connection, { type: "error", message })
    const failed = (message: string) =>
      Effect.andThen(Effect.logWarning(`socket ${connection.id}: bump failed: ${message}`), refuse(message))
    // The bump is stored: a delivery the store refuses costs the update, not the bump.
    const deliver = (count: Counter.Count) =>
      send(connection.token, count).pipe(
        Effect.catch((error) => Effect.logWarning(`socket ${connection.id}: update not sent: ${error.message}`))
      )
    const bumps = (steps: ReadonlyArray<number>) =>
      Effect.matchEffect(Counter.bumpAll(states, connection.token, steps), {
        // not stored: none of the run's bumps took effect
        onFailure: (error) => Effect.forEach(steps, () => failed(error.message), { discard: true }),
        onSuccess: (results) =>
          Effect.forEach(results, Result.match({ onFailure: (error) => failed(error.message), onSuccess: deliver }), {
            discard: true
          })
      })
    return (texts: ReadonlyArray<string>) =>
      Effect.suspend(() => {
        const handled: Array<Effect.Effect<void>> = []
        let run: Array<number> = []
        for (const text of texts) {
          const bump = parseClientMessage(text)
          if (Result.isSuccess(bump)) {
            run.push(bump.success.by)
            continue
          }
          if (run.length > 0) handled.push(bumps(run))
          run = []
          handled.push(refuse(bump.failure))
        }
        if (run.length > 0) handled.push(bumps(run))
        return handled.length === 1 ? handled[0]! : Effect.all(handled, { discard: true })
      })
  })

/** The route of `/ws`: upgrade, link, serve the socket until it closes, then unlink. */
export const handler = Effect.gen(function* () {
  const request = yield* HttpServerRequest.HttpServerRequest
  const params = yield* HttpServerRequest.ParsedSearchParams
  const tokens = yield* TokenManager
  const sockets = yield* Sockets
  const asked = typeof params.token === "string" && isValidToken(params.token) ? params.token : undefined
  // Not the platform's `request.upgrade`: its WebSocket server buffers messages of up to 100 MiB.
  const { batch, socket } = yield* Effect.flatMap(Upgrades, (upgrades) => upgrades.upgrade(request))
  const { write, writeAll } = yield* socket.writer
  const id = randomUUID()

  const linked = yield* linkTab(asked, id)
  const connection = yield* Effect.acquireRelease(sockets.attach(id, linked.token), (connection) =>
    Effect.andThen(sockets.detach(connection), tokens.disconnect(connection.token, id).pipe(Effect.ignore))
  )
  if (asked === undefined || linked.fresh) yield* sockets.send(connection, { type: "new_token", token: linked.token })
  yield* sockets.send(connection, { type: "hello", token: linked.token, instanceId: tokens.instanceId })

  const incoming = yield* Queue.unbounded<string>()
  const decoder = new TextDecoder()
  // Each loop takes what is waiting (up to a batch) and handles it in order: `forever`
  // yields to the scheduler once per batch, not once per frame.
  const handleFrames = yield* framesHandler(connection)
  yield* Effect.forkScoped(
    Effect.forever(Effect.flatMap(Queue.takeBetween(incoming, 1, frameBatch), handleFrames)).pipe(Effect.interruptible)
  )
  yield* Effect.forkScoped(
    Effect.forever(
      Effect.flatMap(Queue.takeBetween(connection.outgoing, 1, frameBatch), (frames) =>
        // one write to the connection for the batch, not one per frame
        Arr.isReadonlyArrayNonEmpty(frames) ? batch(writeAll(frames)) : Effect.void
      )
    ).pipe(Effect.ignore, Effect.interruptible)
  )
  yield* Effect.forkScoped(
    Counter.read(connection.token).pipe(
      Effect.flatMap((count) => sockets.sendCount(connection, "state", count)),
      Effect.catch((error) => Effect.logWarning(`socket ${id}: no initial state: ${error.message}`))
    )
  )
  // Closed from the server: the token is held by a socket of another worker now.
  const closedHere = Deferred.await(connection.closed).pipe(
    Effect.andThen(write(new Socket.CloseEvent(lostCloseCode, "token held by another worker"))),
    Effect.andThen(Effect.logInfo(`socket ${id}: closed, its token is held by another worker now`)),
    Effect.ignore
  )
  if (linked.takenOver)
    yield* Effect.logInfo(`socket ${id}: token ${linked.token} taken over from a worker that was gone`)
  // The WebSocket opens here (the handshake completed), its messages read until it closes.
  const reading = Effect.gen(function* () {
    const pull = yield* socket.reader
    while (true) {
      for (const data of yield* pull.pull) {
        // Queued synchronously, in the order the frames arrived.
        if (Queue.sizeUnsafe(incoming) >= maxPendingFrames) {
          yield* sockets.send(connection, {
            type: "error",
            message: `too many messages waiting (${maxPendingFrames}): message dropped`
          })
          continue
        }
        Queue.offerUnsafe(incoming, typeof data === "string" ? data : decoder.decode(data))
      }
    }
  }).pipe(Effect.scoped)
  yield* reading.pipe(
    Effect.catchIf(Socket.isSocketError, (error) =>
      (isTooBig(error)
        ? Effect.logWarning(`socket ${id}: a message over MAX_FRAME_BYTES, closed with ${tooBigCloseCode}`)
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
