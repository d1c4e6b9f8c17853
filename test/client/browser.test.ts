/**
 * The browser client in Debian's chromium (headless, driven by playwright-core), against
 * the socket session served in this process, through a TCP proxy that can hold the
 * server's answers and cut the page's connection: a burst of clicks across a reconnect is
 * applied exactly once.
 */
import * as net from "node:net"
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import * as SocketSession from "leasehold/SocketSession"
import { Store } from "leasehold/Store"
import type { Page } from "playwright-core"
import { browser } from "../app/chromium.js"
import { handled, serve } from "../fixtures/client/app.js"
import * as Raw from "../session/support.js"

/** A page in a browser context of its own; `init` runs in it before each document's scripts. */
const openPage = (init?: string) =>
  Effect.gen(function* () {
    const chrome = yield* browser
    const context = yield* Effect.acquireRelease(
      Effect.promise(() => chrome.newContext()),
      (context) => Effect.promise(() => context.close())
    )
    if (init !== undefined) yield* Effect.promise(() => context.addInitScript(init))
    return yield* Effect.promise(() => context.newPage())
  })

const newPage = openPage()

/** The embedded store and its settings, shared by what the test serves. */
const sharedStore = Effect.gen(function* () {
  const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(LeaseholdConfig.layer({}))))
  return Context.pick(Store, LeaseholdConfig.LeaseholdConfig)(context)
})

interface Proxy {
  readonly port: number
  /** Keep what the server writes from reaching the page (its answers are lost with the connection). */
  readonly hold: Effect.Effect<void>
  /** Destroy every connection through the proxy, as a network loss; new ones go through. */
  readonly cut: Effect.Effect<void>
  /** Cut, and refuse new connections until `up`. */
  readonly down: Effect.Effect<void>
  readonly up: Effect.Effect<void>
}

/** A TCP proxy on a free loopback port to `targetPort`. */
const proxy = (targetPort: number): Effect.Effect<Proxy, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const sockets = new Set<net.Socket>()
      let holding = false
      let refusing = false
      const server = net.createServer((client) => {
        if (refusing) {
          client.destroy()
          return
        }
        const upstream = net.connect(targetPort, "127.0.0.1")
        sockets.add(client).add(upstream)
        const close = () => {
          client.destroy()
          upstream.destroy()
          sockets.delete(client)
          sockets.delete(upstream)
        }
        client.on("error", close).on("close", close)
        upstream.on("error", close).on("close", close)
        client.on("data", (data) => upstream.write(data))
        upstream.on("data", (data) => {
          if (!holding) client.write(data)
        })
      })
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      const address = server.address() as net.AddressInfo
      const cut = Effect.sync(() => {
        for (const socket of sockets) socket.destroy()
        sockets.clear()
        holding = false
      })
      return {
        port: address.port,
        hold: Effect.sync(() => {
          holding = true
        }),
        cut,
        down: Effect.andThen(
          Effect.sync(() => {
            refusing = true
          }),
          cut
        ),
        up: Effect.sync(() => {
          refusing = false
        }),
        close: () =>
          new Promise<void>((resolve) => {
            for (const socket of sockets) socket.destroy()
            server.close(() => resolve())
          })
      }
    }),
    (proxy) => Effect.promise(() => proxy.close())
  )

/** Wait until `expression`, evaluated in the page, is true; what the page shows otherwise. */
const until = (page: Page, expression: string, step: string, timeout = 15_000) =>
  Effect.tryPromise(() => page.waitForFunction(expression, undefined, { timeout })).pipe(
    Effect.catch(() =>
      Effect.flatMap(
        Effect.promise(() =>
          page.evaluate(
            `JSON.stringify({ text: document.body.innerText, outcomes: window.outcomes, framesSent: window.framesSent, pending: window.session?.pending })`
          )
        ),
        (state) => Effect.die(`${step}: not true within ${timeout} ms: ${expression}\n${state}`)
      )
    )
  )

