/**
 * The store conformance suite: the same cases for every `Store` backend
 * (docs/protocol.md#operations).
 * `Store.memory.test.ts` runs it on `MemoryStore` under `TestClock`, `Store.redis.test.ts`
 * on `RedisStore` against a real redis-server started per test.
 */
import { assert, describe } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Result from "effect/Result"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { encodeSocketRecord } from "../../src/internal/codec.js"
import { type ClaimResult, MailboxStart, type Signal, type SocketRecord, type Store } from "../../src/Store.js"
import type { AcknowledgedError, CorruptValue, InvalidInput, LockLost, StoreError } from "../../src/StoreError.js"
import { succeedsReal, untilReal } from "../support/poll.js"
import type { Backend, Fixture } from "./backend.js"
import {
  collectFirst,
  compareStreamIds,
  expectAcquired,
  expectHeld,
  failsWith,
  joinWithin,
  liveNow,
  within
} from "./helpers.js"
import { queueHandoff } from "./queueSuite.js"

const released: Signal = { _tag: "Released" }
/** What a release publishes: the lock id it released. */
const releasedBy = (lockId: string): Signal => ({ _tag: "Released", lockId })
const contended = (instanceId: string): Signal => ({ _tag: "Contended", instanceId })

const recordA: SocketRecord = { instanceId: "inst-a", connectionId: "conn-1" }
const recordB: SocketRecord = { instanceId: "inst-b", connectionId: "conn-2" }
const recordC: SocketRecord = { instanceId: "inst-c", connectionId: "conn-3" }

/** Tokens outside `[A-Za-z0-9_.:-]{1,128}`. */
export const invalidTokens: ReadonlyArray<readonly [label: string, token: string]> = [
  ["a star", "tok*"],
  ["a question mark", "tok?"],
  ["an open bracket", "tok[a]"],
  ["a space", "tok en"],
  ["the empty string", ""],
  ["a control character", "tok\u0001en"],
  ["129 characters", "t".repeat(129)]
]

type AnyOp = (value: string) => Effect.Effect<unknown, InvalidInput | LockLost | CorruptValue | AcknowledgedError>

/** Every operation that takes a token, applied to `token`. */
const tokenOperations = (store: Store.Service): ReadonlyArray<readonly [string, AnyOp]> => [
  ["tryAcquire", (t) => store.tryAcquire(t, "lock-1", ["a"])],
  ["release", (t) => store.release(t, "lock-1")],
  ["commitAndRelease", (t) => store.commitAndRelease(t, "lock-1", [["a", "1"]])],
  ["extend", (t) => store.extend(t, "lock-1")],
  ["holder", (t) => store.holder(t)],
  ["readSlices", (t) => store.readSlices(t, ["a"])],
  ["mailboxAppendToOwner", (t) => store.mailboxAppendToOwner(t, "payload", { maxLen: 100, ttlMs: 60_000 })],
  ["writeIfHolder", (t) => store.writeIfHolder(t, "lock-1", [["a", "1"]])],
  ["acquireQueued", (t) => store.acquireQueued(t, "inst-a:1", ["a"], { instanceId: "inst-a" })],
  ["releaseQueued", (t) => store.releaseQueued(t, "inst-a:1", { instanceId: "inst-a" })],
  [
    "commitAndReleaseQueued",
    (t) => store.commitAndReleaseQueued(t, "inst-a:1", [["a", "1"]], { instanceId: "inst-a" })
  ],
  ["leaveQueue", (t) => store.leaveQueue(t, "inst-a")],
  ["queueLength", (t) => store.queueLength(t, "inst-a")],
  ["queue", (t) => store.queue(t)],
  ["notices", (t) => Effect.scoped(store.notices(t, "inst-a"))],
  ["channelNotices", (t) => Effect.scoped(store.channelNotices(t, "inst-a"))],
  ["publish", (t) => store.publish(t, released)],
  ["subscribe", (t) => Effect.scoped(store.subscribe(t))],
  ["claimSocket", (t) => store.claimSocket(t, recordA)],
  ["readSocket", (t) => store.readSocket(t)],
  ["deleteSocketIfOwner", (t) => store.deleteSocketIfOwner(t, recordA)],
  ["refreshSocket", (t) => store.refreshSocket(t, recordA)],
  ["claimSockets", (t) => store.claimSockets([[t, recordA]])],
  ["tokenKeys", (t) => store.tokenKeys(t)]
]

/** Every operation that takes an instance id, applied to `instanceId`. */
const instanceOperations = (store: Store.Service): ReadonlyArray<readonly [string, AnyOp]> => [
  ["acquireQueued", (i) => store.acquireQueued("tok", "lock-1", ["a"], { instanceId: i })],
  ["acquireQueued (claim)", (i) => store.acquireQueued("tok", "lock-1", [], { instanceId: i, claim: 1 })],
  ["releaseQueued (requeue)", (i) => store.releaseQueued("tok", "lock-1", { instanceId: i, requeue: true })],
  [
    "commitAndReleaseQueued (requeue)",
    (i) => store.commitAndReleaseQueued("tok", "lock-1", [["a", "1"]], { instanceId: i, requeue: true })
  ],
  ["leaveQueue", (i) => store.leaveQueue("tok", i)],
  ["queueLength", (i) => store.queueLength("tok", i)],
  ["notices", (i) => Effect.scoped(store.notices("tok", i))],
  ["channelNotices", (i) => Effect.scoped(store.channelNotices("tok", i))],
  ["mailboxAppend", (i) => store.mailboxAppend(i, "payload", { maxLen: 100, ttlMs: 60_000 })],
  ["mailboxRead", (i) => store.mailboxRead(i, MailboxStart, { count: 10 })],
  ["mailboxTrim", (i) => store.mailboxTrim(i, 10)],
  ["mailboxExpire", (i) => store.mailboxExpire(i, 1_000)],
  ["mailboxLength", (i) => store.mailboxLength(i)],
  ["mailboxSetCursor", (i) => store.mailboxSetCursor(i, "1-0", 1_000)],
  ["mailboxCursor", (i) => store.mailboxCursor(i)],
  ["publish (contended)", (i) => store.publish("tok", contended(i))],
  ["claimSocket (record)", (i) => store.claimSocket("tok", { instanceId: i, connectionId: "c" })],
  ["deleteSocketIfOwner (record)", (i) => store.deleteSocketIfOwner("tok", { instanceId: i, connectionId: "c" })],
  ["refreshSocket (record)", (i) => store.refreshSocket("tok", { instanceId: i, connectionId: "c" })]
]

let markers = 0

/**
 * The signals `seen` recorded of `token` before a marker (a `Contended` of an instance id no
 * worker has) published after them on the same channel, once it has arrived: whatever was
 * published before this call, the marker left out. The same on every store.
 */
const signalsBefore = (fx: Fixture, token: string, seen: Ref.Ref<ReadonlyArray<Signal>>) =>
  Effect.gen(function* () {
    const id = `leasehold-test-marker-${process.pid}-${++markers}`
    const isMarker = (signal: Signal) => signal._tag === "Contended" && signal.instanceId === id
    yield* fx.store.publish(token, contended(id))
    yield* untilReal(
      "the marker signal",
      Effect.map(Ref.get(seen), (all) => all.some(isMarker)),
      { within: 5_000 }
    )
    const all = yield* Ref.getAndUpdate(seen, (now) => now.filter((signal) => !isMarker(signal)))
    const index = (all: ReadonlyArray<Signal>) => all.findIndex(isMarker)
    return all.slice(0, index(all))
  })

const noCommandsDuring = <A, E, R>(fx: Fixture, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const before = yield* Option.match(fx.commandsProcessed, { onNone: () => Effect.succeed(0), onSome: (n) => n })
    const result = yield* effect
    const after = yield* Option.match(fx.commandsProcessed, { onNone: () => Effect.succeed(0), onSome: (n) => n })
    assert.strictEqual(after - before, 0, "commands reached the server")
    return result
  })

const subscribersOf = (fx: Fixture, channel: string) =>
  Option.match(fx.channelSubscribers, {
    onNone: () => Effect.succeed(Option.none<number>()),
    onSome: (numsub) => Effect.map(numsub(channel), Option.some)
  })

