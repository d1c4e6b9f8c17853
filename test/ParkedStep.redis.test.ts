/**
 * A lone plain modification under a parked lease, on a real redis-server: made by its caller
 * in one `writeIfHolder`, the hold left parked (no fiber, no group commit of one). What it
 * must keep: concurrent modifications queue behind the write and lose nothing; a lock lost
 * meanwhile writes nothing and the modification is made on a new grant; a write whose
 * outcome is unknown (the command timed out behind a paused server) ends the lease, so
 * that nothing is written later on values that may be stale.
 */
import { createHash } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Lease from "../src/internal/lease.js"
import { singleServer } from "../src/internal/redis/script.js"
import * as Scripts from "../src/internal/redis/scripts/index.js"
import type * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import { Counter, redisCluster, type Worker } from "./state/workers.js"
import { untilReal } from "./support/poll.js"

/** The leases parked so far, in this process. */
const parkedCount = Effect.map(Metric.value(Lease.leasesParked), (state) => state.count)

const bump = (w: Worker, token = "t") => w.states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }])

const scriptNames = new Map(
  Scripts.all.map((script) => [createHash("sha1").update(script.lua(singleServer)).digest("hex"), script.name])
)

/** A sent command by its name: a script's, or the command's. */
const nameOf = (command: string) => {
  const [name, sha] = command.split(" ")
  return name!.toLowerCase() === "evalsha" ? (scriptNames.get(sha!) ?? "unknown script") : name!.toLowerCase()
}

/** Long enough that no deadline or extension wakes the lease during a test. */
const settings = { oplock: true, leaseDurability: "batch", leaseHoldTime: 20_000, lockExpiration: 60_000 } as const

/** Until `w`'s lease of `token` has parked (`parkedCount` past `from`). */
const parkedSince = (from: number) =>
  Effect.gen(function* () {
    for (let i = 0; i < 200; i++) {
      if ((yield* parkedCount) > from) return
      yield* Effect.sleep(10)
    }
    return yield* Effect.die("the lease never parked")
  })

/**
 * Until no lease of this process parked for 500 ms (at most 3 s): `parkedCount` is the
 * process's, and a hold woken once just after it parked (a notice of its subscription
 * confirmed, say) parks again.
 */
const parksSettled = Effect.gen(function* () {
  let last = yield* parkedCount
  for (let quiet = 0, i = 0; quiet < 10 && i < 60; i++) {
    yield* Effect.sleep(50)
    const now = yield* parkedCount
    quiet = now === last ? quiet + 1 : 0
    last = now
  }
})

/** A worker on a fresh server whose lease of "t" served one modification (n = 1) and parked. */
const parkedLease = (input: LeaseholdConfig.Input) =>
  Effect.gen(function* () {
    const cluster = yield* redisCluster(input)
    const w = yield* cluster.worker()
    const before = yield* parkedCount
    yield* bump(w)
    yield* parkedSince(before)
    return { cluster, w, before }
  })

