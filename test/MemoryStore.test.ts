import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/testing/TestClock"
import { makeKeys } from "../src/internal/keys.js"
import { cachedKeys } from "../src/internal/memory/keyCache.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { type ConnectionStatus, type Signal, Store } from "../src/Store.js"

const config = LeaseholdConfig.layer({ lockExpiration: "10 seconds", tokenExpiration: "1 hour" })
const StoreLive = MemoryStore.layer.pipe(Layer.provide(config))
const keys = makeKeys("leasehold")

const failureOf = <A, E>(exit: Exit.Exit<A, E>): Option.Option<E> =>
  Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : Option.none()

const tagOf = <A, E extends { readonly _tag: string }>(exit: Exit.Exit<A, E>): string | undefined =>
  Option.getOrUndefined(Option.map(failureOf(exit), (error) => error._tag))

describe("MemoryStore", () => {
  describe("subscriptions after a dropped connection", () => {
    it.effect("every listener that subscribes again receives, whatever order the old ones leave in", () =>
      Effect.gen(function* () {
        const memory = yield* MemoryStore.make
        // two workers' subscriptions to one token, as two Signals layers on one store make them
        const oldA = yield* Scope.make()
        const oldB = yield* Scope.make()
        yield* Scope.provide(memory.subscribe("t"), oldA)
        yield* Scope.provide(memory.subscribe("t"), oldB)
        yield* memory.control.dropSubscriptions
        // A leaves its lost subscription and subscribes again before B leaves its own
        yield* Scope.close(oldA, Exit.void)
        const a = yield* memory.subscribe("t")
        yield* Scope.close(oldB, Exit.void)
        const b = yield* memory.subscribe("t")
        const signal: Signal = { _tag: "Released", lockId: "L1" }
        yield* memory.publish("t", signal)
        // each subscription has its message queued already: the head is taken at once
        deepStrictEqual(yield* Stream.runHead(a), Option.some(signal))
        deepStrictEqual(yield* Stream.runHead(b), Option.some(signal))
      }).pipe(Effect.provide(config))
    )
  })

  describe("expiry", () => {
    it.effect("the sweeper removes expired entries without any access", () =>
      Effect.gen(function* () {
        const memory = yield* MemoryStore.make
        yield* memory.tryAcquire("t1", "L1", []) // lock (10 s) and fence (1 h)
        yield* memory.acquireQueued("t1", "w1:1", [], { instanceId: "w1" }) // queue, its deadlines and lock ids (10 s)
        yield* memory.writeIfHolder("t1", "L1", [["counter", "1"]]) // slice (1 h)
        yield* memory.claimSocket("t1", { instanceId: "w1", connectionId: "c1" }) // record (1 h)
        yield* memory.mailboxAppend("w1", "payload", { maxLen: 10, ttlMs: 60_000 })
        yield* memory.mailboxExpire("w1", 30_000) // mailbox (30 s)
        assert.strictEqual(yield* memory.residentKeys, 8)

        yield* TestClock.adjust("11 seconds")
        assert.strictEqual(yield* memory.residentKeys, 4)
        yield* TestClock.adjust("20 seconds")
        assert.strictEqual(yield* memory.residentKeys, 3)
        yield* TestClock.adjust("1 hour")
        assert.strictEqual(yield* memory.residentKeys, 0)
      }).pipe(Effect.provide(config))
    )

    it.effect("a deadline earlier than the planned sweep brings the sweep forward", () =>
      Effect.gen(function* () {
        const memory = yield* MemoryStore.make
        yield* memory.control.setRaw("leasehold:{t1}:s:late", "v", 3_600_000)
        // The sweeper is now asleep until the one-hour deadline.
        yield* TestClock.adjust("1 second")
        yield* memory.control.setRaw("leasehold:{t1}:s:early", "v", 2_000)
        yield* TestClock.adjust("3 seconds")
        assert.strictEqual(yield* memory.residentKeys, 1)
      }).pipe(Effect.provide(config))
    )

    it.effect("an expired entry is removed by the access that finds it, before any sweep", () =>
      Effect.gen(function* () {
        const memory = yield* MemoryStore.make
        yield* memory.control.setRaw(keys.slice("t1", "a"), "short", 100)
        yield* memory.control.setRaw(keys.slice("t1", "b"), "forever")
        // Expired, but sweeps are at least a second apart: only an access can remove it now.
        yield* TestClock.adjust("500 millis")
        assert.strictEqual(yield* memory.residentKeys, 2)
        const values = yield* memory.readSlices("t1", ["a", "b"])
        deepStrictEqual(values, [Option.none(), Option.some("forever")])
        assert.strictEqual(yield* memory.residentKeys, 1)
      }).pipe(Effect.provide(config))
    )

    it.effect("keyCount counts live keys only, even before the sweeper has run", () =>
      Effect.gen(function* () {
        const memory = yield* MemoryStore.make
        yield* memory.control.setRaw(keys.lock("t1"), "L1", 100)
        yield* memory.control.setRaw(keys.lock("t2"), "L2", 5_000)
        yield* TestClock.adjust("500 millis")
        assert.strictEqual(yield* memory.residentKeys, 2)
        assert.strictEqual(yield* memory.control.keyCount, 1)
        deepStrictEqual(yield* memory.control.getRaw(keys.lock("t1")), Option.none())
        deepStrictEqual(yield* memory.control.getRaw(keys.lock("t2")), Option.some("L2"))
      }).pipe(Effect.provide(config))
    )
  })

  it.effect("keyCount counts keys of every kind; an emptied queue is deleted", () =>
    Effect.gen(function* () {
      const store = yield* Store
      const control = yield* MemoryStore.MemoryStoreControl
      yield* store.tryAcquire("t1", "L1", [])
      yield* store.acquireQueued("t1", "w1:1", [], { instanceId: "w1" })
      yield* store.writeIfHolder("t1", "L1", [["counter", "1"]])
      yield* store.claimSocket("t1", { instanceId: "w1", connectionId: "c1" })
      yield* store.mailboxAppend("w1", "payload", { maxLen: 10, ttlMs: 60_000 })
      assert.strictEqual(yield* control.keyCount, 8)
      yield* store.leaveQueue("t1", "w1")
      assert.strictEqual(yield* control.keyCount, 5)
      assert.isTrue((yield* store.release("t1", "L1")).released)
      assert.strictEqual(yield* control.keyCount, 4)
    }).pipe(Effect.provide(StoreLive))
  )

  describe("raw keys", () => {
    it.effect("values live under the Redis key names", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const control = yield* MemoryStore.MemoryStoreControl
        yield* store.tryAcquire("t1", "L1", [])
        yield* store.writeIfHolder("t1", "L1", [["counter", "7"]])
        yield* store.claimSocket("t1", { instanceId: "w1", connectionId: "c1" })
        deepStrictEqual(yield* control.getRaw("leasehold:{t1}:lock"), Option.some("L1"))
        deepStrictEqual(yield* control.getRaw("leasehold:{t1}:fence"), Option.some("1"))
        deepStrictEqual(yield* control.getRaw("leasehold:{t1}:s:counter"), Option.some("7"))
        deepStrictEqual(
          yield* control.getRaw("leasehold:{t1}:socket"),
          Option.some('{"instanceId":"w1","connectionId":"c1"}')
        )
        yield* control.setRaw("leasehold:{t2}:s:counter", "42")
        deepStrictEqual(yield* store.readSlices("t2", ["counter"]), [Option.some("42")])
      }).pipe(Effect.provide(StoreLive))
    )

    it.effect("a corrupt record is reported, never deleted or refreshed, and skipped by a scan", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const control = yield* MemoryStore.MemoryStoreControl
        const record = { instanceId: "w1", connectionId: "c1" }
        yield* control.setRaw(keys.socket("bad"), "not json")
        yield* store.claimSocket("good", record)
        assert.strictEqual(tagOf(yield* Effect.exit(store.readSocket("bad"))), "CorruptValue")
        assert.strictEqual(tagOf(yield* Effect.exit(store.claimSocket("bad", record))), "CorruptValue")
        assert.isFalse(yield* store.deleteSocketIfOwner("bad", record))
        assert.isFalse(yield* store.refreshSocket("bad", record))
        deepStrictEqual(yield* control.getRaw(keys.socket("bad")), Option.some("not json"))
        const scanned = yield* Stream.runCollect(store.scanSockets)
        deepStrictEqual(Array.from(scanned), [["good", record]])
      }).pipe(Effect.provide(StoreLive))
    )

    it.effect("a value of the wrong kind is refused and the operation writes nothing", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const control = yield* MemoryStore.MemoryStoreControl
        yield* control.setRaw(keys.fence("t1"), "not a number")
        assert.strictEqual(tagOf(yield* Effect.exit(store.tryAcquire("t1", "L1", []))), "StoreRefused")
        deepStrictEqual(yield* control.getRaw(keys.lock("t1")), Option.none())
        yield* control.setRaw(keys.queue("t1"), "not a set")
        assert.strictEqual(
          tagOf(yield* Effect.exit(store.acquireQueued("t1", "w1:1", [], { instanceId: "w1" }))),
          "StoreRefused"
        )
        yield* control.setRaw(keys.mailbox("w1"), "not a stream")
        assert.strictEqual(
          tagOf(yield* Effect.exit(store.mailboxAppend("w1", "p", { maxLen: 10, ttlMs: 60_000 }))),
          "StoreRefused"
        )
        deepStrictEqual(yield* control.getRaw(keys.mailbox("w1")), Option.some("not a stream"))
      }).pipe(Effect.provide(StoreLive))
    )
  })

  describe("faults", () => {
    it.effect("setAvailable(false) fails operations and open subscriptions; true recovers with a new epoch", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const control = yield* MemoryStore.MemoryStoreControl
        yield* Effect.scoped(
          Effect.gen(function* () {
            const signals = yield* store.subscribe("t1")
            const received = yield* Queue.unbounded<Signal>()
            const consumer = yield* Effect.forkChild(
              Stream.runForEach(signals, (signal) => Queue.offer(received, signal))
            )
            yield* store.publish("t1", { _tag: "Released" })
            deepStrictEqual(yield* Queue.take(received), { _tag: "Released" })
            const reader = yield* Effect.forkChild(store.mailboxRead("w1", "0-0", { count: 10, blockMs: 5_000 }))
            yield* TestClock.adjust("1 second")

            yield* control.setAvailable(false)
            assert.strictEqual(tagOf(yield* Fiber.await(consumer)), "StoreUnavailable")
            assert.strictEqual(tagOf(yield* Fiber.await(reader)), "StoreUnavailable")
          })
        )
        deepStrictEqual(yield* store.status, { ready: false, epoch: 1 })
        const failures: ReadonlyArray<Exit.Exit<unknown, { readonly _tag: string }>> = [
          yield* Effect.exit(store.tryAcquire("t1", "L1", [])),
          yield* Effect.exit(store.release("t1", "L1")),
          yield* Effect.exit(store.readSlices("t1", ["a"])),
          yield* Effect.exit(store.publish("t1", { _tag: "Released" })),
          yield* Effect.exit(Effect.scoped(store.subscribe("t1"))),
          yield* Effect.exit(store.acquireQueued("t1", "w1:1", [], { instanceId: "w1" })),
          yield* Effect.exit(store.readSocket("t1")),
          yield* Effect.exit(Stream.runCollect(store.scanSockets)),
          yield* Effect.exit(store.mailboxAppend("w1", "p", { maxLen: 10, ttlMs: 60_000 })),
          yield* Effect.exit(store.mailboxRead("w1", "0-0", { count: 10 }))
        ]
        deepStrictEqual(
          failures.map((exit) => tagOf(exit)),
          failures.map(() => "StoreUnavailable")
        )
        // Validation still comes first.
        assert.strictEqual(tagOf(yield* Effect.exit(store.tryAcquire("bad token", "L1", []))), "InvalidToken")

        yield* control.setAvailable(true)
        deepStrictEqual(yield* store.status, { ready: true, epoch: 2 })
        yield* control.setAvailable(true)
        deepStrictEqual(yield* store.status, { ready: true, epoch: 2 })
        const acquired = yield* store.tryAcquire("t1", "L1", [])
        assert.strictEqual(acquired._tag, "Acquired")
      }).pipe(Effect.provide(StoreLive))
    )

    it.effect("dropSubscriptions fails open streams, bumps the epoch, and new subscribes work", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const control = yield* MemoryStore.MemoryStoreControl
        const observed = yield* Queue.unbounded<ConnectionStatus>()
        yield* Effect.forkChild(Stream.runForEach(store.statusChanges, (status) => Queue.offer(observed, status)))
        deepStrictEqual(yield* Queue.take(observed), { ready: true, epoch: 1 })

        yield* Effect.scoped(
          Effect.gen(function* () {
            const old = yield* store.subscribe("t1")
            const oldConsumer = yield* Effect.forkChild(Stream.runDrain(old))
            yield* control.dropSubscriptions
            assert.strictEqual(tagOf(yield* Fiber.await(oldConsumer)), "StoreUnavailable")
            deepStrictEqual(yield* Queue.take(observed), { ready: false, epoch: 1 })
            deepStrictEqual(yield* Queue.take(observed), { ready: true, epoch: 2 })

            const fresh = yield* store.subscribe("t1")
            const head = yield* Effect.forkChild(Stream.runHead(fresh))
            yield* store.publish("t1", { _tag: "Contended", instanceId: "w2" })
            deepStrictEqual(yield* Fiber.join(head), Option.some({ _tag: "Contended", instanceId: "w2" } as const))
          })
        )
        yield* control.dropSubscriptions
        deepStrictEqual(yield* store.status, { ready: true, epoch: 3 })
      }).pipe(Effect.provide(StoreLive))
    )
  })

  describe("mailbox", () => {
    it.effect("ids increase strictly while the clock stands still or goes back, and compare as numbers", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const append = (payload: string) => store.mailboxAppend("w1", payload, { maxLen: 100, ttlMs: 60_000 })
        deepStrictEqual([yield* append("a"), yield* append("b"), yield* append("c")], ["0-1", "0-2", "0-3"])
        yield* TestClock.setTime(9)
        assert.strictEqual(yield* append("d"), "9-0")
        yield* TestClock.setTime(5)
        assert.strictEqual(yield* append("e"), "9-1")
        yield* TestClock.setTime(10)
        assert.strictEqual(yield* append("f"), "10-0")

        const idsAfter = (id: string, count: number) =>
          Effect.map(store.mailboxRead("w1", id, { count }), (entries) => entries.map((entry) => entry.id))
        deepStrictEqual(yield* idsAfter("9-1", 10), ["10-0"])
        deepStrictEqual(yield* idsAfter("0-2", 2), ["0-3", "9-0"])
        deepStrictEqual(yield* idsAfter("0-0", 10), ["0-1", "0-2", "0-3", "9-0", "9-1", "10-0"])

        // Trimming everything away keeps the last id, as a Redis stream does.
        yield* store.mailboxTrim("w1", 0)
        assert.strictEqual(yield* store.mailboxLength("w1"), 0)
        assert.strictEqual(yield* append("g"), "10-1")
      }).pipe(Effect.provide(StoreLive))
    )

    it.effect("a blocking read is woken by an append to its own mailbox", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const seen = yield* store.mailboxAppend("w1", "seen", { maxLen: 10, ttlMs: 60_000 })
        const reader = yield* Effect.forkChild(store.mailboxRead("w1", seen, { count: 10, blockMs: 5_000 }))
        yield* TestClock.adjust("1 second")
        assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(reader.pollUnsafe()))))
        yield* store.mailboxAppend("w2", "elsewhere", { maxLen: 10, ttlMs: 60_000 })
        yield* TestClock.adjust("1 second")
        assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(reader.pollUnsafe()))))

        const id = yield* store.mailboxAppend("w1", "hello", { maxLen: 10, ttlMs: 60_000 })
        // No clock movement: only the append can end the wait.
        deepStrictEqual(yield* Fiber.join(reader), [{ id, payload: "hello" }])
      }).pipe(Effect.provide(StoreLive))
    )

    it.effect("a blocking read with nothing to read times out on the clock", () =>
      Effect.gen(function* () {
        const store = yield* Store
        const reader = yield* Effect.forkChild(store.mailboxRead("w1", "0-0", { count: 10, blockMs: 5_000 }))
        yield* TestClock.adjust("4999 millis")
        assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(reader.pollUnsafe()))))
        yield* TestClock.adjust("1 millis")
        deepStrictEqual(yield* Fiber.join(reader), [])
      }).pipe(Effect.provide(StoreLive))
    )
  })

  it("the key cache names every key as the key layout does, also once it started over", () => {
    const keys = makeKeys("lh")
    const cached = cachedKeys(keys, 3)
    for (let round = 0; round < 2; round++) {
      for (const token of ["a", "b", "c", "d", "e"]) {
        for (const name of ["lock", "fence", "queue", "queueDeadlines", "signal", "socket"] as const) {
          assert.strictEqual(cached[name](token), keys[name](token))
        }
        assert.strictEqual(cached.slice(token, "counter"), keys.slice(token, "counter"))
        assert.strictEqual(cached.slice(token, "other"), keys.slice(token, "other"))
        deepStrictEqual(cached.tokenKey(cached.slice(token, "counter")), keys.tokenKey(keys.slice(token, "counter")))
        deepStrictEqual(cached.tokenKey(cached.fence(token)), [token, "fence"])
      }
    }
    assert.strictEqual(cached.tokenKey("lh:mailbox:w1"), undefined)
    assert.strictEqual(cached.tokenKey("lh:mailbox:w1"), undefined)
    assert.strictEqual(cached.workerNotices("w1"), keys.workerNotices("w1"))
  })
})
