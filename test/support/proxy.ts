/**
 * A TCP proxy on a free loopback port in front of a real server, that a test can cut and
 * restore: while cut, every connection through it is destroyed and new ones are refused,
 * so one client loses the server while the others keep it.
 */

import * as net from "node:net"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

export interface Proxy {
  readonly port: number
  readonly url: string
  /** Destroy every proxied connection and refuse new ones until `restore`. */
  readonly cut: Effect.Effect<void>
  readonly restore: Effect.Effect<void>
}

export const start = (targetPort: number): Effect.Effect<Proxy, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const sockets = new Set<net.Socket>()
      let open = true
      const server = net.createServer((client) => {
        if (!open) {
          client.destroy()
          return
        }
        const upstream = net.connect(targetPort, "127.0.0.1")
        sockets.add(client)
        sockets.add(upstream)
        const close = () => {
          client.destroy()
          upstream.destroy()
          sockets.delete(client)
          sockets.delete(upstream)
        }
        client.on("error", close).on("close", close)
        upstream.on("error", close).on("close", close)
        client.pipe(upstream)
        upstream.pipe(client)
      })
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      const proxy: Proxy & { readonly close: () => Promise<void> } = {
        port,
        url: `redis://127.0.0.1:${port}`,
        cut: Effect.sync(() => {
          open = false
          for (const socket of sockets) socket.destroy()
          sockets.clear()
        }),
        restore: Effect.sync(() => {
          open = true
        }),
        close: () =>
          new Promise<void>((resolve) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => resolve())
          })
      }
      return proxy
    }),
    (proxy) => Effect.promise(() => proxy.close())
  )