/** Click the page's +1 `n` times in one turn of its event loop: a burst. */
const burst = (page: Page, n: number) =>
  Effect.promise(() =>
    page.evaluate(`{ const button = document.getElementById("bump"); for (let i = 0; i < ${n}; i++) button.click() }`)
  )

const evaluate = <A>(page: Page, expression: string) => Effect.promise(() => page.evaluate(expression) as Promise<A>)

describe("leasehold/client in chromium", () => {
  it.live(
    "100 clicks, the answers to the first 50 lost with the connection: each applied once, resent ones answered as duplicates",
    () =>
      Effect.gen(function* () {
        const port = yield* serve(yield* sharedStore)
        const route = yield* proxy(port)
        const page = yield* newPage
        yield* Effect.promise(() => page.goto(`http://127.0.0.1:${route.port}/`))
        yield* until(page, `document.getElementById("status").textContent === "open"`, "the first link")
        yield* until(page, `document.getElementById("count").textContent === "0"`, "the state at link")
        const token = yield* evaluate<string>(page, "window.session.token")
        const clientId = yield* evaluate<string>(page, "window.session.clientId")
        const before = handled.calls

        // The first 50 reach the server and are applied; their answers never reach the page.
        yield* route.hold
        yield* burst(page, 50)
        while (handled.calls - before < 50) yield* Effect.sleep("10 millis")
        assert.strictEqual(yield* evaluate<number>(page, "window.outcomes.answered"), 0)
        assert.strictEqual(yield* evaluate<number>(page, "window.session.pending"), 50)
        yield* route.cut
        yield* until(page, `document.getElementById("status").textContent === "closed"`, "the cut")
        // 50 more while the page has no socket: they wait behind the 50 unanswered ones.
        yield* burst(page, 50)

        yield* until(page, "window.outcomes.answered === 100", "every click answered")
        yield* until(page, `document.getElementById("count").textContent === "100"`, "the count")
        assert.deepStrictEqual(yield* evaluate<unknown>(page, "window.outcomes"), {
          answered: 100,
          duplicates: 50,
          failed: []
        })
        assert.strictEqual(handled.calls - before, 100)
        assert.strictEqual(yield* evaluate<number>(page, "window.framesSent"), 150)
        assert.strictEqual(yield* evaluate<number>(page, "window.session.pending"), 0)
        // a reconnect of the same page: the same token and client id
        assert.strictEqual(yield* evaluate<string>(page, "window.session.token"), token)
        assert.strictEqual(yield* evaluate<string>(page, "window.session.clientId"), clientId)

        // A reload keeps the tab's token (sessionStorage), as a new client, and shows the count.
        yield* Effect.promise(() => page.reload())
        yield* until(page, `document.getElementById("count").textContent === "100"`, "after a reload")
        assert.strictEqual(yield* evaluate<string>(page, "window.session.token"), token)
        assert.notStrictEqual(yield* evaluate<string>(page, "window.session.clientId"), clientId)
        yield* burst(page, 1)
        yield* until(page, `document.getElementById("count").textContent === "101"`, "a click after the reload")
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "forgotten: the page's client dropped by the token's later clients goes on as a new client, its waiting click applied once",
    () =>
      Effect.gen(function* () {
        const port = yield* serve(yield* sharedStore)
        const route = yield* proxy(port)
        const page = yield* newPage
        yield* Effect.promise(() => page.goto(`http://127.0.0.1:${route.port}/`))
        yield* until(page, `document.getElementById("status").textContent === "open"`, "the first link")
        yield* burst(page, 1)
        yield* until(page, "window.outcomes.answered === 1", "the first click")
        const token = yield* evaluate<string>(page, "window.session.token")
        const clientId = yield* evaluate<string>(page, "window.session.clientId")

        // While the page cannot reach the server, more clients of its token than the server
        // remembers send an event each: the page's client is dropped.
        yield* route.down
        yield* until(page, `document.getElementById("status").textContent === "closed"`, "the cut")
        for (let i = 0; i < SocketSession.maxClients; i++) {
          yield* Effect.scoped(
            Effect.gen(function* () {
              const other = yield* Raw.connect(port, { token, client: `other-${i}` })
              assert.strictEqual(other.token, token)
              other.send({ type: "bump", by: 1, seq: 1 })
              yield* other.waitFor((frame) => frame.type === "update" && frame.seq === 1)
              yield* other.close
            })
          )
        }
        // a click while the page is cut off: sent once it is back, as seq 2, and answered `forgotten`
        yield* burst(page, 1)
        yield* route.up
        yield* until(page, "window.outcomes.answered === 2", "the waiting click, after forgotten")
        yield* until(
          page,
          `document.getElementById("count").textContent === "${2 + SocketSession.maxClients}"`,
          "the count"
        )
        assert.deepStrictEqual(yield* evaluate<unknown>(page, "window.outcomes"), {
          answered: 2,
          duplicates: 0,
          failed: []
        })
        assert.notStrictEqual(yield* evaluate<string>(page, "window.session.clientId"), clientId)
        assert.strictEqual(yield* evaluate<string>(page, "window.session.token"), token)
        // two frames on the first client (1 and 2, forgotten), one as the new client
        assert.strictEqual(yield* evaluate<number>(page, "window.framesSent"), 3)
      }).pipe(Effect.scoped),
    60_000
  )

  it.live(
    "a duplicated tab gets a token of its own and keeps it; an event over the frame cap fails unsent, the socket kept",
    () =>
      Effect.gen(function* () {
        const port = yield* serve(yield* sharedStore)
        const url = `http://127.0.0.1:${port}/`
        const first = yield* newPage
        yield* Effect.promise(() => first.goto(url))
        yield* until(first, `document.getElementById("status").textContent === "open"`, "the first tab")
        yield* burst(first, 3)
        yield* until(first, `document.getElementById("count").textContent === "3"`, "three clicks")
        const token = yield* evaluate<string>(first, "window.session.token")

        // A duplicated tab starts with a copy of the first one's sessionStorage.
        const copy = `if (!sessionStorage.getItem("leasehold-token")) sessionStorage.setItem("leasehold-token", ${JSON.stringify(token)})`
        const duplicate = yield* openPage(copy)
        yield* Effect.promise(() => duplicate.goto(url))
        yield* until(duplicate, `document.getElementById("status").textContent === "open"`, "the duplicated tab")
        yield* until(duplicate, `document.getElementById("count").textContent === "0"`, "its own state")
        const own = yield* evaluate<string>(duplicate, "window.session.token")
        assert.notStrictEqual(own, token)
        assert.strictEqual(yield* evaluate<string>(duplicate, `sessionStorage.getItem("leasehold-token")`), own)
        yield* Effect.promise(() => duplicate.reload())
        yield* until(duplicate, `document.getElementById("status").textContent === "open"`, "the reloaded duplicate")
        assert.strictEqual(yield* evaluate<string>(duplicate, "window.session.token"), own)
        assert.strictEqual(yield* evaluate<string>(first, "window.session.token"), token)

        const refused = yield* evaluate<unknown>(
          first,
          `window.session.send({ type: "bump", by: 1, pad: "x".repeat(${SocketSession.defaultMaxFrameBytes}) }).then(() => "answered", (error) => [error.name, error.reason, error.applied])`
        )
        assert.deepStrictEqual(refused, ["SendError", "too_large", false])
        yield* burst(first, 1)
        yield* until(first, `document.getElementById("count").textContent === "4"`, "a click after the refused event")
        assert.strictEqual(yield* evaluate<number>(first, "window.framesSent"), 4)
        assert.strictEqual(yield* evaluate<string>(first, `document.getElementById("status").textContent`), "open")
      }).pipe(Effect.scoped),
    60_000
  )
})
