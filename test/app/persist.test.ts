/**
 * `npm start` on the embedded store with a data directory: a restart keeps every tab's
 * counter, and a corrupt file is skipped with a warning.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import { leaseholdEnvironment } from "../../examples/counter/AppConfig.js"
import { bump, startApp, state, tempDir } from "./support.js"

describe("counter app (embedded store on disk)", () => {
  it.effect("the data directory defaults to .leasehold; set but empty keeps nothing on disk", () =>
    Effect.gen(function* () {
      // as leasehold reads it in the app: the library's own reading, over the app's variables
      const dataDir = (env: Record<string, string>) =>
        LeaseholdConfig.LeaseholdConfig.pipe(
          Effect.provide(LeaseholdConfig.layerFromEnv),
          Effect.provideService(ConfigProvider.ConfigProvider, leaseholdEnvironment(env)),
          Effect.map((settings) => settings.dataDir)
        )
      deepStrictEqual(yield* dataDir({}), Option.some(".leasehold"))
      deepStrictEqual(yield* dataDir({ LEASEHOLD_DATA_DIR: "" }), Option.none())
      deepStrictEqual(yield* dataDir({ LEASEHOLD_DATA_DIR: "/srv/counter" }), Option.some("/srv/counter"))
    })
  )

  it.live(
    "a restart of npm start keeps the counters; a corrupt file is skipped with a warning",
    () =>
      Effect.gen(function* () {
        const dir = yield* tempDir
        const env = { LEASEHOLD_DATA_DIR: dir }
        const first = yield* startApp({ env, npm: true })
        yield* bump(first, "tab-1", 3)
        yield* bump(first, "tab-2", 1)
        yield* bump(first, "tab-2", 1)
        yield* first.kill("SIGTERM")
        assert.strictEqual(yield* first.exited, 0)

        const second = yield* startApp({ env, npm: true, port: first.port })
        assert.strictEqual(yield* state(second, "tab-1"), 3)
        assert.strictEqual(yield* state(second, "tab-2"), 2)
        yield* bump(second, "tab-1", 1)
        yield* second.kill("SIGTERM")
        assert.strictEqual(yield* second.exited, 0)

        const files = fs.readdirSync(dir).filter((name) => name.endsWith(".json"))
        assert.strictEqual(files.length, 2)
        const tab2 = files.find((name) => fs.readFileSync(path.join(dir, name), "utf8").includes("tab-2"))!
        fs.writeFileSync(path.join(dir, tab2), "{ not json")

        const third = yield* startApp({ env, npm: true, port: first.port })
        assert.strictEqual(yield* state(third, "tab-1"), 4)
        assert.strictEqual(yield* state(third, "tab-2"), 0)
        assert.isTrue(
          third.lines.some((line) => /WARN/.test(line) && line.includes(tab2)),
          third.lines.join("\n")
        )
      }),
    60_000
  )
})