/** Register the conformance cases for `backend`. */
export const storeSuite = (backend: Backend): void => {
  const test = backend.test

  describe("the fence lives as long as the slices", () => {
    /** The TTLs of `tok`'s keys, from one `tokenKeys` (one script: read at one instant), by name (-1: none). */
    const ttlsOf = (fx: Fixture) =>
      Effect.map(
        fx.store.tokenKeys("tok"),
        (infos) => (name: string) =>
          Option.getOrElse(
            Option.flatMap(Option.fromNullishOr(infos.find((info) => info.name === name)), (info) => info.ttlMs),
            () => -1
          )
      )
    const ttlOf = (fx: Fixture, name: string) => Effect.map(ttlsOf(fx), (ttl) => ttl(name))

    /**
     * How long passes between a refresh and the next step (`gapMs`), and how far two TTLs
     * that should match may differ (`marginMs`): exact on memory; on a real server the
     * steps and reads come late by however long a loaded machine takes, so the margin is
     * 200 ms and a TTL left alone is `gapMs`, twice that, behind.
     */
    const timing = (fx: Fixture) => (fx.exactTime ? { gapMs: 100, marginMs: 50 } : { gapMs: 400, marginMs: 200 })

    /**
     * `step` runs `gapMs` after the fence was last refreshed, and refreshes slice `a`: the
     * fence's TTL must be the slice's again (one left alone would be `gapMs` shorter).
     */
    const fenceFollows = (fx: Fixture, label: string, step: Effect.Effect<unknown, unknown>) =>
      Effect.gen(function* () {
        const { gapMs, marginMs } = timing(fx)
        yield* fx.advance(gapMs)
        yield* step
        const ttl = yield* ttlsOf(fx)
        const fence = ttl("fence")
        const slice = ttl("s:a")
        assert.isAtLeast(fence, slice - marginMs, `${label}: fence TTL ${fence} ms, slice TTL ${slice} ms`)
      })

    test("a write, a commit, a read and an extension give the fence the slices' TTL", (fx) =>
      Effect.gen(function* () {
        const { gapMs, marginMs } = timing(fx)
        // each step that needs the lock runs well within the lock expiration of its grant
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-1", []))
        yield* fenceFollows(fx, "writeIfHolder", fx.store.writeIfHolder("tok", "lock-1", [["a", "1"]]))
        assert.isTrue((yield* fx.store.release("tok", "lock-1")).released)

        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-2", []))
        yield* fenceFollows(fx, "commitAndRelease", fx.store.commitAndRelease("tok", "lock-2", [["a", "2"]]))

        yield* fenceFollows(fx, "readSlices", fx.store.readSlices("tok", ["a"]))

        // an extension refreshes the named slices, and the fence with them: the slice's TTL
        // is then `gapMs` (at least) above what it was after the gap before
        yield* fx.advance(gapMs)
        const sliceBefore = yield* ttlOf(fx, "s:a")
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-3", []))
        yield* fenceFollows(
          fx,
          "extend",
          Effect.map(fx.store.extend("tok", "lock-3", ["a"]), (extended) => assert.isTrue(extended))
        )
        assert.isAbove(yield* ttlOf(fx, "s:a"), sliceBefore + gapMs - marginMs)
        // not by a caller that no longer holds the lock
        assert.isTrue((yield* fx.store.release("tok", "lock-3")).released)
        yield* fx.advance(gapMs)
        const unchanged = yield* ttlOf(fx, "s:a")
        assert.isFalse(yield* fx.store.extend("tok", "lock-3", ["a"]))
        assert.isAtMost(yield* ttlOf(fx, "s:a"), unchanged)
      }))
  })

  describe("lock", () => {
    test("acquire when free: Acquired with a positive integer fence and no values", (fx) =>
      Effect.gen(function* () {
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
        const grant = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        assert.isTrue(Number.isInteger(grant.fence) && grant.fence > 0, `fence ${grant.fence}`)
        deepStrictEqual(grant.values, [])
      }))

    test("acquire when held: Held with 0 < remainingMs <= lockExpiration", (fx) =>
      Effect.gen(function* () {
        const lockMs = fx.lockExpirationMs
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        const first = yield* expectHeld(fx.store.tryAcquire("tok", "lock-b", []))
        assert.isTrue(first.remainingMs > 0 && first.remainingMs <= lockMs, `remainingMs ${first.remainingMs}`)
        if (fx.exactTime) assert.strictEqual(first.remainingMs, lockMs)

        yield* fx.advance(100)
        const later = yield* expectHeld(fx.store.tryAcquire("tok", "lock-b", ["a"]))
        assert.isTrue(
          later.remainingMs > 0 && later.remainingMs <= lockMs - 100 + 2,
          `remainingMs ${later.remainingMs}`
        )
        if (fx.exactTime) assert.strictEqual(later.remainingMs, lockMs - 100)
        const holder = yield* fx.store.holder("tok")
        assert.strictEqual(Option.map(holder, (h) => h.lockId).pipe(Option.getOrUndefined), "lock-a")
      }))

    test("acquire after expiry: granted to the next acquirer, with a greater fence", (fx) =>
      Effect.gen(function* () {
        const a = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.advance(fx.lockExpirationMs + 50)
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
        const b = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
        assert.isTrue(b.fence > a.fence, `fences ${a.fence} then ${b.fence}`)
        const holder = yield* fx.store.holder("tok")
        assert.strictEqual(Option.map(holder, (h) => h.lockId).pipe(Option.getOrUndefined), "lock-b")
      }))

    test("fencing numbers strictly increase across grants (release, commit, expiry)", (fx) =>
      Effect.gen(function* () {
        const fences: Array<number> = []
        fences.push((yield* expectAcquired(fx.store.tryAcquire("tok", "lock-1", []))).fence)
        assert.isTrue((yield* fx.store.release("tok", "lock-1")).released)
        fences.push((yield* expectAcquired(fx.store.tryAcquire("tok", "lock-2", []))).fence)
        yield* fx.store.commitAndRelease("tok", "lock-2", [["a", "1"]])
        fences.push((yield* expectAcquired(fx.store.tryAcquire("tok", "lock-3", []))).fence)
        yield* fx.advance(fx.lockExpirationMs + 50)
        fences.push((yield* expectAcquired(fx.store.tryAcquire("tok", "lock-4", []))).fence)
        // a refused acquire does not consume a fence
        yield* expectHeld(fx.store.tryAcquire("tok", "lock-5", []))
        assert.isTrue((yield* fx.store.release("tok", "lock-4")).released)
        fences.push((yield* expectAcquired(fx.store.tryAcquire("tok", "lock-6", []))).fence)
        for (let i = 1; i < fences.length; i++) {
          assert.isTrue((fences[i] ?? 0) > (fences[i - 1] ?? 0), `fences ${fences.join(", ")}`)
        }
        // fences are per token
        const other = yield* expectAcquired(fx.store.tryAcquire("other", "lock-7", []))
        assert.isTrue(other.fence > 0)
      }))

    test("acquire returns the requested slices in the order asked, None for a missing one", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.store.writeIfHolder("tok", "lock-a", [
          ["a", '{"n":1}'],
          ["c", '{"n":3}']
        ])
        assert.isTrue((yield* fx.store.release("tok", "lock-a")).released)

        const b = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", ["a", "b", "c"]))
        deepStrictEqual(b.values, [Option.some('{"n":1}'), Option.none(), Option.some('{"n":3}')])
        assert.isTrue((yield* fx.store.release("tok", "lock-b")).released)

        const c = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-c", ["c", "missing", "a"]))
        deepStrictEqual(c.values, [Option.some('{"n":3}'), Option.none(), Option.some('{"n":1}')])
      }))

    test("release by the holder frees the lock and is true once; by a non-holder it is false", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        assert.isFalse((yield* fx.store.release("tok", "lock-x")).released)
        assert.isTrue(Option.isSome(yield* fx.store.holder("tok")))
        assert.isTrue((yield* fx.store.release("tok", "lock-a")).released)
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
        assert.isFalse((yield* fx.store.release("tok", "lock-a")).released)
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
      }))

    test("release by a stale holder (after expiry and a new grant) leaves the new holder's lock", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.advance(fx.lockExpirationMs + 50)
        const b = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
        assert.isFalse((yield* fx.store.release("tok", "lock-a")).released)
        const holder = yield* fx.store.holder("tok")
        assert.isTrue(Option.isSome(holder))
        if (Option.isSome(holder)) {
          assert.strictEqual(holder.value.lockId, "lock-b")
          assert.strictEqual(holder.value.fence, b.fence)
        }
        yield* expectHeld(fx.store.tryAcquire("tok", "lock-c", []))
      }))

    test("extend: the holder pushes the expiry; a stale holder fails", (fx) =>
      Effect.gen(function* () {
        const lockMs = fx.lockExpirationMs
        const half = Math.floor(lockMs / 2)
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.advance(half)
        const before = Option.getOrThrow(yield* fx.store.holder("tok")).remainingMs
        assert.isTrue(yield* fx.store.extend("tok", "lock-a"))
        const after = Option.getOrThrow(yield* fx.store.holder("tok")).remainingMs
        assert.isTrue(after > before, `remaining ${before} before extend, ${after} after`)
        // a quarter of the lock expiration either way: not extended, it would have half left
        const quarter = Math.floor(lockMs / 4)
        assert.isTrue(after <= lockMs && after > lockMs - quarter, `remaining after extend ${after}`)
        if (fx.exactTime) {
          assert.strictEqual(before, lockMs - half)
          assert.strictEqual(after, lockMs)
        }
        // past the original expiry but well within the extended one: still held by A
        yield* fx.advance(lockMs - half + quarter)
        const stillHeld = yield* fx.store.holder("tok")
        assert.strictEqual(Option.getOrUndefined(stillHeld)?.lockId, "lock-a")
        yield* expectHeld(fx.store.tryAcquire("tok", "lock-b", []))

        // expired, nobody holds it: extend fails and does not resurrect it
        yield* fx.advance(lockMs)
        assert.isFalse(yield* fx.store.extend("tok", "lock-a"))
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))

        // another holder: a stale extend fails and leaves B's expiry alone
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
        yield* fx.advance(half)
        const bBefore = Option.getOrThrow(yield* fx.store.holder("tok")).remainingMs
        assert.isFalse(yield* fx.store.extend("tok", "lock-a"))
        const bAfter = Option.getOrThrow(yield* fx.store.holder("tok"))
        assert.strictEqual(bAfter.lockId, "lock-b")
        assert.isTrue(bAfter.remainingMs <= bBefore, `B's remaining ${bBefore} then ${bAfter.remainingMs}`)
      }))

    test("holder reports lockId, fence and remaining time; None when free", (fx) =>
      Effect.gen(function* () {
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
        const grant = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.advance(100)
        const holder = yield* fx.store.holder("tok")
        assert.isTrue(Option.isSome(holder))
        if (Option.isNone(holder)) return
        assert.strictEqual(holder.value.lockId, "lock-a")
        assert.strictEqual(holder.value.fence, grant.fence)
        const remaining = holder.value.remainingMs
        assert.isTrue(remaining > 0 && remaining <= fx.lockExpirationMs - 100 + 2, `remainingMs ${remaining}`)
        if (fx.exactTime) assert.strictEqual(remaining, fx.lockExpirationMs - 100)
        assert.isTrue((yield* fx.store.release("tok", "lock-a")).released)
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
      }))
  })

  describe("slices", () => {
    test("writeIfHolder writes every slice while the lock holds", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.store.writeIfHolder("tok", "lock-a", [
          ["a", "1"],
          ["b", "2"]
        ])
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a", "b"]), [Option.some("1"), Option.some("2")])
        yield* fx.store.writeIfHolder("tok", "lock-a", [["b", "3"]])
        deepStrictEqual(yield* fx.store.readSlices("tok", ["b", "a", "c"]), [
          Option.some("3"),
          Option.some("1"),
          Option.none()
        ])
        // slices of another token are separate
        deepStrictEqual(yield* fx.store.readSlices("other", ["a"]), [Option.none()])
      }))

    test("writeIfHolder after expiry: LockLost (no holder) and nothing written", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.store.writeIfHolder("tok", "lock-a", [["a", "1"]])
        yield* fx.advance(fx.lockExpirationMs + 50)
        const error = yield* failsWith(
          fx.store.writeIfHolder("tok", "lock-a", [
            ["a", "x"],
            ["b", "y"]
          ]),
          "LockLost"
        )
        assert.strictEqual(error.token, "tok")
        assert.strictEqual(error.lockId, "lock-a")
        deepStrictEqual(error.holder, Option.none())
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a", "b"]), [Option.some("1"), Option.none()])
      }))

    test("writeIfHolder after another grant: LockLost with the current holder and nothing written", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.advance(fx.lockExpirationMs + 50)
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
        const error = yield* failsWith(
          fx.store.writeIfHolder("tok", "lock-a", [
            ["a", "x"],
            ["b", "y"]
          ]),
          "LockLost"
        )
        assert.strictEqual(error.lockId, "lock-a")
        deepStrictEqual(error.holder, Option.some("lock-b"))
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a", "b"]), [Option.none(), Option.none()])
        assert.strictEqual(Option.getOrUndefined(yield* fx.store.holder("tok"))?.lockId, "lock-b")
      }))

    test("writeIfHolder without ever holding the lock: LockLost, nothing written", (fx) =>
      Effect.gen(function* () {
        const error = yield* failsWith(fx.store.writeIfHolder("tok", "lock-a", [["a", "x"]]), "LockLost")
        deepStrictEqual(error.holder, Option.none())
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a"]), [Option.none()])
      }))

    test("commitAndRelease writes, releases and publishes Released", (fx) =>
      Effect.gen(function* () {
        const signals = yield* fx.store.subscribe("tok")
        const received = yield* collectFirst(signals, 1)
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.store.commitAndRelease("tok", "lock-a", [
          ["a", "1"],
          ["b", "2"]
        ])
        assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a", "b"]), [Option.some("1"), Option.some("2")])
        deepStrictEqual(yield* joinWithin("Released after commit", 5_000, received), [releasedBy("lock-a")])
        const next = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", ["a", "b"]))
        deepStrictEqual(next.values, [Option.some("1"), Option.some("2")])
      }))

    test("commitAndRelease by a non-holder: LockLost, nothing written, lock kept, nothing published", (fx) =>
      Effect.gen(function* () {
        const signals = yield* fx.store.subscribe("tok")
        const seen = yield* Ref.make<ReadonlyArray<Signal>>([])
        yield* Effect.forkChild(Stream.runForEach(signals, (signal) => Ref.update(seen, (all) => [...all, signal])))

        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.advance(fx.lockExpirationMs + 50)
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
        const error = yield* failsWith(fx.store.commitAndRelease("tok", "lock-a", [["a", "x"]]), "LockLost")
        deepStrictEqual(error.holder, Option.some("lock-b"))
        assert.strictEqual(Option.getOrUndefined(yield* fx.store.holder("tok"))?.lockId, "lock-b")
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a"]), [Option.none()])
        // a failed release publishes nothing either
        assert.isFalse((yield* fx.store.release("tok", "lock-a")).released)

        deepStrictEqual(yield* signalsBefore(fx, "tok", seen), [])
        // the subscription works: the holder's release is seen
        assert.isTrue((yield* fx.store.release("tok", "lock-b")).released)
        yield* untilReal(
          "Released after the holder's release",
          Effect.map(Ref.get(seen), (all) => all.length === 1),
          { within: 5_000 }
        )
        deepStrictEqual(yield* Ref.get(seen), [releasedBy("lock-b")])
      }))
  })

  describe("queue hand-off", () => {
    queueHandoff(backend)
  })

  describe("signals", () => {
    test("a confirmed subscriber receives the signals published and the releases' in order", (fx) =>
      Effect.gen(function* () {
        const signals = yield* fx.store.subscribe("tok")
        const received = yield* collectFirst(signals, 4)
        yield* fx.store.publish("tok", contended("inst-a"))
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        assert.isTrue((yield* fx.store.release("tok", "lock-a")).released)
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-b", []))
        yield* fx.store.commitAndRelease("tok", "lock-b", [["a", "1"]])
        yield* fx.store.publish("tok", contended("inst-c"))
        deepStrictEqual(yield* joinWithin("four signals", 5_000, received), [
          contended("inst-a"),
          releasedBy("lock-a"),
          releasedBy("lock-b"),
          contended("inst-c")
        ])
      }))

    test("a subscriber receives its token's signals only", (fx) =>
      Effect.gen(function* () {
        const signals = yield* fx.store.subscribe("tok")
        const received = yield* collectFirst(signals, 1)
        yield* fx.store.publish("other", released)
        yield* expectAcquired(fx.store.tryAcquire("other", "lock-a", []))
        assert.isTrue((yield* fx.store.release("other", "lock-a")).released)
        yield* fx.store.publish("tok", contended("inst-z"))
        deepStrictEqual(yield* joinWithin("one signal", 5_000, received), [contended("inst-z")])
      }))

    test("two subscribers on one token both receive (Redis: one shared subscription)", (fx) =>
      Effect.gen(function* () {
        const channel = fx.keys.signal("tok")
        const scope1 = yield* Scope.make()
        const scope2 = yield* Scope.make()
        const first = yield* fx.store.subscribe("tok").pipe(Scope.provide(scope1))
        const second = yield* fx.store.subscribe("tok").pipe(Scope.provide(scope2))
        deepStrictEqual(yield* subscribersOf(fx, channel), fx.channelSubscribers.pipe(Option.as(1)))
        const got1 = yield* collectFirst(first, 1)
        const got2 = yield* collectFirst(second, 2)
        yield* fx.store.publish("tok", released)
        deepStrictEqual(yield* joinWithin("first subscriber", 5_000, got1), [released])

        yield* Scope.close(scope1, Exit.void)
        deepStrictEqual(yield* subscribersOf(fx, channel), fx.channelSubscribers.pipe(Option.as(1)))
        yield* fx.store.publish("tok", contended("inst-a"))
        deepStrictEqual(yield* joinWithin("second subscriber", 5_000, got2), [released, contended("inst-a")])

        yield* Scope.close(scope2, Exit.void)
        if (Option.isSome(fx.channelSubscribers)) {
          const numsub = fx.channelSubscribers.value
          yield* untilReal(
            "PUBSUB NUMSUB drops to 0",
            Effect.map(numsub(channel), (n) => n === 0),
            { within: 2_000 }
          )
        }
      }))

    test("after the subscription's scope closes nothing more is delivered", (fx) =>
      Effect.gen(function* () {
        const channel = fx.keys.signal("tok")
        const scope = yield* Scope.make()
        const signals = yield* fx.store.subscribe("tok").pipe(Scope.provide(scope))
        const seen = yield* Ref.make<ReadonlyArray<Signal>>([])
        const reader = yield* Effect.forkChild(
          Stream.runForEach(signals, (signal) => Ref.update(seen, (all) => [...all, signal]))
        )
        yield* fx.store.publish("tok", released)
        yield* untilReal(
          "the first signal",
          Effect.map(Ref.get(seen), (all) => all.length === 1),
          { within: 5_000 }
        )
        deepStrictEqual(yield* subscribersOf(fx, channel), fx.channelSubscribers.pipe(Option.as(1)))

        yield* Scope.close(scope, Exit.void)
        if (Option.isSome(fx.channelSubscribers)) {
          const numsub = fx.channelSubscribers.value
          yield* untilReal(
            "PUBSUB NUMSUB drops to 0",
            Effect.map(numsub(channel), (n) => n === 0),
            { within: 2_000 }
          )
        }
        yield* fx.store.publish("tok", contended("inst-a"))
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        assert.isTrue((yield* fx.store.release("tok", "lock-a")).released)
        // a real server had no subscriber left when they were published (PUBSUB NUMSUB 0
        // above): nothing was sent to this client; memory delivers in process
        if (fx.quiet._tag === "Settle") yield* fx.quiet.settle
        deepStrictEqual(yield* Ref.get(seen), [released])
        yield* Fiber.interrupt(reader)
      }))
  })

  describe("socket records", () => {
    test("two concurrent claims: exactly one Claimed, the other Taken with the winner's record", (fx) =>
      Effect.gen(function* () {
        for (const token of ["tok-1", "tok-2", "tok-3", "tok-4", "tok-5"]) {
          const [a, b] = yield* Effect.all(
            [fx.store.claimSocket(token, recordA), fx.store.claimSocket(token, recordB)],
            {
              concurrency: "unbounded"
            }
          )
          const outcomes = [a, b]
          const claimed = outcomes.filter((r) => r._tag === "Claimed").length
          assert.strictEqual(claimed, 1, `${token}: ${JSON.stringify(outcomes)}`)
          const winner = a._tag === "Claimed" ? recordA : recordB
          const loser = a._tag === "Claimed" ? b : a
          deepStrictEqual(loser, { _tag: "Taken", record: winner })
          deepStrictEqual(yield* fx.store.readSocket(token), Option.some(winner))
        }
      }))

    test("claiming again returns the record there, even for the same instance", (fx) =>
      Effect.gen(function* () {
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.none())
        deepStrictEqual(yield* fx.store.claimSocket("tok", recordA), { _tag: "Claimed" })
        const sameInstance: SocketRecord = { instanceId: recordA.instanceId, connectionId: "conn-other" }
        deepStrictEqual(yield* fx.store.claimSocket("tok", sameInstance), { _tag: "Taken", record: recordA })
        deepStrictEqual(yield* fx.store.claimSocket("tok", recordB), { _tag: "Taken", record: recordA })
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.some(recordA))
      }))

    test("deleteSocketIfOwner deletes only an exactly matching record", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.claimSocket("tok", recordA)
        assert.isFalse(yield* fx.store.deleteSocketIfOwner("tok", recordB))
        const sameInstance: SocketRecord = { instanceId: recordA.instanceId, connectionId: "conn-other" }
        assert.isFalse(yield* fx.store.deleteSocketIfOwner("tok", sameInstance))
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.some(recordA))
        assert.isTrue(yield* fx.store.deleteSocketIfOwner("tok", recordA))
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.none())
        assert.isFalse(yield* fx.store.deleteSocketIfOwner("tok", recordA))
        deepStrictEqual(yield* fx.store.claimSocket("tok", recordB), { _tag: "Claimed" })
      }))

    test("takeOverSocket writes only over exactly the record expected, and returns what is there otherwise", (fx) =>
      Effect.gen(function* () {
        deepStrictEqual(yield* fx.store.takeOverSocket("tok", recordA, recordB), {
          _tag: "Changed",
          record: Option.none()
        })
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.none())
        yield* fx.store.claimSocket("tok", recordA)
        const sameInstance: SocketRecord = { instanceId: recordA.instanceId, connectionId: "conn-other" }
        deepStrictEqual(yield* fx.store.takeOverSocket("tok", sameInstance, recordB), {
          _tag: "Changed",
          record: Option.some(recordA)
        })
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.some(recordA))
        deepStrictEqual(yield* fx.store.takeOverSocket("tok", recordA, recordB), { _tag: "TakenOver" })
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.some(recordB))
        // the second of two take-overs of the same record finds the first one's
        deepStrictEqual(yield* fx.store.takeOverSocket("tok", recordA, sameInstance), {
          _tag: "Changed",
          record: Option.some(recordB)
        })
        yield* fx.putRaw(fx.keys.socket("bad"), "{not json")
        const corrupt = yield* Effect.flip(fx.store.takeOverSocket("bad", recordA, recordB))
        assert.strictEqual(corrupt._tag, "CorruptValue")
        const invalid = yield* Effect.flip(fx.store.takeOverSocket("tok", { ...recordA, instanceId: "a b" }, recordB))
        assert.strictEqual(invalid._tag, "InvalidInstanceId")
      }))

    test("presence: refresh tells whether the entry was there; remove; a message reaches the worker's subscriber", (fx) =>
      Effect.gen(function* () {
        assert.isFalse(yield* fx.store.isPresent("worker-1"))
        assert.isFalse(yield* fx.store.refreshPresence("worker-1", 60_000))
        assert.isTrue(yield* fx.store.isPresent("worker-1"))
        assert.isTrue(yield* fx.store.refreshPresence("worker-1", 60_000))
        yield* fx.store.removePresence("worker-1")
        assert.isFalse(yield* fx.store.isPresent("worker-1"))
        const messages = yield* fx.store.presenceMessages("worker-1")
        // the stream holds what arrives from the confirmed subscription on, read or not yet
        const first = yield* Effect.forkChild(Stream.runHead(messages))
        const ask = { _tag: "Ask", askId: "q1", from: "worker-2", token: "tok", connectionId: "c 1" } as const
        yield* fx.store.sendPresence("worker-1", ask)
        deepStrictEqual(yield* Fiber.join(first), Option.some(ask))
        const invalid = yield* Effect.flip(fx.store.sendPresence("worker-1", { ...ask, from: "not valid" }))
        assert.strictEqual(invalid._tag, "InvalidInstanceId")
      }))

    test("refreshSocket succeeds only for the owner", (fx) =>
      Effect.gen(function* () {
        assert.isFalse(yield* fx.store.refreshSocket("tok", recordA))
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.none())
        yield* fx.store.claimSocket("tok", recordA)
        assert.isFalse(yield* fx.store.refreshSocket("tok", recordB))
        assert.isTrue(yield* fx.store.refreshSocket("tok", recordA))
        deepStrictEqual(yield* fx.store.readSocket("tok"), Option.some(recordA))
      }))

    test("scanSockets lists the records of several tokens and nothing else", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.claimSocket("tok-1", recordA)
        yield* fx.store.claimSocket("tok-2", recordB)
        yield* fx.store.claimSocket("tok-3", recordC)
        // other keys of the same tokens must not show up
        yield* expectAcquired(fx.store.tryAcquire("tok-1", "lock-a", []))
        yield* fx.store.writeIfHolder("tok-1", "lock-a", [["socket", "not a record"]])
        yield* fx.store.acquireQueued("tok-2", "inst-a:1", [], { instanceId: "inst-a" })
        yield* fx.store.acquireQueued("tok-2", "inst-b:1", [], { instanceId: "inst-b" })
        yield* fx.store.mailboxAppend("inst-a", "payload", { maxLen: 100, ttlMs: 60_000 })
        const all = yield* Stream.runCollect(fx.store.scanSockets)
        const sorted = [...all].sort(([a], [b]) => a.localeCompare(b))
        deepStrictEqual(sorted, [
          ["tok-1", recordA],
          ["tok-2", recordB],
          ["tok-3", recordC]
        ])
      }))

    test("scanSockets skips a record that does not decode", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.claimSocket("tok-1", recordA)
        yield* fx.putRaw(fx.keys.socket("tok-bad"), "not json")
        const all = yield* Stream.runCollect(fx.store.scanSockets)
        deepStrictEqual([...all], [["tok-1", recordA]])
      }))
  })

  describe("socket record batches and events", () => {
    test("claimSockets: claimed, taken by the same record, taken by another, corrupt, in the order asked", (fx) =>
      Effect.gen(function* () {
        deepStrictEqual(yield* fx.store.claimSockets([]), [])
        yield* fx.store.claimSocket("tok-mine", recordA)
        yield* fx.store.claimSocket("tok-theirs", recordB)
        yield* fx.putRaw(fx.keys.socket("tok-bad"), "not json")
        const results = yield* fx.store.claimSockets([
          ["tok-new", recordA],
          ["tok-mine", recordA],
          ["tok-theirs", recordA],
          ["tok-bad", recordA]
        ])
        assert.strictEqual(results.length, 4)
        const expected: ReadonlyArray<ClaimResult> = [
          { _tag: "Claimed" },
          { _tag: "Taken", record: recordA },
          { _tag: "Taken", record: recordB }
        ]
        deepStrictEqual(results.slice(0, 3), expected.map(Result.succeed))
        const corrupt = results[3]!
        assert.isTrue(Result.isFailure(corrupt) && corrupt.failure._tag === "CorruptValue")
        deepStrictEqual(yield* fx.store.readSocket("tok-new"), Option.some(recordA))
        deepStrictEqual(yield* fx.store.readSocket("tok-theirs"), Option.some(recordB))
      }))

    test("claimSockets validates every token and instance before any I/O", (fx) =>
      Effect.gen(function* () {
        yield* failsWith(
          fx.store.claimSockets([
            ["tok-1", recordA],
            ["tok*", recordA]
          ]),
          "InvalidToken"
        )
        yield* failsWith(
          fx.store.claimSockets([["tok-1", { instanceId: "in st", connectionId: "c" }]]),
          "InvalidInstanceId"
        )
        deepStrictEqual(yield* fx.store.readSocket("tok-1"), Option.none())
      }))

    test("enableSocketEvents is accepted by a store that allows it", (fx) =>
      Effect.gen(function* () {
        const setting = yield* fx.store.enableSocketEvents
        assert.strictEqual(setting._tag, "Enabled")
        // twice is harmless
        assert.strictEqual((yield* fx.store.enableSocketEvents)._tag, "Enabled")
      }))

    test("socketEvents reports set, del and expired of socket records, and nothing of other keys", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.enableSocketEvents
        const events = yield* fx.store.socketEvents
        const received = yield* collectFirst(events, 5)
        yield* expectAcquired(fx.store.tryAcquire("tok-1", "lock-a", []))
        yield* fx.store.writeIfHolder("tok-1", "lock-a", [["socket", "a slice, not a record"]])
        yield* fx.store.claimSocket("tok-1", recordA)
        yield* fx.store.claimSocket("tok-1", recordB)
        assert.isFalse(yield* fx.store.deleteSocketIfOwner("tok-1", recordB))
        assert.isTrue(yield* fx.store.deleteSocketIfOwner("tok-1", recordA))
        yield* fx.store.claimSockets([["tok-2", recordB]])
        yield* fx.putRawExpiring(fx.keys.socket("tok-3"), JSON.stringify(recordC), 50)
        yield* fx.advance(1_100)
        // Redis reports an expiry when it removes the key (its sampler, or a read like this one)
        deepStrictEqual(yield* fx.store.readSocket("tok-3"), Option.none())
        deepStrictEqual(yield* joinWithin("five socket events", 5_000, received), [
          { token: "tok-1", event: "set" },
          { token: "tok-1", event: "del" },
          { token: "tok-2", event: "set" },
          { token: "tok-3", event: "set" },
          { token: "tok-3", event: "expired" }
        ])
      }))

    test("a dropped subscriber connection fails the socketEvents stream; a new subscription works", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.enableSocketEvents
        const scope = yield* Scope.make()
        const events = yield* fx.store.socketEvents.pipe(Scope.provide(scope))
        const reader = yield* Effect.forkChild(Stream.runDrain(events))
        const before = (yield* fx.store.status).epoch
        const cut = yield* fx.dropSubscriptions
        assert.isTrue(cut >= 1)
        const error = yield* within("the stream to fail", 5_000, Effect.flip(Fiber.join(reader)))
        assert.strictEqual(error._tag, "StoreUnavailable")
        yield* Scope.close(scope, Exit.void)
        // On a cluster each master's connection reports its loss in its own time, and a
        // subscription made before the last report would fail with it: wait until every cut
        // connection is back (each return is a new epoch).
        yield* untilReal(
          "every cut connection back",
          Effect.map(fx.store.status, (status) => status.ready && status.epoch >= before + cut),
          { within: 5_000 }
        )
        const again = yield* succeedsReal("subscribing again", fx.store.socketEvents, { within: 5_000 })
        const received = yield* collectFirst(again, 1)
        yield* fx.store.claimSocket("tok-1", recordA)
        deepStrictEqual(yield* joinWithin("an event", 5_000, received), [{ token: "tok-1", event: "set" }])
      }))
  })

  describe("validation", () => {
    for (const [label, token] of invalidTokens) {
      test(`a token with ${label} is refused by every operation, before any I/O`, (fx) =>
        Effect.gen(function* () {
          yield* noCommandsDuring(
            fx,
            Effect.forEach(tokenOperations(fx.store), ([name, op]) =>
              Effect.gen(function* () {
                const error = yield* failsWith(op(token), "InvalidToken").pipe(
                  Effect.catchDefect((defect) => Effect.die(`${name}: ${String(defect)}`))
                )
                assert.strictEqual(error.token, token, name)
              })
            )
          )
          assert.strictEqual(yield* fx.keyCount, 0)
          // control: the same kind of call with a valid token does reach the server
          if (Option.isSome(fx.commandsProcessed)) {
            const before = yield* fx.commandsProcessed.value
            yield* fx.store.holder("valid")
            assert.isTrue((yield* fx.commandsProcessed.value) > before, "the command counter does not count")
          }
        }))
    }

    test("a 128-character token is accepted", (fx) =>
      Effect.gen(function* () {
        const token = `${"a".repeat(60)}_.:-${"Z9".repeat(32)}`
        assert.strictEqual(token.length, 128)
        const signals = yield* fx.store.subscribe(token)
        const received = yield* collectFirst(signals, 1)
        yield* expectAcquired(fx.store.tryAcquire(token, "lock-a", ["a"]))
        yield* fx.store.commitAndRelease(token, "lock-a", [["a", "1"]])
        deepStrictEqual(yield* fx.store.readSlices(token, ["a"]), [Option.some("1")])
        deepStrictEqual(yield* fx.store.claimSocket(token, recordA), { _tag: "Claimed" })
        deepStrictEqual(yield* joinWithin("Released", 5_000, received), [releasedBy("lock-a")])
        const scanned = yield* Stream.runCollect(fx.store.scanSockets)
        deepStrictEqual([...scanned], [[token, recordA]])
      }))

    test("invalid instance ids are refused, before any I/O", (fx) =>
      Effect.gen(function* () {
        for (const [, instanceId] of invalidTokens) {
          yield* noCommandsDuring(
            fx,
            Effect.forEach(instanceOperations(fx.store), ([name, op]) =>
              failsWith(op(instanceId), "InvalidInstanceId").pipe(
                Effect.catchDefect((defect) => Effect.die(`${name}(${JSON.stringify(instanceId)}): ${String(defect)}`))
              )
            )
          )
        }
        assert.strictEqual(yield* fx.keyCount, 0)
      }))

    test("invalid slice names are refused, before any I/O", (fx) =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [string, AnyOp]> = [
          ["tryAcquire", (name) => fx.store.tryAcquire("tok", "lock-a", ["ok", name])],
          ["readSlices", (name) => fx.store.readSlices("tok", [name])],
          ["writeIfHolder", (name) => fx.store.writeIfHolder("tok", "lock-a", [[name, "1"]])],
          ["commitAndRelease", (name) => fx.store.commitAndRelease("tok", "lock-a", [[name, "1"]])],
          ["acquireQueued", (name) => fx.store.acquireQueued("tok", "lock-a", ["ok", name], { instanceId: "inst-a" })],
          [
            "commitAndReleaseQueued",
            (name) => fx.store.commitAndReleaseQueued("tok", "lock-a", [[name, "1"]], { instanceId: "inst-a" })
          ]
        ]
        for (const name of ["a*", "a b", "", "s[1]"]) {
          yield* noCommandsDuring(
            fx,
            Effect.forEach(cases, ([opName, op]) =>
              failsWith(op(name), "InvalidSliceName").pipe(
                Effect.catchDefect((defect) => Effect.die(`${opName}(${JSON.stringify(name)}): ${String(defect)}`))
              )
            )
          )
        }
        assert.strictEqual(yield* fx.keyCount, 0)
      }))
  })

  describe("mailbox", () => {
    test("mailboxAppendToOwner appends to the mailbox of the instance the token's record names", (fx) =>
      Effect.gen(function* () {
        const options = { maxLen: 100, ttlMs: 60_000 }
        const payloads = (instanceId: string) =>
          Effect.map(fx.store.mailboxRead(instanceId, MailboxStart, { count: 10 }), (entries) =>
            entries.map((entry) => entry.payload)
          )
        // no record: nothing appended anywhere
        deepStrictEqual(yield* fx.store.mailboxAppendToOwner("tok", "p0", options), Option.none())
        assert.strictEqual(yield* fx.keyCount, 0)
        yield* fx.store.claimSocket("tok", recordA)
        deepStrictEqual(yield* fx.store.mailboxAppendToOwner("tok", "p1", options), Option.some(recordA))
        deepStrictEqual(yield* payloads("inst-a"), ["p1"])
        // the socket moved: the next entry goes to its new owner
        yield* fx.store.deleteSocketIfOwner("tok", recordA)
        yield* fx.store.claimSocket("tok", recordB)
        deepStrictEqual(yield* fx.store.mailboxAppendToOwner("tok", "p2", options), Option.some(recordB))
        deepStrictEqual(yield* payloads("inst-a"), ["p1"])
        deepStrictEqual(yield* payloads("inst-b"), ["p2"])
        // a mailbox without an expiry gets one, as with mailboxAppend
        yield* fx.store.claimSocket("tok-c", recordC)
        yield* fx.store.mailboxAppendToOwner("tok-c", "p3", { maxLen: 100, ttlMs: 400 })
        assert.strictEqual(yield* fx.store.mailboxLength("inst-c"), 1)
        yield* fx.advance(600)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-c"), 0)
      }))

    test("mailboxAppendToOwner appends nothing for a record that does not decode or names an invalid instance", (fx) =>
      Effect.gen(function* () {
        const options = { maxLen: 100, ttlMs: 60_000 }
        const corrupt = ["not json {", '{"instanceId":1,"connectionId":"c"}', '{"instance":"x"}', "null", "[]"]
        for (const [i, raw] of corrupt.entries()) {
          yield* fx.putRaw(fx.keys.socket(`tok-${i}`), raw)
          const error = yield* failsWith(fx.store.mailboxAppendToOwner(`tok-${i}`, "p", options), "CorruptValue")
          assert.strictEqual(error.raw, raw)
        }
        const badInstance = encodeSocketRecord({ instanceId: "bad id*", connectionId: "c" })
        yield* fx.putRaw(fx.keys.socket("tok-bad"), badInstance)
        const error = yield* failsWith(fx.store.mailboxAppendToOwner("tok-bad", "p", options), "InvalidInstanceId")
        assert.strictEqual(error.instanceId, "bad id*")
        // only the records written above: no mailbox
        assert.strictEqual(yield* fx.keyCount, corrupt.length + 1)
      }))

    test("a reader that restarts from its last id gets every later entry once, in order", (fx) =>
      Effect.gen(function* () {
        const ids: Array<string> = []
        for (const payload of ["p1", "p2", "p3"])
          ids.push(yield* fx.store.mailboxAppend("inst-a", payload, { maxLen: 100, ttlMs: 60_000 }))
        for (let i = 1; i < ids.length; i++) {
          assert.isTrue(compareStreamIds(ids[i] ?? "", ids[i - 1] ?? "") > 0, `ids ${ids.join(", ")}`)
        }
        const firstBatch = yield* fx.store.mailboxRead("inst-a", MailboxStart, { count: 2 })
        deepStrictEqual(firstBatch, [
          { id: ids[0] ?? "missing", payload: "p1" },
          { id: ids[1] ?? "missing", payload: "p2" }
        ])
        // the reader "restarts" from the last id it delivered
        const lastId = firstBatch[1]?.id ?? ""
        for (const payload of ["p4", "p5"])
          ids.push(yield* fx.store.mailboxAppend("inst-a", payload, { maxLen: 100, ttlMs: 60_000 }))
        const secondBatch = yield* fx.store.mailboxRead("inst-a", lastId, { count: 10 })
        deepStrictEqual(
          secondBatch.map((e) => e.payload),
          ["p3", "p4", "p5"]
        )
        deepStrictEqual(
          secondBatch.map((e) => e.id),
          ids.slice(2)
        )
        deepStrictEqual(yield* fx.store.mailboxRead("inst-a", ids[4] ?? "", { count: 10 }), [])
        // mailboxes are per instance
        deepStrictEqual(yield* fx.store.mailboxRead("inst-b", MailboxStart, { count: 10 }), [])
        const everything = yield* fx.store.mailboxRead("inst-a", MailboxStart, { count: 100 })
        deepStrictEqual(
          everything.map((e) => e.payload),
          ["p1", "p2", "p3", "p4", "p5"]
        )
      }))

    test("trim keeps the newest entries; length counts them", (fx) =>
      Effect.gen(function* () {
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 0)
        for (const payload of ["p1", "p2", "p3", "p4", "p5"])
          yield* fx.store.mailboxAppend("inst-a", payload, { maxLen: 100, ttlMs: 60_000 })
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 5)
        yield* fx.store.mailboxTrim("inst-a", 10)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 5)
        yield* fx.store.mailboxTrim("inst-a", 2)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 2)
        const left = yield* fx.store.mailboxRead("inst-a", MailboxStart, { count: 10 })
        deepStrictEqual(
          left.map((e) => e.payload),
          ["p4", "p5"]
        )
        // ids keep increasing after a trim
        const id = yield* fx.store.mailboxAppend("inst-a", "p6", { maxLen: 100, ttlMs: 60_000 })
        assert.isTrue(compareStreamIds(id, left[1]?.id ?? "") > 0)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 3)
      }))

    test("expire removes the mailbox after the TTL", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.mailboxAppend("inst-a", "p1", { maxLen: 100, ttlMs: 60_000 })
        yield* fx.store.mailboxAppend("inst-a", "p2", { maxLen: 100, ttlMs: 60_000 })
        // 300 ms either way
        yield* fx.store.mailboxExpire("inst-a", 600)
        yield* fx.advance(300)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 2)
        yield* fx.advance(600)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 0)
        deepStrictEqual(yield* fx.store.mailboxRead("inst-a", MailboxStart, { count: 10 }), [])
      }))

    test("an append gives a mailbox without expiry its TTL and keeps a reader's", (fx) =>
      Effect.gen(function* () {
        // No reader: the mailbox of an instance that is gone expires by itself.
        // 200 ms either way: the append 200 ms before the expiry, the look 200 ms after it and
        // 200 ms before the expiry the append would have set
        yield* fx.store.mailboxAppend("inst-a", "p1", { maxLen: 100, ttlMs: 600 })
        yield* fx.advance(400)
        // A later append does not push the expiry.
        yield* fx.store.mailboxAppend("inst-a", "p2", { maxLen: 100, ttlMs: 600 })
        yield* fx.advance(400)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 0)
        // A reader's longer expiry is kept by appends.
        yield* fx.store.mailboxAppend("inst-b", "p1", { maxLen: 100, ttlMs: 200 })
        yield* fx.store.mailboxExpire("inst-b", 1_000)
        yield* fx.store.mailboxAppend("inst-b", "p2", { maxLen: 100, ttlMs: 200 })
        yield* fx.advance(400)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-b"), 2)
      }))

    test("a refreshed expiry keeps the mailbox", (fx) =>
      Effect.gen(function* () {
        yield* fx.store.mailboxAppend("inst-a", "p1", { maxLen: 100, ttlMs: 60_000 })
        yield* fx.store.mailboxExpire("inst-a", 1_000)
        yield* fx.advance(600)
        yield* fx.store.mailboxExpire("inst-a", 1_000)
        // 1,200 ms after the first expire (200 past it), 600 after the refresh (400 left)
        yield* fx.advance(600)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 1)
        // 1,200 ms after the refresh: 200 past it
        yield* fx.advance(600)
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 0)
      }))

    test("a blocking read returns when an entry is appended", (fx) =>
      Effect.gen(function* () {
        const first = yield* fx.store.mailboxAppend("inst-a", "p0", { maxLen: 100, ttlMs: 60_000 })
        const reader = yield* Effect.forkChild(fx.store.mailboxRead("inst-a", first, { count: 10, blockMs: 10_000 }))
        yield* fx.awaitBlockedRead
        yield* fx.advance(50)
        assert.isTrue(
          Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(reader.pollUnsafe()))),
          "the read did not block"
        )
        const started = yield* liveNow
        yield* fx.store.mailboxAppend("inst-a", "p1", { maxLen: 100, ttlMs: 60_000 })
        const entries = yield* joinWithin("the blocked read", 2_000, reader)
        deepStrictEqual(
          entries.map((e) => e.payload),
          ["p1"]
        )
        assert.isTrue((yield* liveNow) - started < 2_000)
      }))

    test("a blocking read with no entry returns nothing after blockMs", (fx) =>
      Effect.gen(function* () {
        const reader = yield* Effect.forkChild(
          fx.store.mailboxRead("inst-a", MailboxStart, { count: 10, blockMs: 300 })
        )
        yield* fx.awaitBlockedRead
        yield* fx.advance(100)
        assert.isTrue(
          Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(reader.pollUnsafe()))),
          "the read did not block"
        )
        yield* fx.advance(300)
        deepStrictEqual(yield* joinWithin("the timed-out read", 2_000, reader), [])
      }))
  })

  describe("inspection", () => {
    test("tokenKeys describes every key of one token, and refreshes none", (fx) =>
      Effect.gen(function* () {
        deepStrictEqual(yield* fx.store.tokenKeys("tok"), [])
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.store.writeIfHolder("tok", "lock-a", [["counter", "12345"]])
        yield* fx.store.acquireQueued("tok", "inst-b:1", [], { instanceId: "inst-b" })
        yield* fx.store.claimSocket("tok", recordA)
        // a token whose name extends this one's is another token
        yield* fx.store.claimSocket("tok2", recordA)
        yield* fx.advance(100)
        const keys = yield* fx.store.tokenKeys("tok")
        deepStrictEqual(
          keys.map((key) => [key.name, key.kind, key.size]),
          [
            ["fence", "string", 1],
            ["lock", "string", "lock-a".length],
            ["queue", "set", 1],
            ["queue:d", "set", 1],
            ["queue:i", "set", 1],
            ["s:counter", "string", 5],
            ["socket", "string", encodeSocketRecord(recordA).length]
          ]
        )
        const ttl = (name: string) => Option.getOrUndefined(keys.find((key) => key.name === name)!.ttlMs)
        assert.isTrue(ttl("fence")! > 0)
        assert.isTrue(ttl("lock")! <= fx.lockExpirationMs - 100 + 2 && ttl("lock")! > 0)
        const sliceTtl = ttl("s:counter")!
        // reading the keys again later shows time passing: nothing was refreshed
        yield* fx.advance(100)
        const later = yield* fx.store.tokenKeys("tok")
        assert.isTrue(Option.getOrThrow(later.find((key) => key.name === "s:counter")!.ttlMs) <= sliceTtl - 100 + 2)
      }))

    test("the mailbox cursor is recorded, read back, and expires", (fx) =>
      Effect.gen(function* () {
        deepStrictEqual(yield* fx.store.mailboxCursor("inst-a"), Option.none())
        yield* fx.store.mailboxSetCursor("inst-a", "1700000000000-3", 300)
        deepStrictEqual(yield* fx.store.mailboxCursor("inst-a"), Option.some("1700000000000-3"))
        deepStrictEqual(yield* fx.store.mailboxCursor("inst-b"), Option.none())
        // a cursor is not a mailbox entry
        assert.strictEqual(yield* fx.store.mailboxLength("inst-a"), 0)
        yield* fx.advance(350)
        deepStrictEqual(yield* fx.store.mailboxCursor("inst-a"), Option.none())
      }))
  })

  describe("corrupt values", () => {
    test("a socket record that is not JSON is a CorruptValue from readSocket and claimSocket", (fx) =>
      Effect.gen(function* () {
        const key = fx.keys.socket("tok")
        yield* fx.putRaw(key, "not json {")
        const fromRead = yield* failsWith(fx.store.readSocket("tok"), "CorruptValue")
        assert.strictEqual(fromRead.key, key)
        assert.strictEqual(fromRead.raw, "not json {")
        const fromClaim = yield* failsWith(fx.store.claimSocket("tok", recordA), "CorruptValue")
        assert.strictEqual(fromClaim.key, key)
        assert.strictEqual(fromClaim.raw, "not json {")
        // the claim did not overwrite it
        yield* failsWith(fx.store.readSocket("tok"), "CorruptValue")
      }))

    test("a socket record of the wrong shape is a CorruptValue", (fx) =>
      Effect.gen(function* () {
        const shapes = ['{"instanceId":1,"connectionId":"c"}', '{"instance":"x"}', "null", "[]", '"text"']
        for (const [i, raw] of shapes.entries()) {
          const token = `tok-${i}`
          yield* fx.putRaw(fx.keys.socket(token), raw)
          const fromRead = yield* failsWith(fx.store.readSocket(token), "CorruptValue")
          assert.strictEqual(fromRead.raw, raw)
          const fromClaim = yield* failsWith(fx.store.claimSocket(token, recordA), "CorruptValue")
          assert.strictEqual(fromClaim.raw, raw)
        }
      }))

    test("a corrupt slice value comes back raw, unchanged", (fx) =>
      Effect.gen(function* () {
        const raw = '{"n": oops ☃ \u0007'
        yield* fx.putRaw(fx.keys.slice("tok", "a"), raw)
        deepStrictEqual(yield* fx.store.readSlices("tok", ["a", "b"]), [Option.some(raw), Option.none()])
        const grant = yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", ["a"]))
        deepStrictEqual(grant.values, [Option.some(raw)])
      }))

    test("a fencing counter that is not an integer is refused, not read as a number", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        yield* fx.putRaw(fx.keys.fence("tok"), "seven")
        const error = yield* failsWith(fx.store.holder("tok"), "StoreRefused")
        assert.include(error.reply, "not an integer")
      }))
  })

  describe("faults", () => {
    test("during an outage operations fail with StoreUnavailable in time; afterwards they succeed again", (fx) =>
      Effect.gen(function* () {
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
        const signals = yield* fx.store.subscribe("tok")
        const subscription = yield* Effect.forkChild(Stream.runDrain(signals))
        const before = yield* fx.store.status
        assert.isTrue(before.ready)

        yield* fx.outage.begin
        // if an assertion fails mid-outage, bring the store back before the scope closes
        yield* Effect.addFinalizer(() => fx.outage.end)
        const bound = fx.commandTimeoutMs + 750
        const timed = <A, E extends { readonly _tag: string }>(name: string, op: Effect.Effect<A, E>) =>
          Effect.gen(function* () {
            const started = yield* liveNow
            const error = yield* failsWith(op, "StoreUnavailable")
            const elapsed = (yield* liveNow) - started
            assert.isTrue(elapsed <= bound, `${name} failed after ${elapsed} ms (bound ${bound} ms)`)
            return error
          })
        yield* timed("tryAcquire", fx.store.tryAcquire("tok", "lock-b", []))
        yield* timed("readSlices", fx.store.readSlices("tok", ["a"]))
        yield* timed("publish", fx.store.publish("tok", released))
        yield* timed("claimSocket", fx.store.claimSocket("tok", recordA))
        yield* timed("mailboxAppend", fx.store.mailboxAppend("inst-a", "p", { maxLen: 100, ttlMs: 60_000 }))
        // an open subscription fails too
        const subscriptionError = yield* within(
          "the open subscription to fail",
          5_000,
          Effect.flip(Fiber.join(subscription))
        )
        assert.strictEqual(subscriptionError._tag, "StoreUnavailable")
        yield* untilReal(
          "status not ready",
          Effect.map(fx.store.status, (s) => !s.ready),
          { within: 3_000 }
        )
        // Cleanup runs uninterruptibly (a lease's flush, a release): it must still time out.
        yield* timed(
          "an uninterruptible writeIfHolder",
          Effect.uninterruptible(fx.store.writeIfHolder("tok", "lock-a", []))
        )
        yield* timed("an uninterruptible release", Effect.uninterruptible(fx.store.release("tok", "lock-a")))

        yield* fx.outage.end
        yield* succeedsReal("operations after the outage", fx.store.readSlices("tok", ["a"]), { within: 10_000 })
        yield* untilReal(
          "status ready with a new epoch",
          Effect.map(fx.store.status, (s) => s.ready && s.epoch > before.epoch),
          { within: 5_000 }
        )
        // a full cycle on a fresh token, in the same process and store
        const grant = yield* expectAcquired(fx.store.tryAcquire("fresh", "lock-c", ["a"]))
        deepStrictEqual(grant.values, [Option.none()])
        yield* fx.store.commitAndRelease("fresh", "lock-c", [["a", "1"]])
        deepStrictEqual(yield* fx.store.readSlices("fresh", ["a"]), [Option.some("1")])
        deepStrictEqual(yield* fx.store.claimSocket("fresh", recordA), { _tag: "Claimed" })
      }))

    if (backend.canHang) {
      test("a hung store: operations fail with StoreUnavailable within the command timeout, then recover", (fx) =>
        Effect.gen(function* () {
          const hang = Option.getOrThrow(fx.hang)
          yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))
          yield* fx.store.writeIfHolder("tok", "lock-a", [["a", "before"]])
          deepStrictEqual(yield* fx.store.claimSocket("tok", recordA), { _tag: "Claimed" })

          yield* hang.begin
          yield* Effect.addFinalizer(() => hang.end)
          const bound = fx.commandTimeoutMs + 750
          for (const [name, op] of [
            ["readSlices", fx.store.readSlices("tok", ["a"])],
            ["holder", fx.store.holder("tok")],
            ["readSocket", fx.store.readSocket("tok")],
            ["an uninterruptible writeIfHolder", Effect.uninterruptible(fx.store.writeIfHolder("tok", "lock-a", []))]
          ] as const) {
            const started = yield* liveNow
            yield* failsWith(op as Effect.Effect<unknown, InvalidInput | CorruptValue | StoreError>, "StoreUnavailable")
            const elapsed = (yield* liveNow) - started
            assert.isTrue(elapsed <= bound, `${name} failed after ${elapsed} ms (bound ${bound} ms)`)
            assert.isTrue(
              elapsed >= fx.commandTimeoutMs - 50,
              `${name} failed after ${elapsed} ms, before the command timeout: a hung server is not a refused connection`
            )
          }
          yield* hang.end

          // every reply goes to its own command after the late replies of the timed-out ones
          const values = yield* succeedsReal("operations after the hang", fx.store.readSlices("tok", ["a", "b"]), {
            within: 5_000
          })
          deepStrictEqual(values, [Option.some("before"), Option.none()])
          // (the lock itself has expired meanwhile: the hang outlasted lockExpiration)
          deepStrictEqual(yield* fx.store.readSocket("tok"), Option.some(recordA))
          deepStrictEqual(yield* fx.store.claimSocket("tok", recordB), { _tag: "Taken", record: recordA })
          deepStrictEqual(yield* fx.store.claimSocket("other", recordB), { _tag: "Claimed" })
          assert.strictEqual(
            (yield* fx.store.acquireQueued("tok", "inst-a:1", [], { instanceId: "inst-a" }))._tag,
            "Acquired"
          )
          assert.strictEqual(
            (yield* fx.store.acquireQueued("tok", "inst-b:1", [], { instanceId: "inst-b" }))._tag,
            "Queued"
          )
          assert.strictEqual(yield* fx.store.queueLength("tok", "inst-a"), 1)
          deepStrictEqual(yield* fx.store.readSlices("other", ["a"]), [Option.none()])
        }))
    }

    test("a subscription fails when the subscriber connection is cut; a new subscribe works", (fx) =>
      Effect.gen(function* () {
        const signals = yield* fx.store.subscribe("tok")
        const subscription = yield* Effect.forkChild(Stream.runCollect(signals))
        const cut = yield* fx.dropSubscriptions
        assert.isTrue(cut >= 1, `connections cut: ${cut}`)
        const error = yield* within("the subscription to fail", 5_000, Effect.flip(Fiber.join(subscription)))
        assert.strictEqual(error._tag, "StoreUnavailable")
        // the command side is not affected
        yield* expectAcquired(fx.store.tryAcquire("tok", "lock-a", []))

        const received = yield* succeedsReal(
          "a new subscription that receives",
          Effect.scoped(
            Effect.gen(function* () {
              const again = yield* fx.store.subscribe("tok")
              const got = yield* collectFirst(again, 1)
              yield* fx.store.publish("tok", contended("inst-a"))
              return yield* joinWithin("the signal on the new subscription", 1_000, got)
            })
          ),
          { within: 10_000 }
        )
        deepStrictEqual(received, [contended("inst-a")])
        assert.isTrue((yield* fx.store.release("tok", "lock-a")).released)
      }))
  })
}
