import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import type * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import { type Cluster, Counter, memoryCluster, redisCluster, type Worker } from "./state/workers.js"
import { untilReal } from "./support/poll.js"

const WORKERS = 3
const FIBERS = 4
const OPS = 25
const TOKENS = ["a", "b"]

/**
 * One modification, interrupted at a random moment with probability 0.3 (while it waits
 * for its turn or while its function runs, never after it decided), or failing by itself
 * with probability 0.1. Returns whether it reported success.
 */
const attempt = (w: Worker, token: string) =>
  Effect.gen(function* () {
    const state = { decided: false }
    const fiber = yield* Effect.forkChild(
      w.states.modifyEffect(token, Counter, (s) =>
        Effect.gen(function* () {
          yield* Effect.sleep(yield* Random.nextIntBetween(0, 3, { halfOpen: true }))
          if ((yield* Random.next) < 0.1) return yield* Effect.fail("failed by itself" as const)
          yield* Effect.sync(() => {
            state.decided = true
          })
          return [null, { n: s.n + 1 }] as const
        })
      )
    )
    if ((yield* Random.next) < 0.3) {
      yield* Effect.sleep(yield* Random.nextIntBetween(0, 4, { halfOpen: true }))
      // the look and the interruption in one step: an interruption never lands after the decision
      yield* Effect.sync(() => {
        if (!state.decided) fiber.interruptUnsafe()
      })
    }
    const exit = yield* Fiber.await(fiber)
    if (Exit.isFailure(exit) && !Exit.hasInterrupts(exit)) {
      if (Option.getOrUndefined(Cause.findErrorOption(exit.cause)) !== "failed by itself")
        return yield* Effect.failCause(exit.cause)
    }
    return Exit.isSuccess(exit)
  })

const fuzz = (make: Effect.Effect<Cluster, never, any>) =>
  Effect.gen(function* () {
    const cluster = yield* make
    const workers = yield* Effect.forEach(Array.from({ length: WORKERS }), () => cluster.worker())
    const successes = new Map(TOKENS.map((t) => [t, 0]))
    yield* Effect.forEach(
      workers.flatMap((w) => Array.from({ length: FIBERS }, () => w)),
      (w) =>
        Effect.gen(function* () {
          for (let i = 0; i < OPS; i++) {
            const token = TOKENS[yield* Random.nextIntBetween(0, TOKENS.length, { halfOpen: true })]!
            if (yield* attempt(w, token)) successes.set(token, successes.get(token)! + 1)
          }
        }),
      { concurrency: "unbounded", discard: true }
    )
    for (const w of workers) yield* w.close
    for (const token of TOKENS) {
      assert.strictEqual(yield* cluster.stored(token), successes.get(token), `token ${token}`)
      assert.isTrue(Option.isNone(yield* cluster.store.holder(token)), `no lock left on ${token}`)
      yield* untilReal(
        `no worker left queued on ${token}`,
        Effect.map(cluster.store.queue(token), (ids) => ids.length === 0),
        { within: 2_000 }
      )
      deepStrictEqual(yield* cluster.store.queue(token), [])
    }
    for (const w of workers) assert.strictEqual(yield* w.lease.sessions, 0)
    assert.isAbove(
      [...successes.values()].reduce((a, b) => a + b, 0),
      WORKERS * FIBERS * OPS * 0.3
    )
  })

const cases: ReadonlyArray<readonly [string, LeaseholdConfig.Input]> = [
  ["oplock off", {}],
  ["oplock on", { oplock: true, leaseHoldTime: 50, lockExpiration: 2_000 }],
  ["oplock on, quantum 0, memory durability", { oplock: true, leaseQuantum: 0, leaseDurability: "memory" }]
]

describe("fuzz: workers × fibers, random interruptions", () => {
  for (const [name, input] of cases) {
    it.live(`memory store, ${name}`, () => fuzz(memoryCluster(input)), 60_000)
    it.live(`redis store, ${name}`, () => fuzz(redisCluster(input)), 60_000)
  }
})
