/**
 * The counter's page in chromium on Redis, through failures in the middle of a burst of
 * clicks: the page's worker SIGKILLed with answered, committed-but-unanswered, lost and
 * unsent bumps, the page going on through another worker; and Redis (AOF, `appendfsync
 * always`) killed and restarted. Each click is applied once: the count shown and stored is
 * the number of clicks.
 */
import * as net from "node:net"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { Page } from "playwright-core"
import { untilReal } from "../support/poll.js"
import * as RedisServer from "../support/RedisServer.js"
import { browser, countOf, newContext, newPage, opened, shows, textOf } from "./chromium.js"
import { request, startApp, state } from "./support.js"

/** Short, so that the worker the page reconnects to takes the dead one's record over soon. */
const presence = { LEASEHOLD_PRESENCE_EXPIRATION_MS: "1000" }

/** Each click's frame, `{"type":"bump","by":1,"seq":S}` masked, is at least this long. */
const bumpFrameBytes = 36

/**
 * A TCP proxy on a free loopback port to a worker the test can change: the page keeps one
 * address (its origin, its token's sessionStorage, its socket's URL) while the worker
 * behind it changes. On the connections open at the time, the test can swallow what the
 * worker sends (its answers never arrive) or what the page sends (its events never arrive).
 */
interface Switch {
  readonly url: string
  /** New connections go to `port`; the open ones are closed. */
  readonly retarget: (port: number) => Effect.Effect<void>
  /** From now on, the open connections drop what flows that way. */
  readonly swallow: (direction: "answers" | "events") => Effect.Effect<void>
  /** Bytes of events swallowed so far. */
  readonly swallowed: () => number
}

const startSwitch = (initial: number): Effect.Effect<Switch, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      let target = initial
      let swallowed = 0
      const links = new Set<{
        readonly client: net.Socket
        readonly upstream: net.Socket
        answers: boolean
        events: boolean
      }>()
      const server = net.createServer((client) => {
        const upstream = net.connect(target, "127.0.0.1")
        const link = { client, upstream, answers: false, events: false }
        links.add(link)
        const close = () => {
          links.delete(link)
          client.destroy()
          upstream.destroy()
        }
        client.on("error", close).on("close", close)
        upstream.on("error", close).on("close", close)
        client.on("data", (chunk: Buffer) => {
          if (link.events) swallowed += chunk.length
          else upstream.write(chunk)
        })
        upstream.on("data", (chunk: Buffer) => {
          if (!link.answers) client.write(chunk)
        })
      })
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      const address = server.address() as net.AddressInfo
      const closeAll = () => {
        for (const link of links) {
          link.client.destroy()
          link.upstream.destroy()
        }
        links.clear()
      }
      return {
        url: `http://127.0.0.1:${address.port}`,
        retarget: (port: number) =>
          Effect.sync(() => {
            target = port
            closeAll()
          }),
        swallow: (direction: "answers" | "events") =>
          Effect.sync(() => {
            for (const link of links) link[direction] = true
          }),
        swallowed: () => swallowed,
        close: () =>
          new Promise<void>((resolve) => {
            closeAll()
            server.close(() => resolve())
          })
      }
    }),
    (proxy) => Effect.promise(() => proxy.close())
  )

/** `n` clicks on `+1` in one task of the page: the client sends them without waiting for answers. */
const clicks = (page: Page, n: number) =>
  Effect.promise(() =>
    page.evaluate(`{ const button = document.getElementById("bump"); for (let i = 0; i < ${n}; i++) button.click() }`)
  )

/** `n` clicks on `+1`, one every `ms`, driven by the page's own timer; returns at once. */
const clickEvery = (page: Page, n: number, ms: number) =>
  Effect.promise(() =>
    page.evaluate(`{
      window.clicked = 0
      const button = document.getElementById("bump")
      const timer = setInterval(() => {
        button.click()
        if (++window.clicked === ${n}) clearInterval(timer)
      }, ${ms})
    }`)
  )

/** The counter of `token` as stored in Redis (0 before its first change). */
const stored = (server: RedisServer.RedisServer, token: string) =>
  Effect.map(RedisServer.getRaw(server, `leasehold:{${token}}:s:counter`), (raw) =>
    Option.match(raw, { onNone: () => 0, onSome: (raw) => JSON.parse(raw).n as number })
  )

