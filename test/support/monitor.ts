/**
 * Every command a real redis-server runs, seen through MONITOR on a connection of its own:
 * how tests prove what a component sent (and did not send), without a mock.
 *
 * The connection is a plain socket, not ioredis: ioredis reads a monitored line that arrives
 * in the same packet as MONITOR's `+OK` as the reply to a command it never sent, and fails
 * with "Command queue state error" (seen when another client connects at that moment).
 */
import * as net from "node:net"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type * as RedisServer from "./RedisServer.js"
import { encodeCommand } from "./resp.js"

export interface Command {
  /** The arguments, the command's name first and in lower case. */
  readonly args: ReadonlyArray<string>
  /** Run by a script (`EVALSHA`'s own calls), not sent by a client. */
  readonly fromScript: boolean
}

export interface Monitor {
  readonly commands: ReadonlyArray<Command>
}

/**
 * The quoted arguments of a monitored line, unescaped as Redis escapes them (`sdscatrepr`:
 * every byte outside printable ASCII as `\xHH`, so the bytes are gathered, then read as UTF-8).
 */
const unquote = (text: string): Array<string> => {
  const args: Array<string> = []
  let i = 0
  while (i < text.length) {
    if (text[i] !== '"') {
      i++
      continue
    }
    const bytes: Array<number> = []
    i++
    while (i < text.length && text[i] !== '"') {
      const c = text[i]!
      if (c !== "\\") {
        bytes.push(c.charCodeAt(0))
        i++
        continue
      }
      const next = text[i + 1] ?? ""
      if (next === "x") {
        bytes.push(Number.parseInt(text.slice(i + 2, i + 4), 16))
        i += 4
        continue
      }
      const escaped = { n: "\n", r: "\r", t: "\t", a: "\u0007", b: "\b" }[next] ?? next
      bytes.push(escaped.charCodeAt(0))
      i += 2
    }
    args.push(Buffer.from(bytes).toString("utf8"))
    i++
  }
  return args
}

/** A monitored line: `<time> [<db> <client address | lua>] "<command>" "<arg>"…`. */
const parseLine = (line: string): Command | undefined => {
  const open = line.indexOf("[")
  const close = line.indexOf("]", open)
  if (open < 0 || close < 0) return undefined
  const source = line.slice(open + 1, close).split(" ")[1] ?? ""
  const args = unquote(line.slice(close + 1))
  if (args.length === 0) return undefined
  return { args: args.map((arg, i) => (i === 0 ? arg.toLowerCase() : arg)), fromScript: source === "lua" }
}

/** Watch the server for the life of the scope; every command run after this returns is seen. */
export const monitor = (server: RedisServer.RedisServer): Effect.Effect<Monitor, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<{ readonly commands: Array<Command>; readonly socket: net.Socket }>((resolve, reject) => {
          const commands: Array<Command> = []
          const socket = net.connect(server.port, "127.0.0.1")
          let buffer = ""
          let confirmed = false
          socket.setEncoding("utf8")
          socket.on("error", (error) => {
            if (!confirmed) reject(error)
          })
          socket.on("data", (chunk: string) => {
            buffer += chunk
            let end = buffer.indexOf("\r\n")
            while (end >= 0) {
              const line = buffer.slice(0, end)
              buffer = buffer.slice(end + 2)
              if (!confirmed) {
                if (line !== "+OK") return reject(new Error(`MONITOR answered ${line}`))
                confirmed = true
                resolve({ commands, socket })
              } else if (line.startsWith("+")) {
                const command = parseLine(line.slice(1))
                if (command !== undefined) commands.push(command)
              }
              end = buffer.indexOf("\r\n")
            }
          })
          socket.write(encodeCommand(["MONITOR"]))
        })
    ),
    (m) => Effect.sync(() => m.socket.destroy())
  )

let markers = 0

/**
 * A barrier in the monitored stream: sends `ECHO <marker>` over a connection of its own and
 * waits until the monitor has seen it, so every command the server ran before the marker is
 * in `commands`. Answers the marker's index: `commands.slice(from, index)` is what ran in
 * between, with no sleep guessing when "nothing more" has arrived. A command sent after the
 * marker may also be seen before it returns; read up to the index, not to the end.
 */
export const barrier = (server: RedisServer.RedisServer, m: Monitor): Effect.Effect<number> =>
  Effect.gen(function* () {
    const marker = `leasehold-test-barrier-${process.pid}-${++markers}`
    yield* Effect.orDie(server.command("ECHO", marker))
    const seen = (): number => m.commands.findIndex((c) => c.args[0] === "echo" && c.args[1] === marker)
    let index = seen()
    // MONITOR writes the line before the ECHO's reply, but the two travel on separate sockets.
    while (index < 0) {
      yield* Effect.sleep("5 millis")
      index = seen()
    }
    return index
  })

/** Commands in `[from, to)` sent by clients (not run inside a script), the marker's own ECHO excluded. */
export const sentBetween = (m: Monitor, from: number, to: number): ReadonlyArray<Command> =>
  m.commands
    .slice(from, to)
    .filter((c) => !c.fromScript && !(c.args[0] === "echo" && c.args[1]?.startsWith("leasehold-test-barrier-")))

/**
 * Wait until clients have nothing more under way on the server: barriers, on a monitor of
 * its own, until two in a row have no command of a client between them. One barrier sees
 * what was sent before it; a chain (a subscription, then the attempt its confirmation
 * starts) may still be sending, and shows as a command between two barriers. For "nothing
 * more happened" without a sleep that guesses when. Dies after `ms` of steady traffic.
 */
export const quiet = (server: RedisServer.RedisServer, ms = 5_000): Effect.Effect<void> =>
  Effect.scoped(
    Effect.gen(function* () {
      const m = yield* monitor(server)
      const deadline = performance.now() + ms
      let from = yield* barrier(server, m)
      while (true) {
        const to = yield* barrier(server, m)
        const sent = sentBetween(m, from, to)
        if (sent.length === 0) return
        if (performance.now() > deadline) {
          return yield* Effect.die(
            `the server was not quiet within ${ms} ms: ${sent.map((c) => c.args.join(" ")).join("; ")}`
          )
        }
        from = to
      }
    })
  )
