/**
 * A mailbox's send, untyped: the update is checked at run time by the worker's schema
 * (`InvalidUpdate`). `Mailbox.typed` types it by the app's schema; the library's tests and
 * benchmarks, which send what the schema must refuse, reach it here.
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import type { Mailbox, SendError, SendOutcome } from "../../Mailbox.js"

/** Send an update of any shape to the socket of `token`. */
export type Send = (token: string, update: unknown) => Effect.Effect<SendOutcome, SendError>

/** A mailbox seen by the library: its untyped send beside the public service. */
export interface Sender extends Mailbox.Service {
  readonly send: Send
}

const sends = new WeakMap<Mailbox.Service, Send>()

/** Made by `Mailbox.make` with the service it sends for: the send is found by the service. */
export const register = (mailbox: Mailbox.Service, send: Send): Mailbox.Service => {
  sends.set(mailbox, send)
  return mailbox
}

/** The untyped send `Mailbox.make` built with `mailbox`. */
export const sendOf = (mailbox: Mailbox.Service): Send => {
  const send = sends.get(mailbox)
  if (send === undefined) throw new Error("a Mailbox service not made by Mailbox.make")
  return send
}

/** `mailbox` with its untyped send. */
export const sender = (mailbox: Mailbox.Service): Sender => ({ ...mailbox, send: sendOf(mailbox) })
