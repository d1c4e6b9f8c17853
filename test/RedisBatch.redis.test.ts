/**
 * The commands a worker sends to one Redis server in one turn of its event loop leave in
 * one write (`internal/redis/topology.ts`, `turnBatcher`): the server reads them at once,
 * as its own count of reads shows, where commands sent a turn apart are read one by one.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as RedisStore from "leasehold/RedisStore"
import { Store } from "leasehold/Store"
import * as RedisServer from "./support/RedisServer.js"

/** The reads the server has processed (the `INFO` that asks counts one). */
const reads = (server: RedisServer.RedisServer) =>
  Effect.map(Effect.orDie(server.info("stats")), (stats) => Number(stats.total_reads_processed))

const nextTurn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

describe("a turn's commands in one write", () => {
  it.live("32 commands of one turn are read in one or two reads; 32 a turn apart in about 32", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const settings = LeaseholdConfig.layer({ commandTimeout: "5 seconds" })
      const context = yield* Layer.build(RedisStore.layer({ url: server.url }).pipe(Layer.provideMerge(settings)))
      const store = Context.get(context, Store)
      const tokens = Array.from({ length: 32 }, (_, i) => `batch-${i}`)
      // warmed up: the scripts loaded, the connection ready
      yield* Effect.forEach(tokens, (token) => store.readSlices(token, ["counter"]))
      yield* nextTurn

      const before = yield* reads(server)
      const together = yield* Effect.forEach(tokens, (token) => store.readSlices(token, ["counter"]), {
        concurrency: "unbounded"
      })
      const afterTogether = yield* reads(server)
      assert.strictEqual(together.length, 32)
      // less the INFO that read the count before
      const readTogether = afterTogether - before - 1

      for (const token of tokens) {
        yield* store.readSlices(token, ["counter"])
        yield* nextTurn
      }
      const readApart = (yield* reads(server)) - afterTogether - 1
      assert.isAtMost(readTogether, 2, `reads for 32 commands of one turn: ${readTogether}`)
      assert.isAtLeast(readApart, 24, `reads for 32 commands a turn apart: ${readApart}`)
    }).pipe(Effect.scoped)
  )
})
