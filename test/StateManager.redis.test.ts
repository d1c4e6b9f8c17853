import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import { Redis } from "ioredis"
import { eventuallyTrue } from "./conformance/helpers.js"
import { type StateBackend, stateSuite } from "./state/suite.js"
import { Counter, redisCluster } from "./state/workers.js"
import type * as RedisServer from "./support/RedisServer.js"

const redis: StateBackend = {
  name: "redis",
  test: (name, input, body) =>
    it.scopedLive(name, () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ commandTimeout: 1_000, ...input })
        yield* body(cluster, {
          advance: (ms) => Effect.sleep(ms),
          settle: Effect.sleep(30),
          until: (label, check) => eventuallyTrue(label, 5_000, check)
        })
      })
    )
}

stateSuite(redis)

/** Every command clients send to the server, seen through MONITOR (commands run by scripts excluded). */
const monitor = (server: RedisServer.RedisServer) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new Redis(server.port, "127.0.0.1")
      const seen: Array<string> = []
      const feed = await client.monitor()
      feed.on("monitor", (_time: string, args: ReadonlyArray<string>, source: string) => {
        if (source !== "lua") seen.push(String(args[0]).toLowerCase())
      })
      return {
        seen,
        close: () => {
          feed.disconnect()
          client.disconnect()
        }
      }
    }),
    (m) => Effect.sync(() => m.close())
  )

describe("round trips", () => {
  it.scopedLive(
    "an uncontended modification is two commands: the grant with the reads, the commit with the release",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster()
        const w = yield* cluster.worker()
        yield* w.states.modify("warm", Counter, (s) => [null, { n: s.n + 1 }])
        const m = yield* monitor(cluster.server)
        yield* Effect.sleep(50)
        for (let i = 1; i <= 3; i++) yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
        yield* Effect.sleep(50)
        deepStrictEqual(m.seen, ["evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha"])
        assert.strictEqual(yield* cluster.stored("t"), 3)
      })
  )
})
