/**
 * What one call of the Redis store costs its worker, beside the same round trip made
 * straight from ioredis: one caller after another on one connection, each call a
 * `runPromise` of the store's operation, against `GET` and against a script of the same
 * shape (as many keys and arguments) sent by ioredis alone. The process CPU time (user +
 * system) is divided by the calls, after a warm-up of the same loop (the JIT compiles the
 * path over the first seconds). Rows, one run:
 *
 *   npm run bench:store-call -- --json        [{"op", "calls_per_s", "cpu_us_per_call"}]
 *   npm run bench:store-call -- --seconds 3 --warmup 3
 *
 * - `ioredis-get`: `GET` of a slice key; `ioredis-script-14`: a one-line script with the
 *   14 keys and arguments of the store's queued grant of one slice (5 keys, 9 arguments);
 * - `store-readSlices`: `Store.readSlices` of one slice (one script);
 * - `store-writeIfHolder`: `Store.writeIfHolder` of one slice under a lock this caller
 *   holds (one script);
 * - `runPromise-void`: the caller's own cost, `runPromise(Effect.void)`.
 */
import { performance } from "node:perf_hooks"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as References from "effect/References"
import { Redis } from "ioredis"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { Store } from "../src/Store.js"
import * as RedisServer from "../test/support/RedisServer.js"
import { flag, json } from "./args.js"

const seconds = Number(flag("seconds") ?? "3")
const warmupSeconds = Number(flag("warmup") ?? "3")

const loop = async (op: () => Promise<unknown>) => {
  const warm = performance.now() + warmupSeconds * 1000
  while (performance.now() < warm) await op()
  const cpu = process.cpuUsage()
  const started = performance.now()
  let calls = 0
  while (performance.now() < started + seconds * 1000) {
    await op()
    calls++
  }
  const used = process.cpuUsage(cpu)
  return {
    calls_per_s: Math.round((calls * 1000) / (performance.now() - started)),
    cpu_us_per_call: Math.round((used.user + used.system) / calls)
  }
}

const main = Effect.scoped(
  Effect.gen(function* () {
    const server = yield* RedisServer.start()
    return yield* Effect.promise(async () => {
      const runtime = ManagedRuntime.make(
        RedisStore.layer({ url: server.url }).pipe(
          Layer.provideMerge(LeaseholdConfig.layer({ lockExpiration: 600_000, lockWarningThreshold: 300_000 })),
          Layer.merge(Layer.succeed(References.MinimumLogLevel, "Error"))
        )
      )
      const store = await runtime.runPromise(Store)
      const raw = new Redis(server.url)
      raw.defineCommand("benchScript", { lua: "return redis.call('GET', KEYS[1])" })
      const shape = Array.from({ length: 14 }, (_, i) => `leasehold:{bench}:part-${i}`)
      const lockId = "bench-holder"
      const granted = await runtime.runPromise(store.tryAcquire("bench", lockId, ["n"]))
      if (granted._tag !== "Acquired") throw new Error("the bench's token is locked")
      const ops: ReadonlyArray<readonly [string, () => Promise<unknown>]> = [
        ["ioredis-get", () => raw.get("leasehold:{bench}:s:n")],
        [
          "ioredis-script-14",
          () => (raw as unknown as Record<string, (...a: Array<unknown>) => Promise<unknown>>).benchScript!(5, ...shape)
        ],
        ["store-readSlices", () => runtime.runPromise(store.readSlices("bench", ["n"]))],
        ["store-writeIfHolder", () => runtime.runPromise(store.writeIfHolder("bench", lockId, [["n", "1"]]))],
        ["runPromise-void", () => runtime.runPromise(Effect.void)]
      ]
      const rows: Array<Record<string, unknown>> = []
      for (const [op, run] of ops) rows.push({ op, ...(await loop(run)) })
      raw.disconnect()
      await runtime.dispose()
      return rows
    })
  })
)

Effect.runPromise(main).then((rows) => {
  if (json) console.log(JSON.stringify(rows))
  else for (const row of rows) console.log(JSON.stringify(row))
})
