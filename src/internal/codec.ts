/**
 * The wire forms of what the stores keep as strings: signals on a token's channel, notices
 * on a worker's channel, socket records and presence messages. Decoding never throws: a message that is not
 * a signal (or not a notice about the token asked for) is `undefined`, a record that does
 * not decode is `CorruptValue`.
 *
 * @internal
 */

import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type { HandedOver, Notice, PresenceMessage, Signal, SocketRecord } from "../Store.js"
import { CorruptValue } from "../StoreError.js"
import { describeParseError, parseSafely } from "./parse.js"
import { parseFence } from "./store/replies.js"

/** Wire form of a signal on a token's channel. @internal */
export const encodeSignal = (signal: Signal): string =>
  signal._tag === "Released"
    ? signal.lockId === undefined
      ? "released"
      : `released:${signal.lockId}`
    : `contended:${signal.instanceId}`

/** `undefined` for a message that is not a signal: it is ignored, never fatal. @internal */
export const decodeSignal = (message: string): Signal | undefined => {
  if (message === "released") return { _tag: "Released" }
  if (message.startsWith("released:") && message.length > "released:".length) {
    return { _tag: "Released", lockId: message.slice("released:".length) }
  }
  if (message.startsWith("contended:") && message.length > "contended:".length) {
    return { _tag: "Contended", instanceId: message.slice("contended:".length) }
  }
  return undefined
}

/**
 * Wire form of a notice to a worker about `token` (docs/design.md#notices-reach-one-worker):
 * `granted:<token> <fence>` or `contended:<token>`. A worker's channel carries the notices of every
 * token on a single server, so the token is always part of the message; a token may contain `:` but
 * never a space, so the fence after the space is never part of it. The queue steps publish the
 * `granted:<token>` of a notice without a fence, and append ` <fence>` themselves (the
 * fence as the grant finds it), then, for a grant that installed the grantee's lock id,
 * ` <json>` (see `handedOver`); a notice without a number (an older store's, or a fence
 * that was not one) decodes as a `Granted` without `fence`.
 *
 * @internal
 */
export const encodeNotice = (token: string, notice: Notice): string =>
  notice._tag === "Granted"
    ? notice.fence === undefined
      ? `granted:${token}`
      : `granted:${token} ${notice.fence}`
    : `contended:${token}`

const granted: Notice = { _tag: "Granted" }
const contended: Notice = { _tag: "Contended" }

/**
 * The JSON a grant that installed the grantee's lock id appends: `[queued, lockId, name,
 * value | false, ...]`. `undefined` when it is not that (the notice is then an ordinary
 * `Granted`: the grantee claims the grant).
 */
const handedOver = (json: string): HandedOver | undefined => {
  let parsed: unknown
  try {
    parsed = JSON.parse(json)
  } catch {
    return undefined
  }
  if (!Array.isArray(parsed) || parsed.length % 2 !== 0) return undefined
  const [queued, lockId] = parsed
  if (typeof queued !== "number" || !Number.isInteger(queued) || queued < 0) return undefined
  if (typeof lockId !== "string" || lockId.length === 0) return undefined
  const values = new Map<string, Option.Option<string>>()
  for (let i = 2; i < parsed.length; i += 2) {
    const name: unknown = parsed[i]
    const value: unknown = parsed[i + 1]
    if (typeof name !== "string" || (value !== false && typeof value !== "string")) return undefined
    values.set(name, value === false ? Option.none() : Option.some(value))
  }
  return { lockId, queued, values }
}

/**
 * `granted:<token>` with its fence, if any, and what a grant that installed the grantee's
 * lock id carries; `undefined` when the part after the space is not a fence.
 */
const grantedNotice = (rest: string): { readonly token: string; readonly notice: Notice } | undefined => {
  const space = rest.indexOf(" ")
  if (space < 0) return { token: rest, notice: granted }
  const token = rest.slice(0, space)
  const second = rest.indexOf(" ", space + 1)
  const fence = parseFence(second < 0 ? rest.slice(space + 1) : rest.slice(space + 1, second))
  if (fence === undefined) return undefined
  const over = second < 0 ? undefined : handedOver(rest.slice(second + 1))
  return {
    token,
    notice: over === undefined ? { _tag: "Granted", fence } : { _tag: "Granted", fence, handedOver: over }
  }
}

/** A message of a worker's notice channel as the notice and its token; `undefined` for anything else. @internal */
export const decodeTokenNotice = (message: string): { readonly token: string; readonly notice: Notice } | undefined => {
  const colon = message.indexOf(":")
  if (colon < 0) return undefined
  const kind = message.slice(0, colon)
  const rest = message.slice(colon + 1)
  const decoded =
    kind === "granted" ? grantedNotice(rest) : kind === "contended" ? { token: rest, notice: contended } : undefined
  return decoded === undefined || decoded.token.length === 0 ? undefined : decoded
}

/** The notice about `token` in a message of a worker's channel; `undefined` for another token's or anything else. @internal */
export const decodeNotice = (token: string, message: string): Notice | undefined => {
  const decoded = decodeTokenNotice(message)
  return decoded?.token === token ? decoded.notice : undefined
}

const SocketRecordSchema = Schema.Struct({ instanceId: Schema.String, connectionId: Schema.String })
const decodeRecordJson = parseSafely(Schema.decodeUnknownResult(Schema.fromJsonString(SocketRecordSchema)))

/** Canonical JSON of a record: the field order is fixed so stores may compare strings. @internal */
export const encodeSocketRecord = (record: SocketRecord): string =>
  JSON.stringify({ instanceId: record.instanceId, connectionId: record.connectionId })

/** @internal */
export const decodeSocketRecord = (key: string, raw: string): Result.Result<SocketRecord, CorruptValue> =>
  Result.mapError(decodeRecordJson(raw), (error) => new CorruptValue({ key, raw, reason: describeParseError(error) }))

const PresenceMessageSchema = Schema.Union([
  Schema.TaggedStruct("Ask", {
    askId: Schema.String,
    from: Schema.String,
    token: Schema.String,
    connectionId: Schema.String
  }),
  Schema.TaggedStruct("Answer", { askId: Schema.String, linked: Schema.Boolean })
])
const decodePresenceJson = parseSafely(Schema.decodeUnknownResult(Schema.fromJsonString(PresenceMessageSchema)))

/** Wire form of a message on a worker's presence channel (JSON: a connection id may hold any character). @internal */
export const encodePresenceMessage = (message: PresenceMessage): string => JSON.stringify(message)

/** A presence message, or `undefined` for anything else published on the channel. @internal */
export const decodePresenceMessage = (raw: string): PresenceMessage | undefined => {
  const decoded = decodePresenceJson(raw)
  return Result.isSuccess(decoded) ? decoded.success : undefined
}