describe("a lone modification under a parked lease, on Redis", () => {
  it.live("one write each, under the lease's grant and fence; the lease stays parked", () =>
    Effect.gen(function* () {
      const { cluster, w } = yield* parkedLease(settings)
      yield* parksSettled
      const parked = yield* parkedCount
      const fence = yield* cluster.grants("t")
      const sent = yield* Option.getOrThrow(cluster.scripts)("t")
      for (let i = 0; i < 5; i++) assert.strictEqual(yield* bump(w), i + 2)
      const commands = yield* sent
      assert.strictEqual(commands.filter((c) => c.toLowerCase().startsWith("evalsha")).length, 5, commands.join("\n"))
      // not woken (a hold woken parks again 20 ms after it served): parked once, under the
      // same grant, its record holding what the store holds
      yield* Effect.sleep(200)
      assert.strictEqual((yield* parkedCount) - parked, 0)
      assert.strictEqual(yield* cluster.grants("t"), fence)
      assert.strictEqual(yield* cluster.stored("t"), 6)
      assert.isTrue(w.lease.isLeased("t"))
      assert.deepStrictEqual(w.lease.cached("t", "counter"), Option.some(Option.some(`{"n":6}`)))
    })
  )

  it.live("many at once: the first writes, the others queue on the session; none is lost", () =>
    Effect.gen(function* () {
      const { cluster, w } = yield* parkedLease(settings)
      const results = yield* Effect.all(
        Array.from({ length: 50 }, () => bump(w)),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(
        [...results].sort((a, b) => a - b),
        Array.from({ length: 50 }, (_, i) => i + 2)
      )
      assert.strictEqual(yield* cluster.stored("t"), 51)
      // and again once parked anew
      const again = yield* parkedCount
      yield* parkedSince(again)
      assert.strictEqual(yield* bump(w), 52)
      assert.strictEqual(yield* cluster.stored("t"), 52)
    })
  )

  it.live("its lock taken meanwhile: nothing written under it; made once the lock is free, on what is stored", () =>
    Effect.gen(function* () {
      const { cluster, w } = yield* parkedLease(settings)
      // another holder, as after an expiry and another's grant; it wrote 10
      yield* Effect.orDie(cluster.server.command("SET", cluster.keys.lock("t"), "other:1", "PX", 60_000))
      yield* Effect.orDie(cluster.server.command("SET", cluster.keys.slice("t", "counter"), `{"n":10}`))
      const fiber = yield* Effect.forkChild(bump(w))
      yield* Effect.sleep(300)
      assert.strictEqual(yield* cluster.stored("t"), 10, "written under a lock it no longer holds")
      assert.isUndefined(fiber.pollUnsafe())
      // the other holder lets go: the modification takes a grant and reads what it wrote
      yield* Effect.orDie(cluster.server.command("DEL", cluster.keys.lock("t")))
      assert.strictEqual(yield* Fiber.join(fiber), 11)
      assert.strictEqual(yield* cluster.stored("t"), 11)
    })
  )

  it.live("a write of unknown outcome: the modification fails with it, and the lease writes nothing more", () =>
    Effect.gen(function* () {
      const { cluster, w } = yield* parkedLease({ ...settings, commandTimeout: 500 })
      // the server runs nothing for 1.5 s: the write times out here, then runs
      yield* Effect.orDie(cluster.server.command("CLIENT", "PAUSE", "1500", "ALL"))
      const failed = yield* Effect.flip(bump(w))
      assert.strictEqual(failed._tag, "StoreUnavailable")
      yield* Effect.sleep(1_500)
      // the write landed after all, and the lease ended without waiting for a modification
      assert.strictEqual(yield* cluster.stored("t"), 2)
      assert.isFalse(w.lease.isLeased("t"))
      assert.isTrue(Option.isNone(yield* w.store.holder("t")))
      // the next modification reads what landed, not the lease's old record
      assert.strictEqual(yield* bump(w), 3)
      assert.strictEqual(yield* cluster.stored("t"), 3)
    })
  )

  it.live(
    "its extensions made from the parked record, the lease left parked; the store saying the lock is not ours ends it",
    () =>
      Effect.gen(function* () {
        // extensions every second, the hold ending at 2.5 s
        const { cluster, w, before } = yield* parkedLease({ ...settings, lockExpiration: 3_000, leaseHoldTime: 2_500 })
        yield* Effect.sleep(2_100)
        // extended twice by now (a lock left alone would have 900 ms left), never woken
        const pttl = yield* Effect.orDie(cluster.server.command("PTTL", cluster.keys.lock("t")))
        assert.isAbove(Number(pttl), 1_500)
        assert.strictEqual((yield* parkedCount) - before, 1)
        assert.isTrue(w.lease.isLeased("t"))
        // its deadline ends it (it served nothing in its last half): released
        yield* Effect.sleep(1_000)
        assert.isFalse(w.lease.isLeased("t"))
        assert.isTrue(Option.isNone(yield* w.store.holder("t")))

        // again, and the lock taken by another: the next extension ends the lease, writing nothing
        const again = yield* parkedCount
        yield* bump(w)
        yield* parkedSince(again)
        yield* Effect.orDie(cluster.server.command("SET", cluster.keys.lock("t"), "other:1", "PX", 60_000))
        yield* Effect.sleep(1_300)
        assert.isFalse(w.lease.isLeased("t"))
        assert.strictEqual(yield* Effect.orDie(cluster.server.command("GET", cluster.keys.lock("t"))), "other:1")
        assert.strictEqual(yield* cluster.stored("t"), 2)
      })
  )

  it.live("renewed at its deadline from the parked record when in use, the lease left parked; unused, it ends", () =>
    Effect.gen(function* () {
      // deadlines every second, extensions every second
      const { cluster, w } = yield* parkedLease({ ...settings, lockExpiration: 3_000, leaseHoldTime: 1_000 })
      // in use in the last half of its hold time, made under the record
      yield* Effect.sleep(650)
      const parked = yield* parkedCount
      assert.strictEqual(yield* bump(w), 2)
      yield* Effect.sleep(700)
      // past its first deadline: renewed, never woken
      assert.isTrue(w.lease.isLeased("t"))
      assert.strictEqual((yield* parkedCount) - parked, 0)
      // unused since: its next deadline wakes the hold, which ends it
      yield* Effect.sleep(1_200)
      assert.isFalse(w.lease.isLeased("t"))
      assert.isTrue(Option.isNone(yield* w.store.holder("t")))
      assert.strictEqual(yield* cluster.stored("t"), 2)
    })
  )

  it.live(
    "written more often than it extends: its writes extend its lock and answer its renewals, with no request of their own",
    () =>
      Effect.gen(function* () {
        // an extension due every 2 s, a deadline every 2 s (renewed only if it served in its
        // last second, and only when nobody is queued); a write every 250 ms
        const { cluster, w } = yield* parkedLease({ ...settings, lockExpiration: 6_000, leaseHoldTime: 2_000 })
        const sent = yield* Option.getOrThrow(cluster.scripts)("t")
        for (let i = 0; i < 20; i++) {
          yield* Effect.sleep(250)
          assert.strictEqual(yield* bump(w), i + 2)
        }
        // five seconds: two extensions and two renewals were due; one write per modification
        const names = (yield* sent).map(nameOf)
        assert.deepStrictEqual(
          names,
          Array.from({ length: 20 }, () => Scripts.writeIfHolder.name),
          names.join("\n")
        )
        assert.isTrue(w.lease.isLeased("t"))
        // the lock lives a lock expiration from the last write that extended it (left alone
        // since the grant, it would have expired)
        const pttl = yield* Effect.orDie(cluster.server.command("PTTL", cluster.keys.lock("t")))
        assert.isAbove(Number(pttl), 3_500)
        // idle, it ends at a deadline
        yield* untilReal(
          "the idle lease ended",
          Effect.sync(() => !w.lease.isLeased("t")),
          { within: 8_000 }
        )
        assert.strictEqual(yield* cluster.stored("t"), 21)
      })
  )

  it.live("a worker queued, seen by a write's look: the lease asks the store at its deadline, and ends", () =>
    Effect.gen(function* () {
      const { cluster, w } = yield* parkedLease({ ...settings, lockExpiration: 6_000, leaseHoldTime: 2_000 })
      const sent = yield* Option.getOrThrow(cluster.scripts)("t")
      // in use with nobody queued: renewed on its writes' looks
      let n = 1
      for (let i = 0; i < 10; i++) {
        yield* Effect.sleep(250)
        assert.strictEqual(yield* bump(w), ++n)
      }
      assert.notInclude((yield* sent).map(nameOf), Scripts.queueLength.name)
      // another worker's live entry, as its attempt leaves it but without the notice its
      // attempt would publish (a subscription broken unseen)
      const deadline = Date.now() + 30_000
      yield* Effect.orDie(cluster.server.command("ZADD", cluster.keys.queueDeadlines("t"), String(deadline), "other"))
      // still in use: not renewed once a write's look saw it (within two hold times)
      for (let i = 0; i < 20 && w.lease.isLeased("t"); i++) {
        yield* Effect.sleep(250)
        if (w.lease.isLeased("t")) assert.strictEqual(yield* bump(w), ++n)
      }
      assert.isFalse(w.lease.isLeased("t"))
      assert.include((yield* sent).map(nameOf), Scripts.queueLength.name)
      assert.strictEqual(yield* cluster.stored("t"), n)
    })
  )

  it.live(
    "its caller interrupted during the write: the write's outcome is still recorded, and the next is made on it",
    () =>
      Effect.gen(function* () {
        const { cluster, w } = yield* parkedLease(settings)
        // the write waits behind a pause shorter than the command timeout
        yield* Effect.orDie(cluster.server.command("CLIENT", "PAUSE", "500", "ALL"))
        const fiber = yield* Effect.forkChild(bump(w))
        yield* Effect.sleep(100)
        yield* Fiber.interrupt(fiber)
        assert.strictEqual(yield* cluster.stored("t"), 2)
        // not stuck: the lease goes on from what was written
        assert.strictEqual(yield* bump(w), 3)
        assert.strictEqual(yield* cluster.stored("t"), 3)
        assert.isTrue(w.lease.isLeased("t"))
      })
  )
})
