/**
 * The counter app refuses what a hostile client sends, as a real process: a WebSocket
 * message over `MAX_FRAME_BYTES` is closed with 1009 from its frame's header (its payload
 * is never buffered), a body over `MAX_BODY_BYTES` is answered 413, a request target over
 * `MAX_URL_BYTES` 414; a handshake refused on `/ws` leaves no tab linked.
 */
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import WebSocket from "ws"
import { waitUntil } from "../support/waitUntil.js"
import { type App, bump, connect, request, startApp } from "./support.js"

/** One app process with the default bounds, shared by the tests below. */
class Shared extends Context.Service<Shared, App>()("test/limits/Shared") {}

const KiB = 1024
const MB = 1024 * 1024

/** A bump frame of exactly `size` bytes (JSON allows the trailing spaces). */
const bumpFrame = (size: number) => {
  const text = JSON.stringify({ type: "bump", by: 1 })
  return text + " ".repeat(size - text.length)
}

/** A process's resident memory, in bytes (`VmRSS` or `VmHWM`, its peak, from /proc). */
const memory = (pid: number, field: "VmRSS" | "VmHWM") => {
  const line = fs
    .readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((line) => line.startsWith(`${field}:`))
  return Number(line!.split(/\s+/)[1]) * 1024
}

interface Closed {
  readonly code: number
  /** What the client still had to send when it last looked before the close (polled). */
  readonly unsent: number
}

/** Send `data` as one message on a fresh socket, and wait for the server to close it. */
const sendAndAwaitClose = (app: App, data: string | Buffer, ms = 20_000) =>
  Effect.callback<Closed>((resume) => {
    const socket = new WebSocket(`ws://127.0.0.1:${app.port}/ws`)
    let unsent = 0
    const poll = setInterval(() => {
      unsent = socket.bufferedAmount
    }, 10)
    const timer = setTimeout(() => {
      clearInterval(poll)
      socket.terminate()
      resume(Effect.die(`the socket was not closed within ${ms} ms`))
    }, ms)
    socket.on("open", () => socket.send(data))
    socket.on("close", (code) => {
      clearTimeout(timer)
      clearInterval(poll)
      resume(Effect.succeed({ code, unsent }))
    })
    socket.on("error", () => {})
    return Effect.sync(() => {
      clearTimeout(timer)
      clearInterval(poll)
      socket.terminate()
    })
  })

/** A WebSocket client at the byte level: the handshake, then raw bytes out and frames in. */
const rawSocket = (app: App) =>
  Effect.gen(function* () {
    const socket = yield* Effect.acquireRelease(
      Effect.callback<net.Socket>((resume) => {
        const socket = net.connect(app.port, "127.0.0.1", () => resume(Effect.succeed(socket)))
        socket.on("error", () => {})
      }),
      (socket) => Effect.sync(() => socket.destroy())
    )
    const listeners = new Set<() => void>()
    const closes: Array<number> = []
    let ended = false
    let buffer = Buffer.alloc(0)
    let upgraded = false
    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk])
      if (!upgraded) {
        const end = buffer.indexOf("\r\n\r\n")
        if (end === -1) return
        assert.match(buffer.subarray(0, end).toString(), /^HTTP\/1\.1 101/)
        upgraded = true
        buffer = buffer.subarray(end + 4)
      }
      // Server frames are not masked: opcode, length (7 bits, or 16 or 64 more), payload.
      while (buffer.length >= 2) {
        const opcode = buffer[0]! & 0x0f
        let length = buffer[1]! & 0x7f
        let offset = 2
        if (length === 126) {
          if (buffer.length < 4) break
          length = buffer.readUInt16BE(2)
          offset = 4
        } else if (length === 127) {
          if (buffer.length < 10) break
          length = Number(buffer.readBigUInt64BE(2))
          offset = 10
        }
        if (buffer.length < offset + length) break
        if (opcode === 0x8) closes.push(length >= 2 ? buffer.readUInt16BE(offset) : 1005)
        buffer = buffer.subarray(offset + length)
      }
      for (const listener of [...listeners]) listener()
    })
    socket.on("close", () => {
      ended = true
      for (const listener of [...listeners]) listener()
    })
    socket.write(
      "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    yield* waitUntil(
      listeners,
      () => (upgraded ? true : undefined),
      15_000,
      () => "no 101 answer"
    )
    return {
      write: (data: Buffer) =>
        Effect.callback<void>((resume) => {
          socket.write(data, () => resume(Effect.void))
        }),
      /** The code of the first close frame the server sent, within `ms`. */
      closed: (ms: number) =>
        waitUntil(
          listeners,
          () => closes[0] ?? (ended ? -1 : undefined),
          ms,
          () => `no close frame within ${ms} ms`
        )
    }
  })

