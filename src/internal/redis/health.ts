/**
 * The readiness of a Redis store's connections, as one `ConnectionStatus`: ready when the
 * command connection, the acknowledged one (with `minReplicasAck`) and every subscriber
 * connection are; `epoch` counts each time one of
 * them became ready (and each topology change that cost subscriptions). ioredis reports
 * through events; they update a record synchronously, and a fiber mirrors it into a
 * `SubscriptionRef` (event listeners cannot run effects).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { Cluster, Redis } from "ioredis"
import type { ConnectionStatus } from "../../Store.js"
import { StoreUnavailable } from "../../StoreError.js"
import { type Endpoint, scrub } from "./connection.js"

type Role = "command" | "acknowledged" | "subscriber"

/** @internal */
export interface Health {
  readonly status: SubscriptionRef.SubscriptionRef<ConnectionStatus>
  /**
   * Follow a connection, the command connection, the acknowledged one or a subscriber:
   * each `ready` is a new epoch; `close` and `end` are down.
   */
  readonly track: (connection: Redis | Cluster, role: Role, onChange?: (ready: boolean) => void) => void
  /** A subscriber connection closed for good: it no longer counts. */
  readonly forget: (connection: Redis) => void
  /** Something that cost subscriptions happened (slots moved): a new epoch, so listeners resubscribe at once. */
  readonly newEpoch: () => void
  /** The `error` listener of every connection: remembers the last error, scrubbed of credentials. */
  readonly onError: (error: Error) => void
  /** The error of an operation that found no connection within `timeoutMs`. */
  readonly notConnected: (
    operation: string,
    timeoutMs: number,
    /** The variables the user set the target and the timeout with, to name in the message. */
    names?: { readonly target?: string; readonly timeout?: string }
  ) => () => StoreUnavailable
  /** Bring the status up to date now. */
  readonly sync: Effect.Effect<void>
}

/** @internal */
export const make = (endpoint: Endpoint): Effect.Effect<Health, never, Scope.Scope> =>
  Effect.gen(function* () {
    let command = false
    // ready unless the store has an acknowledged connection and it is not
    let acknowledged = true
    let epoch = 0
    let lastError: string | undefined
    const subscribers = new Map<Redis | Cluster, boolean>()
    const snapshot = (): ConnectionStatus => {
      let ready = command && acknowledged && subscribers.size > 0
      for (const up of subscribers.values()) ready &&= up
      return { ready, epoch }
    }
    const status = yield* SubscriptionRef.make<ConnectionStatus>(snapshot())
    const events = yield* Queue.unbounded<void>()
    const sync = Effect.gen(function* () {
      const current = yield* SubscriptionRef.get(status)
      const next = snapshot()
      if (current.ready === next.ready && current.epoch === next.epoch) return
      yield* SubscriptionRef.set(status, next)
      yield* Effect.logDebug(
        next.ready
          ? `RedisStore: connected to ${endpoint.safeUrl} (epoch ${next.epoch})`
          : `RedisStore: connection to ${endpoint.safeUrl} lost${lastError === undefined ? "" : `: ${lastError}`}`
      )
    })
    yield* Queue.take(events).pipe(
      // Events that pile up meanwhile collapse into one update: the epoch still counts each.
      Effect.andThen(Queue.clear(events)),
      Effect.andThen(sync),
      Effect.forever,
      Effect.interruptible,
      Effect.forkScoped
    )
    const changed = () => {
      Queue.offerUnsafe(events, undefined)
    }
    const set = (connection: Redis | Cluster, role: Role, ready: boolean) => {
      if (role === "command") command = ready
      else if (role === "acknowledged") acknowledged = ready
      // a subscriber forgotten (closed for good) counts no more, whatever it reports
      else if (subscribers.has(connection)) subscribers.set(connection, ready)
    }
    return {
      status,
      track: (connection, role, onChange) => {
        if (role === "subscriber") subscribers.set(connection, false)
        if (role === "acknowledged") acknowledged = false
        connection.on("ready", () => {
          set(connection, role, true)
          onChange?.(true)
          epoch++
          changed()
        })
        const down = () => {
          set(connection, role, false)
          onChange?.(false)
          changed()
        }
        connection.on("close", down)
        connection.on("end", down)
      },
      forget: (connection) => {
        subscribers.delete(connection)
        changed()
      },
      newEpoch: () => {
        epoch++
        changed()
      },
      onError: (error) => {
        lastError = scrub(endpoint, error.message)
      },
      notConnected: (operation, timeoutMs, names) => () =>
        new StoreUnavailable({
          operation,
          reason: `not connected to ${endpoint.safeUrl}${names?.target === undefined ? "" : ` (${names.target})`} within ${timeoutMs}ms${names?.timeout === undefined ? "" : ` (${names.timeout})`}${
            lastError === undefined ? "" : ` (last error: ${lastError})`
          }`
        }),
      sync
    }
  })
