import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import { InstanceId } from "../src/InstanceId.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as Worker from "../src/Worker.js"
import { eventuallyTrue } from "./conformance/helpers.js"
import { Counter, holding, redisCluster } from "./state/workers.js"
import { type Child, spawnChild } from "./support/children.js"
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

describe("the queue with a worker killed", () => {
  // re-checks every second (half the hand-off timeout); a grant waits 2 s for its worker
  const settings = { lockExpiration: 20_000, handoffTimeout: 2_000, lockWarningThreshold: 10_000 }
  const childEnv = (url: string) => ({
    LEASEHOLD_REDIS_URL: url,
    LEASEHOLD_LOCK_EXPIRATION_MS: String(settings.lockExpiration),
    LEASEHOLD_HANDOFF_TIMEOUT_MS: String(settings.handoffTimeout),
    LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: String(settings.lockWarningThreshold),
    TOKEN: "t",
    COUNT: "1",
    STAY: "1"
  })

  /**
   * `a` (here) holds the lock; a child process queues behind it, then `c` (here) behind the
   * child. `stop` does to the child what the test is about; then `a` releases, the lock is
   * handed to the dead child, and `c` must get it within the hand-off timeout plus a re-check.
   */
  /** What the test does to the queued child, around the release of the lock it waits for. */
  type Stop = (child: Child, release: Effect.Effect<void>) => Effect.Effect<void>

  const killedInTheQueue = (stop: Stop) =>
    Effect.gen(function* () {
      const cluster = yield* redisCluster(settings)
      const a = yield* cluster.worker()
      const c = yield* cluster.worker()
      const { fiber: first, open } = yield* holding(a, "t")
      const queued = yield* spawnChild(child, childEnv(cluster.server.url))
      const childId = (yield* queued.waitFor(/^id /)).slice(3)
      yield* eventuallyTrue(
        "the child queued",
        20_000,
        Effect.map(cluster.store.queue("t"), (ids) => ids.includes(childId))
      )
      const second = yield* Effect.forkChild(c.states.modify("t", Counter, (s) => [s.n + 10, { n: s.n + 10 }]))
      yield* eventuallyTrue(
        "c queued behind it",
        10_000,
        Effect.map(cluster.store.queue("t"), (ids) => ids.length === 2 && ids[1] === c.id)
      )
      const release = Effect.andThen(open, Effect.orDie(Effect.asVoid(Fiber.join(first))))
      const started = yield* Clock.currentTimeMillis
      yield* stop(queued, release)
      const value = yield* Fiber.join(second)
      const waited = (yield* Clock.currentTimeMillis) - started
      // the child never modified: c reads a's write
      assert.strictEqual(value, 11)
      // 2 s of hand-off timeout, 1 s of re-check, and room for a loaded machine
      assert.isBelow(waited, 6_000, `c got the lock ${waited} ms after the release`)
      deepStrictEqual(yield* cluster.store.queue("t"), [])
    })

  const cases: ReadonlyArray<readonly [string, Stop]> = [
    [
      "a worker SIGKILLed while queued: the grant handed to it passes on within the hand-off timeout and a re-check",
      (queued, release) =>
        Effect.gen(function* () {
          yield* queued.kill("SIGKILL")
          yield* queued.exited
          yield* release
        })
    ],
    [
      "a worker frozen, handed the lock, then SIGKILLed: its pending grant passes on within the hand-off timeout and a re-check",
      (queued, release) =>
        Effect.gen(function* () {
          yield* queued.kill("SIGSTOP")
          yield* release
          yield* queued.kill("SIGKILL")
          yield* queued.exited
        })
    ]
  ]
  for (const [name, stop] of cases) it.scopedLive(name, () => killedInTheQueue(stop), 60_000)
})
