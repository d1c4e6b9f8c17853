import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { Store } from "../src/Store.js"
import { memory } from "./hostile/fixture.js"
import { hostileInputSuite } from "./hostile/inputSuite.js"
import * as Logs from "./support/logs.js"

hostileInputSuite(memory())

describe("hostile input (memory, dataDir)", () => {
  it.effect("a token file nested 100k levels deep or of 4 MB: one warning naming it, the others load", () =>
    Effect.gen(function* () {
      const dir = yield* Effect.acquireRelease(
        Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "leasehold-hostile-"))),
        (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
      )
      const fileOf = (token: string) => path.join(dir, `${createHash("sha256").update(token).digest("hex")}.json`)
      const depth = 100_000
      const files: ReadonlyArray<readonly [string, string]> = [
        ["arrays", `${"[".repeat(depth)}${"]".repeat(depth)}`],
        [
          "objects",
          `{"format":"leasehold.token/1","token":"objects","keys":${'{"a":'.repeat(depth)}1${"}".repeat(depth)}}`
        ],
        ["large", JSON.stringify({ format: "leasehold.token/1", token: "large", keys: "x".repeat(4 * 1024 * 1024) })]
      ]
      for (const [token, content] of files) yield* Effect.promise(() => fs.writeFile(fileOf(token), content))
      const logs = Logs.capture()
      const config = LeaseholdConfig.layer({ dataDir: Option.some(dir) })
      const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provide(config))).pipe(Effect.provide(logs.layer))
      const store = Context.get(context, Store)
      for (const [token] of files) deepStrictEqual(yield* store.readSlices(token, ["a"]), [Option.none()], token)
      const warnings = Logs.atLevels(logs.lines, ["ERROR", "WARN"])
      assert.strictEqual(
        warnings.length,
        files.length,
        JSON.stringify(warnings.map((line) => line.message.slice(0, 300)))
      )
      for (const [token] of files) {
        assert.strictEqual(warnings.filter((line) => line.message.includes(fileOf(token))).length, 1, token)
      }
      for (const line of warnings) assert.isBelow(line.message.length, 1_000)
    })
  )
})
