/**
 * The last applied `seq` of each client of a token, kept in a slice of the token's state and
 * written in the same modification as the events it counts: the two land together or not
 * at all.
 *
 * @internal
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as StateManager from "../../StateManager.js"
import { codecOf } from "../state/codec.js"

/** Clients remembered per token: the least recently used beyond it is dropped. */
export const maxClients = 8

/** Dropped clients remembered per token, so that a dropped client is never taken for a new one. */
export const maxForgotten = 64

/** What the slice holds: `[client, last]` from least to most recently used, and the ids dropped. */
export const SeqState = Schema.Struct({
  clients: Schema.Array(Schema.Tuple([Schema.String, Schema.Int])),
  forgotten: Schema.Array(Schema.String)
})
export type SeqState = typeof SeqState.Type

/** The slice, in every token that a client with `seq` wrote to. */
export const seqSlice = StateManager.slice("leasehold.seq", SeqState, { clients: [], forgotten: [] })

/** The longest client id a socket may name. */
export const maxClientLength = 64

/**
 * The most bytes the slice takes stored: every client and dropped id at its longest (their
 * characters need no escaping in JSON), every `last` at the largest `seq`. A token's every
 * modification writes it, so `maxValueBytes` must hold it.
 */
export const maxEncodedBytes: number = (() => {
  const id = "x".repeat(maxClientLength)
  const worst: SeqState = {
    clients: Array.from({ length: maxClients }, () => [id, Number.MAX_SAFE_INTEGER] as const),
    forgotten: Array.from({ length: maxForgotten }, () => id)
  }
  return Buffer.byteLength(Result.getOrThrow(codecOf(seqSlice).encode(worst)), "utf8")
})()

/** What is done with a frame of `seq` from `client`, against the last applied `seq`. */
export type Verdict =
  | { readonly _tag: "Apply" }
  | { readonly _tag: "Duplicate" }
  | { readonly _tag: "Resend"; readonly from: number }
  | { readonly _tag: "Forgotten" }

const apply: Verdict = { _tag: "Apply" }
const duplicate: Verdict = { _tag: "Duplicate" }
const forgotten: Verdict = { _tag: "Forgotten" }

/**
 * Only `last + 1` is applied. A client not remembered starts at 0 when its first `seq` is 1;
 * one that comes with more (its `last` was dropped) or that was dropped is told so, and
 * nothing of it is applied: its frame may be the resend of an event applied before.
 */
export const check = (state: SeqState, client: string, seq: number): Verdict => {
  const entry = state.clients.find(([id]) => id === client)
  if (entry === undefined) return seq === 1 && !state.forgotten.includes(client) ? apply : forgotten
  const last = entry[1]
  if (seq === last + 1) return apply
  return seq <= last ? duplicate : { _tag: "Resend", from: last + 1 }
}

/** The last applied `seq` of `client`, 0 when none is remembered. */
export const lastOf = (state: SeqState, client: string): number => state.clients.find(([id]) => id === client)?.[1] ?? 0

/** `state` with `client` at `seq`, now its most recently used; the least recent beyond the bound dropped. */
export const advance = (state: SeqState, client: string, seq: number): SeqState => {
  const clients = state.clients.filter(([id]) => id !== client)
  clients.push([client, seq])
  if (clients.length <= maxClients) return { clients, forgotten: state.forgotten }
  const dropped = clients.splice(0, clients.length - maxClients).map(([id]) => id)
  return { clients, forgotten: [...state.forgotten, ...dropped].slice(-maxForgotten) }
}
