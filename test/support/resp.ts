/**
 * A minimal RESP2 client for the test harness: one short-lived loopback connection per
 * command, independent of ioredis so that a harness command never shares a connection,
 * a reconnect policy or an offline queue with the store under test.
 */
import * as net from "node:net"
import * as tls from "node:tls"

/** An error reply (`-ERR ...`) from the server. */
export class ReplyError {
  readonly _tag = "ReplyError"
  constructor(readonly message: string) {}
}

/** A decoded RESP2 reply. Bulk strings are decoded as UTF-8. */
export type Reply = string | number | null | ReplyError | ReadonlyArray<Reply>

type Parsed = readonly [value: Reply, next: number] | undefined

const lineEnd = (buffer: Buffer, offset: number): number => {
  const index = buffer.indexOf("\r\n", offset)
  return index
}

/** Parse one reply at `offset`; `undefined` when the buffer does not hold all of it yet. */
export const parseReply = (buffer: Buffer, offset = 0): Parsed => {
  if (offset >= buffer.length) return undefined
  const end = lineEnd(buffer, offset + 1)
  if (end < 0) return undefined
  const type = String.fromCharCode(buffer[offset] ?? 0)
  const line = buffer.toString("utf8", offset + 1, end)
  const next = end + 2
  switch (type) {
    case "+":
      return [line, next]
    case "-":
      return [new ReplyError(line), next]
    case ":":
      return [Number(line), next]
    case "$": {
      const length = Number(line)
      if (length < 0) return [null, next]
      if (buffer.length < next + length + 2) return undefined
      return [buffer.toString("utf8", next, next + length), next + length + 2]
    }
    case "*": {
      const count = Number(line)
      if (count < 0) return [null, next]
      const items: Array<Reply> = []
      let cursor = next
      for (let i = 0; i < count; i++) {
        const item = parseReply(buffer, cursor)
        if (item === undefined) return undefined
        items.push(item[0])
        cursor = item[1]
      }
      return [items, cursor]
    }
    default:
      throw new Error(`unexpected RESP type byte ${JSON.stringify(type)}`)
  }
}

/** Encode a command as a RESP array of bulk strings. */
export const encodeCommand = (args: ReadonlyArray<string | number>): Buffer => {
  const parts: Array<Buffer> = [Buffer.from(`*${args.length}\r\n`)]
  for (const arg of args) {
    const bytes = Buffer.from(String(arg), "utf8")
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, Buffer.from("\r\n"))
  }
  return Buffer.concat(parts)
}

/**
 * How the harness reaches a server: over TLS (trusting `ca`) and with a password (an
 * `AUTH` sent first, its error reply taken for the command's), or neither.
 */
export interface Access {
  readonly tls?: { readonly ca: string } | undefined
  readonly password?: string | undefined
}

/**
 * Send one command on a fresh connection and resolve with its reply (an error reply
 * resolves as a `ReplyError` value). Rejects on a connection error or after `timeoutMs`.
 */
export const sendCommand = (
  port: number,
  args: ReadonlyArray<string | number>,
  timeoutMs: number,
  access: Access = {}
): Promise<Reply> =>
  new Promise<Reply>((resolve, reject) => {
    let buffer = Buffer.alloc(0)
    let settled = false
    const authenticated = access.password !== undefined
    const socket =
      access.tls === undefined
        ? net.createConnection({ host: "127.0.0.1", port })
        : tls.connect({ host: "127.0.0.1", port, ca: access.tls.ca })
    const finish = (error: Error | undefined, reply?: Reply) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      if (error !== undefined) reject(error)
      else resolve(reply ?? null)
    }
    const timer = setTimeout(
      () => finish(new Error(`${String(args[0])} on port ${port}: no reply within ${timeoutMs} ms`)),
      timeoutMs
    )
    socket.on(access.tls === undefined ? "connect" : "secureConnect", () =>
      socket.write(
        authenticated
          ? Buffer.concat([encodeCommand(["AUTH", access.password!]), encodeCommand(args)])
          : encodeCommand(args)
      )
    )
    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk])
      try {
        const parsed = parseReply(buffer)
        if (parsed === undefined) return
        if (!authenticated || parsed[0] instanceof ReplyError) return finish(undefined, parsed[0])
        const second = parseReply(buffer, parsed[1])
        if (second !== undefined) finish(undefined, second[0])
      } catch (error) {
        finish(error instanceof Error ? error : new Error(String(error)))
      }
    })
    socket.on("error", (error) => finish(error))
    socket.on("close", () => finish(new Error(`${String(args[0])} on port ${port}: connection closed before a reply`)))
  })
