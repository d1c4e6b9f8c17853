/**
 * A lease in use is renewed at its deadline only while its lock is known to be its own: on a
 * real redis-server, on the live clock. The lock is taken by a plain `SET` (a failover that
 * lost the key, then a grant to another worker). Extensions that go unconfirmed are made
 * by an ACL rule that denies `PEXPIRE` (scripts call it on the caller's permissions), while
 * the test keeps the lock's key alive itself, as an extension whose reply was lost would:
 * the lease's own look for waiters, a read, still succeeds, and nothing tells it the lock
 * is lost, so only the lock's confirmed life can stop the renewal.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import { Counter, redisCluster, type Worker } from "./state/workers.js"

/** A modification served by the lease's hold (an effectful one: never made in a step of the store). */
const bump = (w: Worker, token = "t") =>
  w.states.modifyEffect(token, Counter, (s) => Effect.succeed([s.n + 1, { n: s.n + 1 }] as const))

/** Acknowledged from memory, the lease's modifications wait for nothing; extensions every second. */
const settings = {
  oplock: true,
  lockExpiration: 3_000,
  leaseDurability: "memory",
  lockWarningThreshold: 2_000
} as const

/** Keep the lease in use every 100 ms until it ends or `ms` pass: when it ended, from `from`. */
const useUntilEnded = (w: Worker, from: number, ms: number) =>
  Effect.gen(function* () {
    while ((yield* Clock.currentTimeMillis) - from < ms) {
      yield* Effect.sleep(100)
      if (!w.lease.isLeased("t")) return (yield* Clock.currentTimeMillis) - from
      // forked: once the lease is gone, the modification waits for the lock
      yield* Effect.forkChild(bump(w))
    }
    return undefined
  })

describe("a renewed lease and its lock, on Redis", () => {
  it.live(
    "a lease whose lock was taken without a notice ends within one extension period",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ ...settings, leaseHoldTime: 1_000 })
        const w = yield* cluster.worker()
        yield* bump(w)
        // in use every 200 ms: held on past its first deadline
        for (let i = 0; i < 7; i++) {
          yield* Effect.sleep(200)
          yield* bump(w)
        }
        assert.isTrue(w.lease.isLeased("t"), "renewed at its first deadline")
        yield* Effect.orDie(cluster.server.command("SET", cluster.keys.lock("t"), "other:1", "PX", 60_000))
        const endedAfter = yield* useUntilEnded(w, yield* Clock.currentTimeMillis, 4_000)
        // the next extension, at most a second away, is answered "not ours" (unheard, the
        // lease would go on to its lock's confirmed life less a tenth: 1,700 ms at least)
        assert.isDefined(endedAfter, "the lease went on serving for 4 s after its lock was taken")
        assert.isAtMost(endedAfter!, 1_600)
        // what the other holder has is untouched
        assert.strictEqual(yield* Effect.orDie(cluster.server.command("GET", cluster.keys.lock("t"))), "other:1")
      }),
    30_000
  )

  it.live(
    "a lease whose extensions are refused is not renewed past the lock's confirmed life",
    () =>
      Effect.gen(function* () {
        // a hold time just under the lock expiration
        const cluster = yield* redisCluster({ ...settings, leaseHoldTime: 2_500 })
        const w = yield* cluster.worker()
        const grantedBy = yield* Clock.currentTimeMillis
        yield* bump(w)
        // every extension refused from now on; reads are answered
        yield* Effect.orDie(cluster.server.command("ACL", "SETUSER", "default", "-pexpire"))
        // the lock kept alive under the lease's own lock id, unconfirmed to it
        const lockId = yield* Effect.orDie(cluster.server.command("GET", cluster.keys.lock("t")))
        yield* Effect.forkChild(
          Effect.forever(
            Effect.andThen(
              Effect.orDie(cluster.server.command("SET", cluster.keys.lock("t"), String(lockId), "PX", 3_000, "XX")),
              Effect.sleep(300)
            )
          )
        )
        // The lock was confirmed until 3,000 ms after its grant: the renewal at the 2,500 ms
        // deadline is cut at 2,700 (less a tenth of the lock expiration), and the lease ends
        // there. Renewed past it, it would serve until 5,000.
        const endedAfter = yield* useUntilEnded(w, grantedBy, 4_500)
        yield* Effect.orDie(cluster.server.command("ACL", "SETUSER", "default", "+@all"))
        assert.isDefined(endedAfter, "the lease was renewed past its lock's confirmed life")
        assert.isAtLeast(endedAfter!, 2_400)
        assert.isAtMost(endedAfter!, 3_600)
      }),
    30_000
  )
})
