/**
 * The sockets this worker holds, and the delivery of updates to them.
 *
 * Updates of one token may reach its socket's owner out of order: bumps committed one
 * after the other on two workers travel through two senders. The owner therefore sends a
 * socket only updates newer than the last one it sent (by `(epoch, v)`, which the lock
 * orders); an older one is dropped, since the newer state it was overtaken by is already
 * on its way. The client's last update is thus always the token's latest state.
 *
 * Delivery never waits on a socket: frames go to the connection's own queue, which the
 * connection's writer empties.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Queue from "effect/Queue"
import { type Count, isNewer } from "./Counter.js"
import { encode, type ServerMessage } from "./Protocol.js"

/** One socket held by this worker. */
export interface Connection {
  readonly id: string
  readonly token: string
  /** Frames to write, in order. */
  readonly outgoing: Queue.Queue<string>
  /** The version of the last state sent. */
  last: Pick<Count, "v" | "epoch">
  /** Done when the server closes the socket (its token is held by a socket of another worker now). */
  readonly closed: Deferred.Deferred<void>
}

/** Sockets open on this worker. */
export const open = Metric.gauge("counter_sockets_open", { description: "WebSockets open on this worker" })

/** Updates not sent because a newer one had been sent already. */
export const overtaken = Metric.counter("counter_updates_overtaken_total", {
  description: "updates dropped because a newer state had already been sent to the socket",
  incremental: true
})

/** This worker's sockets, by token. */
export class Sockets extends Context.Service<
  Sockets,
  {
    readonly attach: (id: string, token: string) => Effect.Effect<Connection>
    readonly detach: (connection: Connection) => Effect.Effect<void>
    /** Send a frame to a connection (never waits). */
    readonly send: (connection: Connection, message: ServerMessage) => Effect.Effect<void>
    /** Send a state of the counter, unless a newer one was sent already. */
    readonly sendCount: (connection: Connection, type: "state" | "update", count: Count) => Effect.Effect<void>
    /**
     * Close the socket `id` of `token`: another worker's socket holds the token now (it
     * took the record over while this worker seemed gone). The tab reconnects there.
     */
    readonly close: (token: string, id: string) => Effect.Effect<void>
    /** The `deliver` of the worker's mailbox: the update to the token's socket on this worker. */
    readonly deliver: (token: string, count: Count) => Effect.Effect<void>
  }
>()("counter/Sockets") {}

/** An empty registry: built before the leasehold worker, whose `deliver` uses it, and closed after it. */
export const layer = Layer.sync(Sockets, () => {
  const byToken = new Map<string, Connection>()

  // Queued in one step (an unbounded queue takes it at once); a socket detached meanwhile,
  // its queue shut down, takes nothing.
  const send = (connection: Connection, message: ServerMessage) =>
    Effect.sync(() => {
      Queue.offerUnsafe(connection.outgoing, encode(message))
    })

  const sendCount = (connection: Connection, type: "state" | "update", count: Count) =>
    Effect.suspend(() => {
      if (!isNewer(count, connection.last)) return Metric.update(overtaken, 1)
      connection.last = { v: count.v, epoch: count.epoch }
      return send(connection, { type, n: count.n, v: count.v })
    })

  return Sockets.of({
    attach: (id, token) =>
      Effect.gen(function* () {
        const connection: Connection = {
          id,
          token,
          outgoing: yield* Queue.unbounded<string>(),
          last: { v: -1, epoch: Number.NEGATIVE_INFINITY },
          closed: yield* Deferred.make<void>()
        }
        byToken.set(token, connection)
        yield* Metric.update(open, 1)
        return connection
      }),
    detach: (connection) =>
      Effect.suspend(() => {
        if (byToken.get(connection.token) !== connection) return Effect.void
        byToken.delete(connection.token)
        return Effect.andThen(Metric.update(open, -1), Queue.shutdown(connection.outgoing))
      }),
    send,
    sendCount,
    close: (token, id) =>
      Effect.suspend(() => {
        const connection = byToken.get(token)
        return connection === undefined || connection.id !== id
          ? Effect.void
          : Effect.asVoid(Deferred.succeed(connection.closed, undefined))
      }),
    deliver: (token, count) =>
      Effect.suspend(() => {
        const connection = byToken.get(token)
        // The socket closed after the mailbox looked it up: nothing to tell it any more.
        return connection === undefined ? Effect.void : sendCount(connection, "update", count)
      })
  })
})
