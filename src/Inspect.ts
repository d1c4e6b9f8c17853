/**
 * What an operator sees of a token or a worker in the store, read without writing
 * anything: the lock holder and its fencing number, the workers queued for it, the slices
 * with their sizes and expiries, the socket record; a worker's mailbox and where its
 * reader is. The `leasehold inspect` command prints these.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { Store } from "./Store.js"
import type { InvalidInstanceId, InvalidToken, StoreError } from "./StoreError.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface TokenReport {
  readonly token: string
  /** The current holder of the lock, with the fencing number of its grant, if any. */
  readonly lock: Option.Option<{ readonly lockId: string; readonly fence: number; readonly remainingMs: number }>
  /** The workers queued for the lock, head first (a grant pending for one of them shows as the lock `?<worker>`). */
  readonly waiting: ReadonlyArray<string>
  readonly slices: ReadonlyArray<{
    readonly name: string
    readonly bytes: number
    readonly ttlMs: Option.Option<number>
  }>
  /** The socket record, or the reason it cannot be read. */
  readonly socket: Option.Option<
    | {
        readonly _tag: "Record"
        readonly instanceId: string
        readonly connectionId: string
        readonly ttlMs: Option.Option<number>
      }
    | { readonly _tag: "Corrupt"; readonly reason: string }
  >
}

/**
 * @since 0.1.0
 * @category models
 */
export interface InstanceReport {
  readonly instanceId: string
  readonly mailboxLength: number
  /** The id of the last update the worker's reader delivered, as it last recorded it. */
  readonly lastDeliveredId: Option.Option<string>
}

/**
 * Read everything about a token. A token that is not valid (a pattern, say) fails with
 * `InvalidToken` before any I/O.
 *
 * @since 0.1.0
 * @category inspection
 */
export const token = (token: string): Effect.Effect<TokenReport, InvalidToken | StoreError, Store> =>
  Effect.gen(function* () {
    const store = yield* Store
    const keys = yield* store.tokenKeys(token)
    const holder = yield* store.holder(token)
    const waiting = yield* store.queue(token)
    const socket = yield* store.readSocket(token).pipe(
      Effect.map(
        Option.map((record) => ({
          _tag: "Record" as const,
          instanceId: record.instanceId,
          connectionId: record.connectionId,
          ttlMs: Option.flatMap(Option.fromNullishOr(keys.find((key) => key.name === "socket")), (key) => key.ttlMs)
        }))
      ),
      Effect.catchTag("CorruptValue", (error) =>
        Effect.succeed(Option.some({ _tag: "Corrupt" as const, reason: error.message }))
      )
    )
    return {
      token,
      lock: holder,
      waiting,
      slices: keys
        .filter((key) => key.name.startsWith("s:"))
        .map((key) => ({ name: key.name.slice(2), bytes: key.size, ttlMs: key.ttlMs })),
      socket
    } satisfies TokenReport
  })

/**
 * Read a worker's mailbox: its length and where its reader is.
 *
 * @since 0.1.0
 * @category inspection
 */
export const instance = (instanceId: string): Effect.Effect<InstanceReport, InvalidInstanceId | StoreError, Store> =>
  Effect.gen(function* () {
    const store = yield* Store
    return {
      instanceId,
      mailboxLength: yield* store.mailboxLength(instanceId),
      lastDeliveredId: yield* store.mailboxCursor(instanceId)
    }
  })

const orNull = <A>(option: Option.Option<A>): A | null => Option.getOrNull(option)

const ttlText = (ttl: Option.Option<number>) =>
  Option.match(ttl, { onNone: () => "no expiry", onSome: (ms) => `${ms} ms` })

/**
 * A report as plain JSON (absent values are `null`).
 *
 * @since 0.1.0
 * @category rendering
 */
export const tokenJson = (report: TokenReport) => ({
  token: report.token,
  lock: orNull(report.lock),
  waiting: report.waiting,
  slices: report.slices.map((slice) => ({ name: slice.name, bytes: slice.bytes, ttl_ms: orNull(slice.ttlMs) })),
  socket: Option.match(report.socket, {
    onNone: () => null,
    onSome: (socket) =>
      socket._tag === "Corrupt"
        ? { corrupt: socket.reason }
        : { instance_id: socket.instanceId, connection_id: socket.connectionId, ttl_ms: orNull(socket.ttlMs) }
  })
})

/**
 * @since 0.1.0
 * @category rendering
 */
export const instanceJson = (report: InstanceReport) => ({
  instance_id: report.instanceId,
  mailbox_length: report.mailboxLength,
  last_delivered_id: orNull(report.lastDeliveredId)
})

/**
 * A report as lines for a terminal.
 *
 * @since 0.1.0
 * @category rendering
 */
export const tokenText = (report: TokenReport): string =>
  [
    `token   ${report.token}`,
    Option.match(report.lock, {
      onNone: () => "lock    free",
      onSome: (lock) => `lock    held by ${lock.lockId}, fence ${lock.fence}, ${lock.remainingMs} ms left`
    }),
    `waiting ${report.waiting.length === 0 ? "none" : report.waiting.join(", ")}`,
    report.slices.length === 0 ? "slices  none" : "slices",
    ...report.slices.map((slice) => `  ${slice.name}  ${slice.bytes} bytes, ${ttlText(slice.ttlMs)}`),
    Option.match(report.socket, {
      onNone: () => "socket  none",
      onSome: (socket) =>
        socket._tag === "Corrupt"
          ? `socket  corrupt: ${socket.reason}`
          : `socket  instance ${socket.instanceId}, connection ${socket.connectionId}, ${ttlText(socket.ttlMs)}`
    })
  ].join("\n")

/**
 * @since 0.1.0
 * @category rendering
 */
export const instanceText = (report: InstanceReport): string =>
  [
    `instance       ${report.instanceId}`,
    `mailbox        ${report.mailboxLength} entries`,
    `last delivered ${Option.getOrElse(report.lastDeliveredId, () => "nothing yet")}`
  ].join("\n")
