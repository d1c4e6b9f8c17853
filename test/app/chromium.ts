/**
 * The counter's page in a real browser: Debian's chromium, headless, driven by
 * playwright-core. Every browser, context and page is closed with the test's scope.
 */
import * as fs from "node:fs"
import * as Effect from "effect/Effect"
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core"

const executablePath = "/usr/bin/chromium"

const args = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

/**
 * A headless chromium; closed with the scope. Playwright starts it with a fresh temporary
 * profile (`--user-data-dir`) of its own and removes it on close.
 */
export const browser = Effect.acquireRelease(
  Effect.suspend(() =>
    fs.existsSync(executablePath)
      ? Effect.promise(() => chromium.launch({ executablePath, headless: true, args }))
      : Effect.die(`no browser at ${executablePath}: apt-get install chromium (.ci/run does)`)
  ),
  (browser) => Effect.promise(() => browser.close())
)

export const newContext = (browser: Browser) =>
  Effect.acquireRelease(
    Effect.promise(() => browser.newContext()),
    (context) => Effect.promise(() => context.close())
  )

export const newPage = (context: BrowserContext) =>
  Effect.acquireRelease(
    Effect.promise(() => context.newPage()),
    (page) => Effect.promise(() => page.close())
  )

/** Wait until the page shows `n` (playwright's own polling, bounded by `ms`). */
export const shows = (page: Page, n: number, step = "", ms = 10_000) =>
  Effect.tryPromise(() =>
    page.waitForFunction(`document.getElementById("count")?.textContent === "${n}"`, undefined, { timeout: ms })
  ).pipe(
    Effect.catch(() =>
      Effect.flatMap(
        Effect.promise(() => page.evaluate(`document.body.innerText`)),
        (text) => Effect.die(`${step}: the page does not show ${n} within ${ms / 1000} s; it shows:\n${text}`)
      )
    )
  )

export const textOf = (page: Page, id: string) =>
  Effect.promise(async () => (await page.locator(`#${id}`).textContent()) ?? "")

/** The count the page shows (`NaN` before its first state). */
export const countOf = (page: Page) => Effect.map(textOf(page, "count"), Number)

/** Wait until the page's socket is open. */
export const opened = (page: Page, ms = 10_000) =>
  Effect.asVoid(Effect.promise(() => page.waitForSelector('#status[data-state="open"]', { timeout: ms })))
