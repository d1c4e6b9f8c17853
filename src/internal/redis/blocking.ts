/**
 * Blocking mailbox reads (XREAD BLOCK) of a Redis store, on a connection of their own: a
 * blocked command would stall every command queued behind it on a shared connection. The
 * connection is opened on first use, to the node that owns the mailbox (on a Cluster), and
 * replaced when the mailbox's node changes. One read at a time; a read whose caller went
 * away is ended on the server (CLIENT UNBLOCK), and one with no reply long after its block
 * ended means a dead connection, which is replaced.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import type { Redis } from "ioredis"
import { type StoreError, StoreUnavailable } from "../../StoreError.js"
import {
  awaitReady,
  connectionOptions,
  type Endpoint,
  endConnection,
  openConnection,
  toStoreError,
  withLiveClock
} from "./connection.js"
import type { Health } from "./health.js"
import type { Settings, Topology } from "./topology.js"

/** @internal */
export interface Blocking {
  /** XREAD COUNT count BLOCK blockMs STREAMS key afterId: the raw reply, `null` when the block ended empty. */
  readonly read: (key: string, afterId: string, count: number, blockMs: number) => Effect.Effect<unknown, StoreError>
}

/** @internal */
export const make = (
  endpoint: Endpoint,
  topology: Topology,
  health: Health,
  settings: Settings
): Effect.Effect<Blocking, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { commandTimeoutMs } = settings
    let blocking: { readonly node: string; readonly connection: Redis } | undefined
    let clientId: number | undefined
    let closed = false
    const permit = yield* Semaphore.make(1)

    const connectionFor = (key: string): Effect.Effect<Redis, StoreUnavailable> =>
      Effect.gen(function* () {
        const node = yield* topology.nodeOf("mailboxRead", key)
        if (blocking !== undefined && blocking.node === node) return blocking.connection
        // The mailbox moved to another node: the old connection serves nothing now.
        if (blocking !== undefined) endConnection(blocking.connection)
        blocking = undefined
        clientId = undefined
        // A read after the store's scope closed must not open a connection nobody closes.
        if (closed) {
          return yield* Effect.fail(new StoreUnavailable({ operation: "mailboxRead", reason: "the store is closed" }))
        }
        const connection = openConnection(
          topology.endpointOf(node),
          connectionOptions("blocking", settings),
          health.onError
        )
        connection.on("ready", () => {
          connection.client("ID").then(
            (id) => {
              if (blocking?.connection === connection) clientId = id
            },
            () => undefined
          )
        })
        connection.on("close", () => {
          if (blocking?.connection === connection) clientId = undefined
        })
        blocking = { node, connection }
        return connection
      })
    // No QUIT here: it would queue behind a blocked read. Nothing on this connection is
    // worth waiting for.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        if (blocking !== undefined) endConnection(blocking.connection)
      })
    )

    /** Ask the server to end a blocking read whose caller went away, so the connection is free again. */
    const unblock = () => {
      if (clientId === undefined || blocking === undefined) return
      // The UNBLOCK goes to the node the read blocks on.
      topology
        .commandOn(blocking.node)
        ?.client("UNBLOCK", clientId)
        .catch(() => undefined)
    }

    const read = (key: string, afterId: string, count: number, blockMs: number) =>
      permit.withPermits(1)(
        Effect.gen(function* () {
          const connection = yield* connectionFor(key)
          yield* awaitReady(connection, commandTimeoutMs, health.notConnected("mailboxRead", commandTimeoutMs))
          return yield* Effect.tryPromise({
            try: () => connection.xread("COUNT", count, "BLOCK", blockMs, "STREAMS", key, afterId),
            catch: toStoreError(endpoint, "mailboxRead")
          }).pipe(
            Effect.onInterrupt(() => Effect.sync(unblock)),
            Effect.timeout(blockMs + commandTimeoutMs),
            withLiveClock,
            Effect.catchTag("TimeoutError", () =>
              // No reply long after the block ended: the connection is dead without
              // knowing it. Start a fresh one rather than queue behind the lost read.
              Effect.sync(() => connection.disconnect(true)).pipe(
                Effect.andThen(
                  Effect.fail(new StoreUnavailable({ operation: "mailboxRead", reason: "no reply to a blocking read" }))
                )
              )
            )
          )
        })
      )

    return { read }
  })
