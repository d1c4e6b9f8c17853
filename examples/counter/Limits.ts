/**
 * Bounds on what one HTTP request may bring, checked before any route runs: a request target
 * over `MAX_URL_BYTES` is answered 414; a body over `MAX_BODY_BYTES` 413, from its
 * `Content-Length` (unread) or, chunked, once that many bytes have arrived (no route reads a
 * body; one that did would read at most that much). Both close the connection. Node answers
 * headers over 16 KiB with 431 itself; docs/operations.md lists every bound.
 */
import type { IncomingMessage } from "node:http"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import * as ByteSize from "effect/ByteSize"
import * as Effect from "effect/Effect"
import * as HttpIncomingMessage from "effect/http/HttpIncomingMessage"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"

export interface RequestBounds {
  readonly maxBodyBytes: number
  readonly maxUrlBytes: number
}

const refuse = (status: 413 | 414, message: string) =>
  HttpServerResponse.jsonUnsafe(
    { error: message, code: status === 413 ? "BodyTooLarge" : "UrlTooLong" },
    { status, headers: { connection: "close" } }
  )

/** Apply the bounds to every request of `app`. */
export const bounded =
  (bounds: RequestBounds) =>
  <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      // The app serves HTTP/1.1 only (Node's `http` server).
      const source = NodeHttpServerRequest.toIncomingMessage(request) as IncomingMessage
      // The target as received: its characters are bytes (anything else is percent-encoded).
      const target = source.url ?? ""
      if (target.length > bounds.maxUrlBytes) {
        return refuse(414, `request target longer than ${bounds.maxUrlBytes} bytes (${target.length})`)
      }
      const length = request.headers["content-length"]
      if (length !== undefined && Number(length) > bounds.maxBodyBytes) {
        return refuse(413, `body larger than ${bounds.maxBodyBytes} bytes (${length})`)
      }
      const limited = Effect.provideService(app, HttpIncomingMessage.MaxBodySize, ByteSize.bytes(bounds.maxBodyBytes))
      if (request.headers["transfer-encoding"] === undefined) return yield* limited
      // A body of unknown length: counted as it arrives, and refused once past the bound.
      const within = yield* drainWithin(source, bounds.maxBodyBytes)
      if (!within) return refuse(413, `body larger than ${bounds.maxBodyBytes} bytes`)
      return yield* limited
    })

/**
 * Read `source` to its end, discarding it (no route of the example reads a body): `false`
 * as soon as more than `max` bytes have arrived, and it is left unread from there.
 */
const drainWithin = (source: IncomingMessage, max: number) =>
  Effect.callback<boolean>((resume) => {
    let bytes = 0
    const stop = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onEnd)
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes <= max) return
      stop()
      source.pause()
      resume(Effect.succeed(false))
    }
    const onEnd = () => {
      stop()
      resume(Effect.succeed(true))
    }
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onEnd)
    return Effect.sync(stop)
  })
