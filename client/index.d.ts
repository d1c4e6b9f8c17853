/**
 * leasehold's browser client (`leasehold/client`): one dependency-free ES module, `index.js`
 * beside this file, that a page loads as it is. It links the tab to a worker over the socket
 * session's WebSocket, keeps the tab's token in `sessionStorage`, reconnects by itself, and
 * delivers each event exactly once: numbered with `seq`, kept until answered, resent in order
 * after a reconnect, each `send` settled by the answer to its event.
 *
 * `E` is the app's event (what `send` takes; the server's event schema), `U` the app's update
 * (the fields of the server's `state` and `update` messages, without the protocol's: `type`,
 * `seq`, `duplicate` and `overtaken`).
 *
 * @since 0.2.0
 */

/**
 * Whether a failed event took effect: `false`, it did not; `"unknown"`, it may have (its
 * answer was lost with the store's outcome, or the server no longer knows this client);
 * `true`, it did, but its answer could not be written (reason `"unanswerable"`).
 *
 * @since 0.2.0
 * @category errors
 */
export type Applied = boolean | "unknown"

/**
 * Why an event failed:
 * - `"refused"`: the server answered `error` with `applied: false` (the handler refused it, the
 *   frame was invalid). An `error` of unknown outcome (the store failed around the commit)
 *   fails nothing: the event is sent again with its seq after a pause, and settled by that answer;
 * - `"unanswerable"`: the server applied it but could not write its answer (its update
 *   schema refused the state: answered `error` with `applied: true`); final, not retried;
 * - `"too_large"`: its frame is over the server's frame cap (`maxFrameBytes` of `hello`);
 * - `"forgotten"`: the server no longer remembers this client's last event, and an earlier
 *   socket carried this one without an answer;
 * - `"new_token"`: the server gave the tab a new token, so a new state, and an earlier socket
 *   carried this event without an answer;
 * - `"closed"`: `close()` was called before its answer came;
 * - `"invalid"`: the event cannot be written as JSON (a cycle, a `BigInt`): refused unsent.
 *
 * @since 0.2.0
 * @category errors
 */
export type Reason = "refused" | "unanswerable" | "too_large" | "forgotten" | "new_token" | "closed" | "invalid"

/**
 * The rejection of `send`'s promise.
 *
 * @since 0.2.0
 * @category errors
 */
export declare class SendError extends Error {
  constructor(message: string, applied: Applied, reason: Reason)
  readonly name: "SendError"
  readonly applied: Applied
  readonly reason: Reason
}

/**
 * What `send` resolves with: the update that answered the event, or, when the server had
 * applied it already (its first answer was lost with a socket), the current state with
 * `duplicate: true`. Either way the event took effect once. `overtaken`: a newer state
 * reached the tab before this answer (it did not go to `onUpdate`).
 *
 * @since 0.2.0
 * @category models
 */
export interface Answer<U> {
  readonly update: U
  readonly duplicate: boolean
  readonly overtaken: boolean
}

/**
 * The socket's state, as `onStatus` reports it and `session.status` holds it.
 * `retryIn` is the delay before the next attempt (absent after `close()`).
 *
 * @since 0.2.0
 * @category models
 */
export type Status =
  | { readonly state: "connecting"; readonly attempt: number }
  | {
      readonly state: "open"
      readonly token: string
      readonly instanceId: string
      readonly maxFrameBytes: number
    }
  | { readonly state: "closed"; readonly code: number; readonly reason: string; readonly retryIn?: number }

/**
 * The reconnection delays: before the n-th consecutive attempt (n ≥ 1) the client waits a
 * uniformly random time between `base` and `min(cap, base · 2^n)`; n goes back to 0 once a link
 * lasted 5 s or an event of it was answered (a `hello` alone does not reset it).
 *
 * @since 0.2.0
 * @category models
 */
export interface Backoff {
  /** The shortest delay, in milliseconds (default 250). */
  readonly base?: number
  /** The longest delay, in milliseconds (default 5000). */
  readonly cap?: number
}

/**
 * @since 0.2.0
 * @category models
 */