/** The header of a masked (client) text frame announcing `length` bytes of payload, mask 0. */
const frameHeader = (length: number) => {
  const header = Buffer.alloc(14)
  header[0] = 0x81 // FIN, text
  header[1] = 0x80 | 127 // masked, 64-bit length
  header.writeBigUInt64BE(BigInt(length), 2)
  return header // the last 4 bytes: a mask of zeros, which leaves the payload as it is
}

/** An HTTP request with the given headers and body chunks, on a fresh connection: its status. */
const post = (url: string, headers: Record<string, string | number>, chunks: ReadonlyArray<Buffer>) =>
  Effect.callback<number>((resume) => {
    const req = http.request(url, { method: "POST", agent: false, headers }, (res) => {
      res.resume()
      resume(Effect.succeed(res.statusCode ?? 0))
    })
    // The server may close the connection before it has read what was sent.
    req.on("error", (error) => resume(Effect.die(`POST ${url}: ${error.message}`)))
    req.flushHeaders()
    for (const chunk of chunks) req.write(chunk)
    // A declared length and no chunks: the body is left unsent, as a slow upload's would be.
    if (headers["content-length"] === undefined || chunks.length > 0) req.end()
    return Effect.sync(() => req.destroy())
  })

layer(Layer.effect(Shared, startApp()), { excludeTestServices: true })(
  "counter app: bounds on what a client sends",
  (it) => {
    it.effect("a message of MAX_FRAME_BYTES (64 KiB) is handled; one byte more closes the socket with 1009", () =>
      Effect.gen(function* () {
        const app = yield* Shared
        const client = yield* connect(app)
        yield* client.send(bumpFrame(64 * KiB))
        assert.strictEqual((yield* client.waitFor((frame) => frame.type === "update")).n, 1)
        assert.isTrue(client.isOpen())
        assert.strictEqual((yield* sendAndAwaitClose(app, bumpFrame(64 * KiB + 1))).code, 1009)
        yield* app.waitFor(/a message over the frame cap, closed with 1009/)
        // the app goes on serving
        const again = yield* connect(app)
        yield* again.send(bumpFrame(100))
        yield* again.waitFor((frame) => frame.type === "update")
      })
    )

    it.effect("a frame announcing 50 MB is closed with 1009 from its header, before its payload is sent", () =>
      Effect.gen(function* () {
        const app = yield* Shared
        const raw = yield* rawSocket(app)
        // The header and the first MiB of the payload; the other 49 MB are never sent.
        yield* raw.write(frameHeader(50 * MB))
        yield* raw.write(Buffer.alloc(MB, 0x20))
        assert.strictEqual(yield* raw.closed(10_000), 1009)
      })
    )

    it.effect("a handshake refused on /ws (400) leaves nothing behind: its token stays free for the tab", () =>
      Effect.gen(function* () {
        const app = yield* Shared
        // An upgrade to /ws without a Sec-WebSocket-Key: the route links the token, then ws refuses the handshake.
        const answer = yield* Effect.callback<string>((resume) => {
          const socket = net.connect(app.port, "127.0.0.1", () =>
            socket.write(
              "GET /ws?token=tab-refused HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n" +
                "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
          )
          let received = ""
          socket.on("data", (chunk: Buffer) => {
            received += chunk.toString()
          })
          socket.on("error", () => {})
          socket.on("close", () => resume(Effect.succeed(received)))
          return Effect.sync(() => socket.destroy())
        })
        assert.match(answer, /^HTTP\/1\.1 400/)
        // The tab of that token links it: nobody else holds it (no fresh token).
        const client = yield* connect(app, "tab-refused")
        assert.strictEqual(yield* client.token, "tab-refused")
        assert.isUndefined(
          client.frames.find((frame) => frame.type === "new_token"),
          JSON.stringify(client.frames)
        )
      })
    )

    it.effect("a body over MAX_BODY_BYTES (64 KiB) is answered 413, by its Content-Length or as it arrives", () =>
      Effect.gen(function* () {
        const app = yield* Shared
        const url = `${app.url}/api/bump?token=tab-body`
        // within the bound: the bump is served (the body is not read)
        assert.strictEqual(yield* post(url, { "content-length": 64 * KiB }, [Buffer.alloc(64 * KiB)]), 200)
        assert.strictEqual(yield* post(url, { "transfer-encoding": "chunked" }, [Buffer.alloc(64 * KiB)]), 200)
        // a declared 50 MB: refused from the header, with only its first 64 KiB sent
        assert.strictEqual(yield* post(url, { "content-length": 50 * MB }, []), 413)
        assert.strictEqual(yield* post(url, { "content-length": 64 * KiB + 1 }, [Buffer.alloc(64 * KiB + 1)]), 413)
        // no length: refused once past the bound
        const chunks = Array.from({ length: 5 }, () => Buffer.alloc(16 * KiB + 1))
        assert.strictEqual(yield* post(url, { "transfer-encoding": "chunked" }, chunks), 413)
        // the refused bumps did not happen
        assert.strictEqual((yield* request("GET", `${app.url}/api/state?token=tab-body`)).body.n, 2)
      })
    )

    it.effect("a request target over MAX_URL_BYTES (8 KiB) is answered 414", () =>
      Effect.gen(function* () {
        const app = yield* Shared
        const base = `/api/state?token=tab-url&pad=`
        const at = (length: number) => `${app.url}${base}${"a".repeat(length - base.length)}`
        assert.strictEqual((yield* request("GET", at(8 * KiB))).status, 200)
        const refused = yield* request("GET", at(8 * KiB + 1))
        assert.strictEqual(refused.status, 414)
        assert.strictEqual(refused.body.code, "UrlTooLong")
        // "/api/bump" is one byte shorter than "/api/state"
        assert.strictEqual((yield* request("POST", at(8 * KiB + 2).replace("/api/state", "/api/bump"))).status, 414)
        assert.strictEqual((yield* bump(app, "tab-url")).body.n, 1)
      })
    )
  }
)

describe("counter app: bounds", () => {
  it.live(
    "a 50 MB message does not grow the process by its size",
    () =>
      Effect.gen(function* () {
        const app = yield* startApp()
        // warm: a socket served, so that what is measured is the message alone
        const client = yield* connect(app)
        yield* client.send(bumpFrame(64 * KiB))
        yield* client.waitFor((frame) => frame.type === "update")
        const before = memory(app.pid, "VmRSS")
        const closed = yield* sendAndAwaitClose(app, Buffer.alloc(50 * MB, 0x20), 60_000)
        assert.strictEqual(closed.code, 1009)
        // closed before the upload was done: most of it was never sent
        assert.isAbove(closed.unsent, 40 * MB)
        const peak = memory(app.pid, "VmHWM")
        assert.isBelow(peak - before, 16 * MB, `RSS ${before} before, peak ${peak}`)
      }),
    90_000
  )

  it.live("the bounds are read from MAX_FRAME_BYTES, MAX_BODY_BYTES and MAX_URL_BYTES", () =>
    Effect.gen(function* () {
      const app = yield* startApp({ env: { MAX_FRAME_BYTES: "1000", MAX_BODY_BYTES: "10", MAX_URL_BYTES: "100" } })
      const client = yield* connect(app)
      yield* client.send(bumpFrame(1000))
      yield* client.waitFor((frame) => frame.type === "update")
      assert.strictEqual((yield* sendAndAwaitClose(app, bumpFrame(1001))).code, 1009)
      const url = `${app.url}/api/bump?token=tab-env`
      assert.strictEqual(yield* post(url, { "content-length": 10 }, [Buffer.alloc(10)]), 200)
      assert.strictEqual(yield* post(url, { "content-length": 11 }, [Buffer.alloc(11)]), 413)
      assert.strictEqual(
        (yield* request("GET", `${app.url}/api/state?token=tab-env&pad=${"a".repeat(100)}`)).status,
        414
      )
    })
  )

  it.live("a bound that is not a whole number of bytes above 0 is refused at start", () =>
    Effect.gen(function* () {
      const app = yield* startApp({ env: { MAX_FRAME_BYTES: "0" }, ready: false })
      assert.notStrictEqual(yield* app.exited, 0)
      yield* app.waitFor(/MAX_FRAME_BYTES must be a whole number of bytes above 0/, 1_000)
    })
  )
})