const instanceOf = (app: { readonly url: string }) =>
  Effect.map(request("GET", `${app.url}/healthz`), (answer) => answer.body.instanceId as string)

/** The page's count, stored count and API count all equal `n`, and still so a second later. */
const settled = (
  page: Page,
  server: RedisServer.RedisServer,
  app: { readonly url: string },
  token: string,
  n: number
) =>
  Effect.gen(function* () {
    for (let i = 0; i < 2; i++) {
      if (i > 0) yield* Effect.sleep(1_000)
      assert.strictEqual(yield* countOf(page), n)
      assert.strictEqual(yield* stored(server, token), n)
      assert.strictEqual(yield* state(app, token), n)
    }
  })

describe("counter page in chromium, on Redis", () => {
  it.live(
    "a worker SIGKILLed in the middle of 100 clicks: the page goes on through the other worker, and counts 100",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const env = { LEASEHOLD_REDIS_URL: server.url, ...presence }
        const [a, b] = yield* Effect.all([startApp({ env }), startApp({ env })], { concurrency: 2 })
        const proxy = yield* startSwitch(a.port)
        const page = yield* newPage(yield* newContext(yield* browser))
        yield* Effect.promise(() => page.goto(proxy.url))
        yield* opened(page)
        yield* shows(page, 0)
        const token = yield* textOf(page, "token")
        assert.strictEqual(yield* textOf(page, "worker"), yield* instanceOf(a))

        // 30 answered
        yield* clicks(page, 30)
        yield* shows(page, 30, "30 clicks")
        // 30 applied and stored by A, their answers lost
        yield* proxy.swallow("answers")
        yield* clicks(page, 30)
        yield* untilReal(
          "A stores 60",
          Effect.flatMap(stored(server, token), (n) =>
            n === 60 ? Effect.succeed(true) : Effect.fail(`A stored ${n} rather than 60`)
          ),
          { within: 15_000 }
        )
        // 10 sent and lost on the way: A never reads them
        yield* proxy.swallow("events")
        yield* clicks(page, 10)
        yield* untilReal(
          "10 frames of events sent",
          Effect.suspend(() =>
            proxy.swallowed() >= 10 * bumpFrameBytes
              ? Effect.succeed(true)
              : Effect.fail(`${proxy.swallowed()} bytes of events sent rather than 10 frames`)
          ),
          { within: 15_000 }
        )
        assert.strictEqual(yield* countOf(page), 30)
        yield* a.kill("SIGKILL")
        assert.isNull(yield* a.exited)
        yield* proxy.retarget(b.port)
        // 30 more, sent on the dead socket or kept until the page reconnects
        yield* clicks(page, 30)

        yield* shows(page, 100, "after A's death, through B", 30_000)
        yield* opened(page)
        assert.strictEqual(yield* textOf(page, "worker"), yield* instanceOf(b))
        assert.strictEqual(yield* textOf(page, "token"), token)
        yield* settled(page, server, b, token, 100)
      }),
    90_000
  )

  it.live(
    "Redis (AOF, appendfsync always) killed and restarted during clicks: the page counts every click once",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start({ extraArgs: ["--appendonly", "yes", "--appendfsync", "always"] })
        const app = yield* startApp({ env: { LEASEHOLD_REDIS_URL: server.url } })
        const page = yield* newPage(yield* newContext(yield* browser))
        yield* Effect.promise(() => page.goto(app.url))
        yield* opened(page)
        yield* shows(page, 0)
        const token = yield* textOf(page, "token")

        // 40 clicks, 10 ms apart; Redis dies once some are answered
        yield* clickEvery(page, 40, 10)
        yield* Effect.promise(() =>
          page.waitForFunction(`Number(document.getElementById("count")?.textContent) >= 10`, undefined, {
            timeout: 15_000
          })
        )
        yield* server.kill
        const atKill = yield* countOf(page)
        // 20 while Redis is down
        yield* Effect.promise(() => page.waitForFunction(`window.clicked === 40`, undefined, { timeout: 15_000 }))
        yield* clicks(page, 20)
        yield* Effect.sleep(1_000)
        assert.isBelow(yield* countOf(page), 60)
        yield* server.restart
        // 20 once it is back
        yield* clicks(page, 20)

        yield* shows(page, 80, `after the restart (${atKill} shown when Redis died)`, 30_000)
        assert.strictEqual(yield* textOf(page, "token"), token)
        yield* settled(page, server, app, token, 80)
      }),
    90_000
  )
})
