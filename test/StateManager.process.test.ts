import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { InstanceId } from "../src/InstanceId.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as Worker from "../src/Worker.js"
import { Counter, redisCluster } from "./state/workers.js"
import { spawnChild } from "./support/children.js"
import * as RedisServer from "./support/RedisServer.js"

const child = "test/state/child.ts"

describe("worker identity", () => {
  it.effect("N builds of the worker layer in one process: N distinct instance ids", () =>
    Effect.gen(function* () {
      const store = MemoryStore.layer.pipe(Layer.provideMerge(LeaseholdConfig.layerWith({})))
      const ids = yield* Effect.forEach([1, 2, 3, 4], () =>
        InstanceId.pipe(Effect.provide(Layer.fresh(Worker.layerState).pipe(Layer.provide(store))))
      )
      assert.strictEqual(new Set(ids).size, 4)
    })
  )

  it.scopedLive(
    "N worker processes: N distinct ids, and each reads the others' modifications",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const children = yield* Effect.forEach([1, 2, 3], () =>
          spawnChild(child, { LEASEHOLD_REDIS_URL: server.url, TOKEN: "shared", COUNT: "5" })
        )
        const ids = yield* Effect.forEach(children, (c) => c.waitFor(/^id /))
        assert.strictEqual(new Set(ids).size, 3)
        yield* Effect.forEach(children, (c) => c.waitFor(/^done$/))
        // every acknowledgement saw the count so far: the largest is the total
        const acks = children.flatMap((c) => c.lines.filter((l) => l.startsWith("ack ")).map((l) => Number(l.slice(4))))
        deepStrictEqual(
          [...acks].sort((a, b) => a - b),
          Array.from({ length: 15 }, (_, i) => i + 1)
        )
        const stored = yield* server.command("GET", "leasehold:{shared}:s:counter")
        assert.strictEqual(stored, '{"n":15}')
      }),
    60_000
  )
})

describe("durability", () => {
  it.scopedLive(
    "a worker killed while it holds a lease loses no acknowledged modification",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ lockExpiration: 1_000, lockWarningThreshold: 500 })
        const holder = yield* spawnChild(child, {
          LEASEHOLD_REDIS_URL: cluster.server.url,
          LEASEHOLD_OPLOCK: "true",
          LEASEHOLD_LOCK_EXPIRATION_MS: "1000",
          LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "500",
          LEASEHOLD_LEASE_HOLD_TIME_MS: "900",
          TOKEN: "t",
          COUNT: "200",
          STAY: "1"
        })
        yield* holder.waitFor(/^ack 50$/)
        yield* holder.kill("SIGKILL")
        yield* holder.exited
        const acked = Math.max(...holder.lines.filter((l) => l.startsWith("ack ")).map((l) => Number(l.slice(4))))
        assert.isAtLeast(acked, 50)
        // the lease died with its process: its lock expires, and the next holder reads
        const reader = yield* cluster.worker()
        const value = yield* reader.states.modify("t", Counter, (s) => [s.n, s])
        // every acknowledged modification is there; at most the one in flight is too
        assert.isAtLeast(value, acked)
        assert.isAtMost(value, acked + 1)
      }),
    60_000
  )
})
