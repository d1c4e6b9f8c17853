/**
 * What keeping the embedded store on disk (`dataDir`) costs.
 *
 * One worker (`Worker.layerStateFromEnv`) modifies `--tokens` distinct tokens once each,
 * one after the other, first without a data directory (after one unmeasured pass that
 * warms the JIT up), then with one in a fresh temp directory. Then the worker is shut down (which writes every token's file) and built
 * again on the same directory (which loads them all).
 *
 *   modify_ops_s_memory   modifications per second without dataDir
 *   modify_ops_s_disk     the same with dataDir (writes happen in the background)
 *   shutdown_flush_ms     closing the worker: the last flush of every token file
 *   load_ms               building the worker again: reading every token file
 *
 *   npm run bench:persist -- --json             one JSON object with the figures above
 *   npm run bench:persist -- --tokens 50000     another number of tokens (default 10000)
 */
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Clock from "effect/Clock"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as StateManager from "../src/StateManager.js"
import * as Worker from "../src/Worker.js"
import { flag, json } from "./args.js"

const tokens = Number(flag("tokens") ?? 10_000)

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

const withEnv = (env: Record<string, string>) =>
  Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))

/** Build the worker in its own scope; returns the scope so the caller can time its closing. */
const buildWorker = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(Worker.layerStateFromEnv, scope).pipe(withEnv(env))
    return { scope, context }
  })

const modifyAll = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const { scope, context } = yield* buildWorker(env)
    const states = Context.get(context, StateManager.StateManager)
    const start = yield* Clock.currentTimeMillis
    for (let i = 0; i < tokens; i++) {
      yield* states.modify(`tab-${i}`, Counter, (s) => [null, { n: s.n + 1 }] as const)
    }
    const elapsed = (yield* Clock.currentTimeMillis) - start
    return { scope, opsPerSecond: Math.round((tokens * 1000) / elapsed) }
  })

const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    const value = yield* effect
    return [value, (yield* Clock.currentTimeMillis) - start] as const
  })

const program = Effect.gen(function* () {
  const dir = yield* Effect.acquireRelease(
    Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "leasehold-bench-persist-"))),
    (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
  )
  // A first pass warms the JIT up, so that neither measured pass pays for it.
  const warmUp = yield* modifyAll({})
  yield* Scope.close(warmUp.scope, Exit.void)
  const memory = yield* modifyAll({})
  yield* Scope.close(memory.scope, Exit.void)

  const disk = yield* modifyAll({ LEASEHOLD_DATA_DIR: dir })
  const [, flushMs] = yield* timed(Scope.close(disk.scope, Exit.void))
  const files = (yield* Effect.promise(() => fs.readdir(dir))).filter((name) => name.endsWith(".json")).length
  if (files !== tokens) return yield* Effect.die(new Error(`expected ${tokens} token files, found ${files}`))

  const [reloaded, loadMs] = yield* timed(buildWorker({ LEASEHOLD_DATA_DIR: dir }))
  const states = Context.get(reloaded.context, StateManager.StateManager)
  const last = yield* states.get(`tab-${tokens - 1}`, Counter)
  yield* Scope.close(reloaded.scope, Exit.void)
  if (last.n !== 1) return yield* Effect.die(new Error(`the last token reloaded as ${JSON.stringify(last)}`))

  const result = {
    tokens,
    modify_ops_s_memory: memory.opsPerSecond,
    modify_ops_s_disk: disk.opsPerSecond,
    shutdown_flush_ms: flushMs,
    load_ms: loadMs
  }
  if (json) console.log(JSON.stringify(result))
  else console.table([result])
})

NodeRuntime.runMain(Effect.scoped(program))