export interface Options<U> {
  /** The socket session's address; relative to the page (default `"/ws"`); `http(s)` becomes `ws(s)`. */
  readonly url?: string
  /** The `sessionStorage` key of the tab's token (default `"leasehold-token"`). */
  readonly tokenKey?: string
  /** Each `update` message (the answer to an event, or a change made elsewhere) but one overtaken by a newer state. */
  readonly onUpdate?: (update: U) => void
  /** Each `state` message: the state when the socket is linked, and the answer to a duplicate, but one overtaken by a newer state. */
  readonly onState?: (state: U) => void
  /** The server gave the tab a new token (stored already). */
  readonly onToken?: (token: string) => void
  /** The socket connects, opens (after `hello`) or closes. */
  readonly onStatus?: (status: Status) => void
  /** An `error` message that answers no event. */
  readonly onError?: (message: string) => void
  readonly backoff?: Backoff
}

/**
 * A tab's link to the socket session.
 *
 * @since 0.2.0
 * @category models
 */
export interface Session<E, U> {
  /**
   * Send an event: it is numbered, kept until answered, resent after a reconnect, and
   * settled by its answer. Before the socket opens, events wait, in order.
   */
  send(event: E): Promise<Answer<U>>
  /** Close the socket for good; unanswered events fail with reason `"closed"`. */
  close(): void
  /** The tab's token, once known (read from `sessionStorage` at first, then the server's). */
  readonly token: string | undefined
  /** This page instance's client id (a new one after `forgotten`). */
  readonly clientId: string
  readonly status: Status
  /** How many events wait for their answer. */
  readonly pending: number
}

/**
 * Link this page to the socket session and keep it linked.
 *
 * @example
 * ```js
 * import { connect } from "/leasehold/client.js"
 *
 * const session = connect({ url: "/ws", onUpdate: (u) => show(u.n), onState: (s) => show(s.n) })
 * button.onclick = () => session.send({ type: "bump", by: 1 }).catch((e) => warn(e.message))
 * ```
 *
 * @since 0.2.0
 * @category constructors
 */
export declare function connect<E extends object, U extends object>(options?: Options<U>): Session<E, U>

/**
 * The delay before the `attempt`-th consecutive reconnection (1 for the first), given a
 * `random` number in [0, 1): between `base` and `min(cap, base · 2^attempt)`.
 *
 * @since 0.2.0
 * @category back-off
 */
export declare function retryDelay(attempt: number, random: number, backoff?: Backoff): number

/**
 * A server message that answers a frame with `seq` (`update`, `state`, `error`, `resend`,
 * `forgotten`), as `Outbox.answer` takes it.
 *
 * @since 0.2.0
 * @category outbox
 */
export type Reply =
  | {
      readonly type: "update" | "state"
      readonly seq: number
      readonly duplicate?: boolean
      readonly overtaken?: boolean
      readonly [field: string]: unknown
    }
  | { readonly type: "error"; readonly seq: number; readonly message: string; readonly applied?: Applied }
  | { readonly type: "resend"; readonly seq: number; readonly from: number }
  | { readonly type: "forgotten"; readonly seq: number }

/**
 * The client's bookkeeping of its events, without a socket: numbering, the unanswered
 * events, their resending and the frame cap. `connect` drives one; it is exported to be
 * tested on its own and to drive another transport.
 *
 * @since 0.2.0
 * @category outbox
 */
export declare class Outbox<E extends object, U extends object> {
  /** The seq the next numbered event gets. */
  readonly next: number
  /** Events not answered yet. */
  readonly size: number
  /** Frames sent on the current link and not answered yet. */
  readonly inFlight: number
  /** Consecutive answers of unknown outcome (the pause before `release` grows with it). */
  readonly failures: number
  /** Queue an event; sent at once when linked and not waiting to resend. */
  push(event: E): Promise<Answer<U>>
  /**
   * A link opened (after `hello`): the unanswered events are sent again, in order and with
   * their seq, then the waiting ones; `transmit` sends one frame.
   */
  link(maxFrameBytes: number, transmit: (frame: string) => void): void
  /** The link is lost: frames in flight stay unanswered until the next link. */
  unlink(): void
  /** A link closed with 1009: the largest frame in flight fails as `"too_large"`. */
  refuseLargest(): void
  /**
   * Settle the event a reply answers. `"forgotten"`: the client must start over (`restart`),
   * the frames in flight on this link known not applied;
   * `"retry"`: an answer of unknown outcome held sending, until `release` after a pause.
   */
  answer(reply: Reply): "forgotten" | "retry" | undefined
  /** Send again what was held after an answer of unknown outcome. */
  release(): void
  /**
   * A new token or a forgotten client: events that may have been applied fail as `"unknown"`
   * with this reason; the others wait to be numbered again from 1.
   */
  restart(reason: "new_token" | "forgotten"): void
  /** Every unanswered event fails with reason `"closed"`. */
  close(): void
}
