/**
 * examples/minimal as a user runs it: a real process on a free port, on the embedded store
 * and on a real redis-server, stopped with Ctrl-C; and the copy docs/getting-started.md
 * quotes is the file itself.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as RedisServer from "../support/RedisServer.js"
import { request, root, startApp } from "./support.js"

const entry = "examples/minimal/main.ts"

/** Start the app, bump twice (and once more with another token and a bad one), then Ctrl-C it. */
const bumpTwiceAndStop = (env: Record<string, string | undefined>) =>
  Effect.gen(function* () {
    // leasehold's own knobs only: the counter's data directory default is not the minimal's
    const app = yield* startApp({ entry, env: { LEASEHOLD_DATA_DIR: undefined, ...env }, ready: /Listening on http/ })
    const bump = (token: string) => request("POST", `${app.url}/api/bump?token=${encodeURIComponent(token)}`)
    const first = yield* bump("tab-1")
    const second = yield* bump("tab-1")
    deepStrictEqual([first.status, first.body], [200, { token: "tab-1", n: 1 }])
    deepStrictEqual([second.status, second.body], [200, { token: "tab-1", n: 2 }])
    deepStrictEqual((yield* bump("tab-2")).body, { token: "tab-2", n: 1 })
    const bad = yield* bump("a b")
    assert.strictEqual(bad.status, 400)
    assert.match(bad.body.error, /a b/)
    assert.strictEqual((yield* request("POST", `${app.url}/api/bump`)).status, 400)

    // Ctrl-C in a terminal: SIGINT to the process group
    yield* app.signalGroup("SIGINT")
    assert.strictEqual(yield* app.exited, 0, app.lines.join("\n"))
    assert.isFalse(
      app.lines.some((line) => /ERROR|WARN|Error/.test(line)),
      app.lines.join("\n")
    )
  })

describe("examples/minimal", () => {
  it.live("on the embedded store: POST /api/bump counts per token; Ctrl-C exits with 0", () => bumpTwiceAndStop({}))

  it.live("on Redis (LEASEHOLD_REDIS_URL): the same, and the counter is in Redis", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      yield* bumpTwiceAndStop({ LEASEHOLD_REDIS_URL: server.url })
      deepStrictEqual(yield* RedisServer.getRaw(server, "leasehold:{tab-1}:s:counter"), Option.some('{"n":2}'))
    })
  )

  it("docs/getting-started.md quotes the file whole", () => {
    const file = fs.readFileSync(path.join(root, entry), "utf8")
    const doc = fs.readFileSync(path.join(root, "docs/getting-started.md"), "utf8")
    const blocks = [...doc.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1])
    assert.isTrue(
      blocks.includes(file),
      `no \`\`\`ts block of docs/getting-started.md is ${entry} as it is now: copy the file into the quote again`
    )
  })
})
