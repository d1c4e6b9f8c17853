/**
 * The page in a real browser: Debian's chromium, headless, driven by playwright-core.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { browser, newContext, newPage, shows, textOf } from "./chromium.js"
import { bump, startApp } from "./support.js"

describe("counter page in chromium", () => {
  it.live(
    "+1 three times shows 3; another tab starts at 0; an API bump shows on the first page",
    () =>
      Effect.gen(function* () {
        const app = yield* startApp()
        const chrome = yield* browser
        const page = yield* newPage(yield* newContext(chrome))
        yield* Effect.promise(() => page.goto(app.url))
        yield* Effect.promise(() => page.waitForSelector('#status[data-state="open"]', { timeout: 10_000 }))
        yield* shows(page, 0)
        for (let i = 0; i < 3; i++) yield* Effect.promise(() => page.click("#bump"))
        yield* shows(page, 3, "three clicks")
        const token = yield* textOf(page, "token")
        assert.match(token, /^[A-Za-z0-9_.:-]+$/)
        assert.isNotEmpty(yield* textOf(page, "worker"))

        // A reload keeps the tab's token (sessionStorage) and its count.
        yield* Effect.promise(() => page.reload())
        yield* shows(page, 3, "after a reload")
        assert.strictEqual(yield* textOf(page, "token"), token)

        // Another tab, in a context of its own, gets its own token and counter.
        const second = yield* newPage(yield* newContext(chrome))
        yield* Effect.promise(() => second.goto(app.url))
        yield* shows(second, 0)
        assert.notStrictEqual(yield* textOf(second, "token"), token)

        // A bump through the API for the first page's token appears on it, and only there.
        const answer = yield* bump(app, token, 1)
        assert.strictEqual(answer.body.n, 4)
        yield* shows(page, 4)
        yield* shows(second, 0)
      }),
    60_000
  )

  it.live(
    "a duplicated tab (its sessionStorage copied, the token with it) gets a token of its own and its own count",
    () =>
      Effect.gen(function* () {
        const app = yield* startApp()
        const chrome = yield* browser
        const context = yield* newContext(chrome)
        const page = yield* newPage(context)
        yield* Effect.promise(() => page.goto(app.url))
        yield* shows(page, 0)
        for (let i = 0; i < 2; i++) yield* Effect.promise(() => page.click("#bump"))
        yield* shows(page, 2)
        const token = yield* textOf(page, "token")

        // A tab opened by the page gets a copy of its sessionStorage, as a duplicated tab does;
        // it opens on another path first, to see the copy before the client reads it.
        const [duplicate] = yield* Effect.promise(() =>
          Promise.all([context.waitForEvent("page"), page.evaluate(`void window.open("/healthz")`)])
        )
        yield* Effect.addFinalizer(() => Effect.promise(() => duplicate.close()))
        yield* Effect.promise(() => duplicate.waitForLoadState())
        const copied = `sessionStorage.getItem("leasehold-token")`
        assert.strictEqual(yield* Effect.promise(() => duplicate.evaluate(copied)), token)
        yield* Effect.promise(() => duplicate.goto(app.url))
        yield* shows(duplicate, 0, "the duplicated tab")
        const own = yield* textOf(duplicate, "token")
        assert.notStrictEqual(own, token)
        assert.strictEqual(yield* Effect.promise(() => duplicate.evaluate(copied)), own)

        // Each tab counts on its own token, and the first keeps its own.
        yield* Effect.promise(() => duplicate.click("#bump"))
        yield* shows(duplicate, 1, "a click in the duplicated tab")
        yield* Effect.promise(() => page.click("#bump"))
        yield* shows(page, 3, "a click in the first tab")
        assert.strictEqual(yield* textOf(page, "token"), token)
        yield* shows(duplicate, 1, "the duplicated tab after the first tab's click")
      }),
    60_000
  )

  it.live(
    "the page reconnects by itself after a restart, with its token and its count",
    () =>
      Effect.gen(function* () {
        const dir = yield* Effect.acquireRelease(
          Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "counter-data-"))),
          (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
        )
        const env = { LEASEHOLD_DATA_DIR: dir }
        const first = yield* startApp({ env })
        const chrome = yield* browser
        const page = yield* newPage(yield* newContext(chrome))
        yield* Effect.promise(() => page.goto(first.url))
        yield* shows(page, 0)
        for (let i = 0; i < 2; i++) yield* Effect.promise(() => page.click("#bump"))
        yield* shows(page, 2)
        const token = yield* textOf(page, "token")
        const worker = yield* textOf(page, "worker")
        yield* first.kill("SIGTERM")
        assert.strictEqual(yield* first.exited, 0)
        yield* Effect.promise(() => page.waitForSelector('#status[data-state="closed"]', { timeout: 10_000 }))
        yield* startApp({ env, port: first.port })
        // a new worker (a new instance id) serves the same tab, without a reload
        yield* Effect.promise(() =>
          page.waitForFunction(
            `document.getElementById("worker")?.textContent !== ${JSON.stringify(worker)} && document.getElementById("status")?.dataset.state === "open"`,
            undefined,
            { timeout: 15_000 }
          )
        )
        assert.strictEqual(yield* textOf(page, "token"), token)
        yield* shows(page, 2)
        yield* Effect.promise(() => page.click("#bump"))
        yield* shows(page, 3)
      }),
    60_000
  )
})
