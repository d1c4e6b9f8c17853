/**
 * Every command a real redis-server runs, seen through MONITOR on a connection of its own:
 * how tests prove what a component sent (and did not send), without a mock.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { Redis } from "ioredis"
import type * as RedisServer from "./RedisServer.js"

export interface Command {
  /** The arguments, the command's name first and in lower case. */
  readonly args: ReadonlyArray<string>
  /** Run by a script (`EVALSHA`'s own calls), not sent by a client. */
  readonly fromScript: boolean
}

export interface Monitor {
  readonly commands: ReadonlyArray<Command>
}

/** Watch the server for the life of the scope. */
export const monitor = (server: RedisServer.RedisServer): Effect.Effect<Monitor, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Redis(server.port, "127.0.0.1")
      const commands: Array<Command> = []
      const feed = await client.monitor()
      feed.on("monitor", (_time: string, args: ReadonlyArray<string>, source: string) => {
        commands.push({
          args: args.map((arg, i) => (i === 0 ? String(arg).toLowerCase() : String(arg))),
          fromScript: source === "lua"
        })
      })
      return {
        commands,
        close: () => {
          feed.disconnect()
          client.disconnect()
        }
      }
    }),
    (m) => Effect.sync(() => m.close())
  )
