import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { InstanceId } from "../src/InstanceId.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as Worker from "../src/Worker.js"
import { killedHoldingALease, killedInTheQueue, killedInTheQueueCases, type ProcessBackend } from "./state/processes.js"
import { redisCluster } from "./state/workers.js"
import { spawnChild } from "./support/children.js"
import * as RedisServer from "./support/RedisServer.js"

const child = "test/state/child.ts"

describe("worker identity", () => {
  it.effect("N builds of the worker layer in one process: N distinct instance ids", () =>
    Effect.gen(function* () {
      const store = MemoryStore.layer.pipe(Layer.provideMerge(LeaseholdConfig.layer({})))
      const ids = yield* Effect.forEach([1, 2, 3, 4], () =>
        InstanceId.pipe(Effect.provide(Layer.fresh(Worker.layerState).pipe(Layer.provide(store))))
      )
      assert.strictEqual(new Set(ids).size, 4)
    })
  )

  it.live(
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

const singleServer: ProcessBackend = {
  workers: (input) =>
    Effect.map(redisCluster(input), (cluster) => ({ cluster, env: { LEASEHOLD_REDIS_URL: cluster.server.url } }))
}

describe("durability", () => {
  it.live(
    "a worker killed while it holds a lease loses no acknowledged modification",
    () => killedHoldingALease(singleServer),
    60_000
  )
})

describe("the queue with a worker killed", () => {
  for (const [name, stop] of killedInTheQueueCases) {
    it.live(name, () => killedInTheQueue(singleServer, stop), 60_000)
  }
})
