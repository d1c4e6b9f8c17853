/**
 * A lock handed over by a release lives `handoffTimeout` until its new holder extends it.
 * A holder whose event loop stalls longer than that (a long synchronous function, a loaded
 * process) finds it expired at its write: with nobody granted the lock since (the fence
 * unchanged), the write takes it back, and no modification fails. On the live clock, so
 * that the stall is real: nothing of the worker runs during it, its keep-alive included.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import { type Cluster, Counter, memoryCluster, redisCluster } from "./state/workers.js"
import { untilReal } from "./support/poll.js"

const handoffMs = 200
const input: LeaseholdConfig.Input = { handoffTimeout: handoffMs, lockExpiration: 20_000, lockWarningThreshold: 10_000 }

/** Block the event loop for `ms`: what a stalled worker does. */
const stall = (ms: number) => {
  const until = Date.now() + ms
  while (Date.now() < until) {
    // nothing else of this process runs meanwhile
  }
}

const lockOf = (cluster: Cluster, token: string) =>
  Effect.map(cluster.store.holder(token), (holder) => (holder._tag === "Some" ? holder.value.lockId : undefined))

/**
 * A fake holder `H` holds the lock; `b` queues a modification that stalls for three hand-off
 * timeouts once its turn comes; `H` releases, handing the lock to `b`.
 */
const stalledGrantee = (cluster: Cluster) =>
  Effect.gen(function* () {
    const b = yield* cluster.worker()
    const held = yield* cluster.store.acquireQueued("t", "H:1", [], { instanceId: "H" })
    assert.strictEqual(held._tag, "Acquired")
    const modification = yield* Effect.forkChild(
      b.states.modify("t", Counter, (s) => {
        stall(3 * handoffMs)
        return [s.n + 1, { n: s.n + 1 }]
      })
    )
    yield* untilReal(
      "b queued",
      Effect.map(cluster.store.queue("t"), (queue) => queue.length === 1 && queue[0] === b.id),
      { within: 5_000 }
    )
    const granted = yield* cluster.grants("t")
    // carrying the slice b asks for: the notice hands the lock over, no claim
    yield* cluster.store.releaseQueued("t", "H:1", { instanceId: "H", carry: ["counter"] })
    return { b, modification, granted }
  })

const suite = (name: string, make: (input: LeaseholdConfig.Input) => Effect.Effect<Cluster, unknown, Scope.Scope>) =>
  describe(`a stalled grantee (${name})`, () => {
    for (const oplock of [false, true]) {
      it.live(
        `oplock ${oplock}: its lock expired unextended and nobody had it since: the write takes it back`,
        () =>
          Effect.gen(function* () {
            const cluster = yield* make({ ...input, oplock })
            const { b, modification, granted } = yield* stalledGrantee(cluster)
            assert.strictEqual(yield* Fiber.join(modification), 1)
            assert.strictEqual(yield* cluster.stored("t"), 1)
            // the grant to b and no other: the write took back b's own lock
            assert.strictEqual(yield* cluster.grants("t"), granted + 1)
            if (oplock) {
              // b leases on: its lock is its own with a full expiration, kept alive
              assert.isTrue(b.lease.isLeased("t"))
              const lock = yield* lockOf(cluster, "t")
              assert.isTrue(lock?.startsWith(`${b.id}:`), `lock ${lock}`)
              yield* Effect.sleep(3 * handoffMs)
              assert.strictEqual(yield* lockOf(cluster, "t"), lock)
              assert.strictEqual(yield* b.states.modify("t", Counter, (s) => [s.n, { n: s.n + 1 }]), 1)
            } else {
              // released once the batch ends
              yield* untilReal(
                "the lock released",
                Effect.map(lockOf(cluster, "t"), (lock) => lock === undefined),
                { within: 5_000 }
              )
            }
          }),
        20_000
      )
    }
  })

suite("memory", (input) => memoryCluster(input))
suite("redis", (input) => redisCluster({ commandTimeout: 5_000, ...input }))
