/**
 * The sockets a worker holds, by token, and the delivery of updates to them.
 *
 * Updates of one token may reach its socket's owner out of order: changes committed one
 * after the other on two workers travel through two senders. With the app's `isNewer`, a
 * socket is sent only updates newer than the last it was sent; an older one is dropped,
 * since the newer state it was overtaken by is already on its way. Delivery never waits on
 * a socket: frames go to the connection's own queue, which its writer empties.
 *
 * @internal
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Queue from "effect/Queue"
import type * as SocketSession from "../../SocketSession.js"
import type { Control, UpdateMarks } from "./frames.js"

/** Why the server closes a socket: the close frame's code and reason. */
export interface CloseReason {
  readonly code: number
  readonly reason: string
}

/** The close code of a socket whose client did not read what it was sent (RFC 6455: "try again later"). */
export const backlogCloseCode = 1013

/** The default bound of a socket's frames not yet taken by its client, in bytes (16 MiB). */
export const defaultMaxUnsentBytes = 16 * 1024 * 1024

/** One socket held by this worker. */
export interface Connection {
  readonly id: string
  readonly token: string
  /** The client id the socket came with, when valid: the key of its `seq`. */
  readonly client: string | undefined
  /** Frames to write, in order. */
  readonly outgoing: Queue.Queue<string>
  /** The characters of the frames in `outgoing`: its writer takes them off as it writes them. */
  unsent: number
  /** The bytes written to the connection and not yet sent to the client. */
  readonly buffered: () => number
  /** The last update sent, for `isNewer`. */
  last: { readonly update: unknown } | undefined
  /**
   * Done when the server closes the socket: its token is held by a socket of another
   * worker, or of the same client, now; or its client does not read what it is sent.
   */
  readonly closed: Deferred.Deferred<CloseReason>
}

/** Sockets open on this worker. */
export const open = Metric.gauge("leasehold_session_sockets_open", { description: "WebSockets open on this worker" })

/** Updates not sent because a newer one had been sent already. */
export const overtaken = Metric.counter("leasehold_session_updates_overtaken_total", {
  description: "updates dropped because a newer state had already been sent to the socket",
  incremental: true
})

/** The registry of one worker's sockets. */
export interface Registry {
  readonly attach: (
    id: string,
    token: string,
    client: string | undefined,
    buffered?: () => number
  ) => Effect.Effect<Connection>
  /** The socket of this worker linked to `token`. */
  readonly find: (token: string) => Connection | undefined
  readonly detach: (connection: Connection) => Effect.Effect<void>
  readonly send: (connection: Connection, message: Control) => Effect.Effect<void>
  /**
   * Send an update. Without `seq`, one not newer than the last sent is dropped; the answer to
   * a frame with `seq` is always sent (marked `overtaken` when a newer one went before it).
   */
  readonly sendUpdate: (
    connection: Connection,
    type: "state" | "update",
    update: unknown,
    marks: UpdateMarks
  ) => Effect.Effect<void>
  /** Close the socket `id` of `token`: another socket holds the token now. */
  readonly close: (token: string, id: string, reason: CloseReason) => Effect.Effect<void>
  /** The worker's `deliver`: an update to the token's socket on this worker. */
  readonly deliver: (token: string, update: unknown) => Effect.Effect<void>
}

/**
 * The registry of a worker's sockets, made with the worker by `SocketSession.layer`: in a
 * context under the public `SocketSession.Sockets`, which an app composes and never opens.
 */
export const Sockets: Context.Service<SocketSession.Sockets, Registry> = Context.Service<
  SocketSession.Sockets,
  Registry
>("leasehold/SocketSession/Sockets")

/**
 * An empty registry, writing updates with `encode` and ordering them with `isNewer`. A
 * socket with more than `maxUnsentBytes` not taken by its client (queued, or written and
 * not sent) is closed with `backlogCloseCode`: a client that sends and never reads would
 * otherwise hold the server's memory with its answers.
 */
export const make = (
  encode: (type: "state" | "update", update: unknown, marks: UpdateMarks) => string,
  isNewer: ((update: unknown, than: unknown) => boolean) | undefined,
  maxUnsentBytes: number = defaultMaxUnsentBytes
): Registry => {
  const byToken = new Map<string, Connection>()

  // Queued in one step (an unbounded queue takes it at once, its bytes bounded here); a
  // socket detached meanwhile, its queue shut down, takes nothing.
  const offer = (connection: Connection, frame: string) => {
    if (Deferred.isDoneUnsafe(connection.closed)) return
    if (connection.unsent + frame.length + connection.buffered() > maxUnsentBytes) {
      Deferred.doneUnsafe(
        connection.closed,
        Effect.succeed({ code: backlogCloseCode, reason: `over ${maxUnsentBytes} bytes unread` })
      )
      return
    }
    if (Queue.offerUnsafe(connection.outgoing, frame)) connection.unsent += frame.length
  }

  const sendUpdate = (connection: Connection, type: "state" | "update", update: unknown, marks: UpdateMarks) =>
    Effect.suspend(() => {
      const last = connection.last
      if (isNewer !== undefined && last !== undefined && marks.seq === undefined && !isNewer(update, last.update)) {
        return Metric.update(overtaken, 1)
      }
      // an answer is sent all the same: marked when a newer state went before it
      const older = isNewer !== undefined && last !== undefined && isNewer(last.update, update)
      if (!older) connection.last = { update }
      let frame: string
      try {
        frame = encode(type, update, older ? { ...marks, overtaken: true } : marks)
      } catch (cause) {
        // An answer's event was applied (or, for a duplicate, before): said so, finally, since
        // a resend would be answered with a state that cannot be encoded either.
        const message = `update cannot be encoded: ${String(cause)}`
        return Effect.andThen(
          Effect.logWarning(`socket ${connection.id}: ${message}`),
          Effect.sync(() =>
            offer(
              connection,
              JSON.stringify({
                type: "error",
                message,
                ...(marks.seq === undefined ? {} : { seq: marks.seq, applied: true })
              })
            )
          )
        )
      }
      return Effect.sync(() => offer(connection, frame))
    })

  return {
    attach: (id, token, client, buffered = () => 0) =>
      Effect.gen(function* () {
        const connection: Connection = {
          id,
          token,
          client,
          outgoing: yield* Queue.unbounded<string>(),
          unsent: 0,
          buffered,
          last: undefined,
          closed: yield* Deferred.make<CloseReason>()
        }
        byToken.set(token, connection)
        yield* Metric.update(open, 1)
        return connection
      }),
    detach: (connection) =>
      Effect.suspend(() => {
        // A socket replaced by its client's newer one is no longer the token's: it goes all the same.
        if (byToken.get(connection.token) === connection) byToken.delete(connection.token)
        return Effect.andThen(Metric.update(open, -1), Queue.shutdown(connection.outgoing))
      }),
    send: (connection, message) => Effect.sync(() => offer(connection, JSON.stringify(message))),
    sendUpdate,
    find: (token) => byToken.get(token),
    close: (token, id, reason) =>
      Effect.suspend(() => {
        const connection = byToken.get(token)
        return connection === undefined || connection.id !== id
          ? Effect.void
          : Effect.asVoid(Deferred.succeed(connection.closed, reason))
      }),
    deliver: (token, update) =>
      Effect.suspend(() => {
        const connection = byToken.get(token)
        // The socket closed after the mailbox looked it up: nothing to tell it any more.
        return connection === undefined ? Effect.void : sendUpdate(connection, "update", update, {})
      })
  }
}
