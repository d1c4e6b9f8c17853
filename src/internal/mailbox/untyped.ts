/**
 * What the library sees of a mailbox beyond its public service: its send, untyped (the
 * update is checked at run time by the worker's schema, `InvalidUpdate`; `Mailbox.typed`
 * types it by the app's schema, and the library's tests and benchmarks, which send what the
 * schema must refuse, reach it here), and the worker's calls (`calls.ts`), which
 * `SocketSession` uses.
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import type { Mailbox, SendError, SendOutcome } from "../../Mailbox.js"
import type { Caller } from "./calls.js"

/** Send an update of any shape to the socket of `token`. */
export type Send = (token: string, update: unknown) => Effect.Effect<SendOutcome, SendError>

/** A mailbox seen by the library: its untyped send beside the public service. */
export interface Sender extends Mailbox.Service {
  readonly send: Send
}

/** What `Mailbox.make` registers with its service. */
interface Parts {
  readonly send: Send
  readonly caller: Caller
}

const parts = new WeakMap<Mailbox.Service, Parts>()

/** Made by `Mailbox.make` with the service it sends for: its parts are found by the service. */
export const register = (mailbox: Mailbox.Service, registered: Parts): Mailbox.Service => {
  parts.set(mailbox, registered)
  return mailbox
}

const partsOf = (mailbox: Mailbox.Service): Parts => {
  const found = parts.get(mailbox)
  if (found === undefined) throw new Error("a Mailbox service not made by Mailbox.make")
  return found
}

/** The untyped send `Mailbox.make` built with `mailbox`. */
export const sendOf = (mailbox: Mailbox.Service): Send => partsOf(mailbox).send

/** The calls of the worker whose mailbox is `mailbox`. */
export const callerOf = (mailbox: Mailbox.Service): Caller => partsOf(mailbox).caller

/** `mailbox` with its untyped send. */
export const sender = (mailbox: Mailbox.Service): Sender => ({ ...mailbox, send: sendOf(mailbox) })
