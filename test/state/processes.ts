/**
 * Real worker processes (`test/state/child.ts`) killed the way a host kills them, with
 * workers of the test's own process beside them, over one store: a single redis-server or a
 * Redis Cluster. Each case is one body; a backend says how a child reaches the store.
 */
import { assert } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import { type Child, spawnChild } from "../support/children.js"
import { untilReal } from "../support/poll.js"
import { type Cluster, Counter, holding } from "./workers.js"

const child = "test/state/child.ts"

/** Workers of this process over a store, and the environment that puts a child on it. */
export interface ProcessBackend {
  readonly workers: (
    input: LeaseholdConfig.Input
  ) => Effect.Effect<{ readonly cluster: Cluster; readonly env: Record<string, string> }, never, Scope.Scope>
}

/** The child's settings, from the test's (the environment a deployed worker reads). */
const settingsEnv = (input: {
  readonly lockExpiration: number
  readonly lockWarningThreshold: number
  readonly handoffTimeout?: number
}): Record<string, string> => ({
  LEASEHOLD_LOCK_EXPIRATION_MS: String(input.lockExpiration),
  LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: String(input.lockWarningThreshold),
  ...(input.handoffTimeout === undefined ? {} : { LEASEHOLD_HANDOFF_TIMEOUT_MS: String(input.handoffTimeout) })
})

/** A worker SIGKILLed while it holds a lease: every acknowledged modification survives. */
export const killedHoldingALease = (backend: ProcessBackend) =>
  Effect.gen(function* () {
    const settings = { lockExpiration: 1_000, lockWarningThreshold: 500 }
    const { cluster, env } = yield* backend.workers(settings)
    const holder = yield* spawnChild(child, {
      ...env,
      ...settingsEnv(settings),
      LEASEHOLD_OPLOCK: "true",
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
  })

/** What a test does to the queued child, around the release of the lock it waits for. */
export type Stop = (child: Child, release: Effect.Effect<void>) => Effect.Effect<void>

// re-checks every second (half the hand-off timeout); a grant waits 2 s for its worker
const queueSettings = { lockExpiration: 20_000, handoffTimeout: 2_000, lockWarningThreshold: 10_000 }

/**
 * `a` (here) holds the lock; a child process queues behind it, then `c` (here) behind the
 * child. `stop` does to the child what the test is about; then `a` releases, the lock is
 * handed to the dead child, and `c` must get it within the hand-off timeout plus a re-check.
 */
export const killedInTheQueue = (backend: ProcessBackend, stop: Stop) =>
  Effect.gen(function* () {
    const { cluster, env } = yield* backend.workers(queueSettings)
    const a = yield* cluster.worker()
    const c = yield* cluster.worker()
    const { fiber: first, open } = yield* holding(a, "t")
    const queued = yield* spawnChild(child, {
      ...env,
      ...settingsEnv(queueSettings),
      TOKEN: "t",
      COUNT: "1",
      STAY: "1"
    })
    const childId = (yield* queued.waitFor(/^id /)).slice(3)
    yield* untilReal(
      "the child queued",
      Effect.map(cluster.store.queue("t"), (ids) => ids.includes(childId)),
      { within: 20_000 }
    )
    const second = yield* Effect.forkChild(c.states.modify("t", Counter, (s) => [s.n + 10, { n: s.n + 10 }]))
    yield* untilReal(
      "c queued behind it",
      Effect.map(cluster.store.queue("t"), (ids) => ids.length === 2 && ids[1] === c.id),
      { within: 10_000 }
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

export const killedInTheQueueCases: ReadonlyArray<readonly [string, Stop]> = [
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
