/**
 * `Worker.layerFromEnv`: the store the `LEASEHOLD_*` variables name, built with the worker:
 * the embedded store (on disk with `LEASEHOLD_DATA_DIR`), one Redis server, a Cluster
 * through its seeds, or the primary behind Sentinels.
 */
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as StateManager from "../src/StateManager.js"
import { Store } from "../src/Store.js"
import * as Worker from "../src/Worker.js"
import * as Server from "./support/RedisServer.js"

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

const worker = Worker.layerFromEnv({ schema: Schema.Number, deliver: () => Effect.void })

/** A bump on the worker the variables name; what it answers, and the kind of store it ran on. */
const bumpWith = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const states = yield* StateManager.StateManager
    const store = yield* Store
    const n = yield* states.modify("tab-1", Counter, ({ n }) => [n + 1, { n: n + 1 }])
    return { n, kind: store.kind }
  }).pipe(Effect.provide(worker), Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))

/** The reason a worker could not be built with these variables (they name a Redis that is not there). */
const failureWith = (env: Record<string, string>) =>
  Effect.flip(
    Layer.build(worker).pipe(
      Effect.scoped,
      Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
    )
  )

const tempDir: Effect.Effect<string, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "leasehold-worker-env-"))),
  (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
)

describe("Worker.layerFromEnv", () => {
  it.effect("no Redis variable: the embedded store, nothing on disk", () =>
    Effect.gen(function* () {
      const { kind, n } = yield* bumpWith({})
      assert.strictEqual(kind, "memory")
      assert.strictEqual(n, 1)
      // each build is a fresh store
      assert.strictEqual((yield* bumpWith({})).n, 1)
    })
  )

  it.effect("LEASEHOLD_DATA_DIR: the embedded store keeps its state there across builds; empty keeps nothing", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      assert.strictEqual((yield* bumpWith({ LEASEHOLD_DATA_DIR: dir })).n, 1)
      assert.strictEqual((yield* bumpWith({ LEASEHOLD_DATA_DIR: dir })).n, 2)
      assert.isAbove((yield* Effect.promise(() => fs.readdir(dir))).length, 0)
      // empty is unset, as the environment provider reads it, and as the example does
      const { kind, n } = yield* bumpWith({ LEASEHOLD_DATA_DIR: "" })
      assert.strictEqual(kind, "memory")
      assert.strictEqual(n, 1)
    })
  )

  it.live("LEASEHOLD_REDIS_URL: that Redis server", () =>
    Effect.gen(function* () {
      const server = yield* Server.start()
      const first = yield* bumpWith({ LEASEHOLD_REDIS_URL: server.url })
      assert.strictEqual(first.kind, "redis")
      assert.strictEqual(first.n, 1)
      assert.strictEqual(yield* server.command("GET", "leasehold:{tab-1}:s:counter"), JSON.stringify({ n: 1 }))
      // a second worker process would find it there
      assert.strictEqual((yield* bumpWith({ LEASEHOLD_REDIS_URL: server.url })).n, 2)
    })
  )

  it.live("a Redis that does not answer: the failure names the variables, without the password", () =>
    Effect.gen(function* () {
      const error = yield* failureWith({
        LEASEHOLD_REDIS_URL: "redis://:s3cret@127.0.0.1:1",
        LEASEHOLD_CONNECT_TIMEOUT_MS: "300",
        LEASEHOLD_COMMAND_TIMEOUT_MS: "300"
      })
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.include(error.message, "not connected to redis://127.0.0.1:1 (LEASEHOLD_REDIS_URL) within 300ms")
      assert.include(error.message, "(LEASEHOLD_CONNECT_TIMEOUT_MS)")
      assert.notInclude(error.message, "s3cret")
    })
  )

  it.live("LEASEHOLD_REDIS_CLUSTER: a Cluster through the seeds the URL lists", () =>
    Effect.gen(function* () {
      // nothing listens there: the failure shows which store was built, and for which seeds
      const error = yield* failureWith({
        LEASEHOLD_REDIS_URL: "redis://127.0.0.1:1,127.0.0.1:2",
        LEASEHOLD_REDIS_CLUSTER: "true",
        LEASEHOLD_CONNECT_TIMEOUT_MS: "300",
        LEASEHOLD_COMMAND_TIMEOUT_MS: "300"
      })
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.include(error.message, "not connected to redis://127.0.0.1:1,127.0.0.1:2 (LEASEHOLD_REDIS_URL)")
      // as one server, the same URL is not a URL with a host
      const single = yield* failureWith({ LEASEHOLD_REDIS_URL: "redis://127.0.0.1:1,127.0.0.1:2" })
      assert.strictEqual(single._tag, "InvalidConfig")
      // a Cluster without its seeds is refused, not served by an embedded store of this process
      const seedless = yield* failureWith({ LEASEHOLD_REDIS_CLUSTER: "true" })
      assert.strictEqual(
        seedless.message,
        "invalid configuration: LEASEHOLD_REDIS_CLUSTER=true is set without LEASEHOLD_REDIS_URL; the embedded store is no Cluster"
      )
    })
  )

  it.live("LEASEHOLD_REDIS_SENTINELS: the primary the Sentinels name", () =>
    Effect.gen(function* () {
      const error = yield* failureWith({
        LEASEHOLD_REDIS_SENTINELS: "127.0.0.1:1,127.0.0.1:2",
        LEASEHOLD_REDIS_SENTINEL_NAME: "mymaster",
        LEASEHOLD_CONNECT_TIMEOUT_MS: "300",
        LEASEHOLD_COMMAND_TIMEOUT_MS: "300"
      })
      assert.strictEqual(error._tag, "StoreUnavailable")
      assert.include(error.message, "(Sentinel master mymaster) (LEASEHOLD_REDIS_SENTINELS)")
      const unnamed = yield* failureWith({ LEASEHOLD_REDIS_SENTINELS: "127.0.0.1:1" })
      assert.strictEqual(
        unnamed.message,
        "invalid configuration: LEASEHOLD_REDIS_SENTINEL_NAME=(unset) must name the master the Sentinels monitor (LEASEHOLD_REDIS_SENTINELS=127.0.0.1:1)"
      )
    })
  )
})
