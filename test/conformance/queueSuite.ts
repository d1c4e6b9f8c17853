/**
 * The queue hand-off cases of the store conformance suite (docs/protocol.md#the-queue-hand-off): a
 * token's queue of waiting workers, the grant of a released lock to the queue's head alone, the
 * claim, the per-entry deadlines, and the notices. `storeSuite` registers them in its "queue
 * hand-off" block, so they run on every backend the suite runs on.
 *
 * Workers are named `A`, `B`, `C`…; their lock ids are `<worker>:<n>`, as the protocol makes
 * them, so the store can tell a holder's worker from its lock id. A worker queues under the
 * lock id of its attempt, and a grant installs that lock id: the lock is the grantee's from
 * the grant on (a worker queued without one, by a release with `requeue` alone, gets a
 * pending grant, `?<worker>`, that it claims).
 */
import { assert } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import type { Notice, TokenNotice } from "../../src/Store.js"
import type { AcknowledgedError, InvalidInput, LockLost } from "../../src/StoreError.js"
import { untilReal } from "../support/poll.js"
import type { Backend, Fixture } from "./backend.js"
import { failsWith } from "./helpers.js"

/** The notice of a grant that installed `lockId` under `fence`, `queued` others behind it, carrying `values`. */
const handedOver = (
  fence: number,
  lockId: string,
  queued: number,
  values: ReadonlyArray<readonly [string, Option.Option<string>]> = []
): Notice => ({ _tag: "Granted", fence, handedOver: { lockId, queued, values: new Map(values) } })
const contended: Notice = { _tag: "Contended" }

/** A lock id as the protocol makes it: `<worker>:<n>`. */
const lockOf = (worker: string, n = 1) => `${worker}:${n}`

interface Attempt {
  readonly slices?: ReadonlyArray<string>
  /** The fence of the `Granted` notice claimed for. */
  readonly claim?: number
  /** The lock id's counter (1 unless said). */
  readonly n?: number
}

const attempt = (fx: Fixture, token: string, worker: string, options: Attempt = {}) =>
  fx.store.acquireQueued(
    token,
    lockOf(worker, options.n),
    options.slices ?? [],
    options.claim === undefined ? { instanceId: worker } : { instanceId: worker, claim: options.claim }
  )

/** `worker`'s attempt takes the lock, or the test dies naming what came instead. */
const takes = (fx: Fixture, token: string, worker: string, options: Attempt = {}) =>
  Effect.flatMap(attempt(fx, token, worker, options), (result) =>
    result._tag === "Acquired"
      ? Effect.succeed(result)
      : Effect.die(`${worker} on ${token}: expected Acquired, got Queued (remainingMs ${result.remainingMs})`)
  )

/** `worker`'s attempt is queued, or the test dies naming what came instead. */
const waits = (fx: Fixture, token: string, worker: string, options: Attempt = {}) =>
  Effect.flatMap(attempt(fx, token, worker, options), (result) =>
    result._tag === "Queued"
      ? Effect.succeed(result)
      : Effect.die(`${worker} on ${token}: expected Queued, got Acquired (fence ${result.fence})`)
  )

const release = (fx: Fixture, token: string, worker: string, options: { readonly requeue?: boolean } = {}) =>
  fx.store.releaseQueued(token, lockOf(worker), { instanceId: worker, requeue: options.requeue === true })

/** The raw lock value: a lock id (a grant's included), `?<worker>` for a pending grant, `undefined` when free. */
const lockValue = (fx: Fixture, token: string) =>
  Effect.map(fx.store.holder(token), (holder) => Option.getOrUndefined(Option.map(holder, (h) => h.lockId)))

/** What a worker was told about a token, recorded from a confirmed subscription on. */
interface Recorder {
  readonly token: string
  readonly worker: string
  /** Every notice, the markers of `quietNotices` included. */
  readonly all: Ref.Ref<ReadonlyArray<Notice>>
}

const markerPrefix = "leasehold-test-marker-"
let markers = 0

/** A notice of `quietNotices`: a grant that installed a lock id no worker makes. */
const markerOf = (notice: Notice): string | undefined =>
  notice._tag === "Granted" && notice.handedOver?.lockId.startsWith(markerPrefix) === true
    ? notice.handedOver.lockId
    : undefined

/** Record `worker`'s notices about `token` from now on (the subscription is confirmed on return). */
const recordNotices = (fx: Fixture, token: string, worker: string) =>
  Effect.gen(function* () {
    const notices = yield* fx.store.notices(token, worker)
    const all = yield* Ref.make<ReadonlyArray<Notice>>([])
    yield* Effect.forkChild(Stream.runForEach(notices, (notice) => Ref.update(all, (seen) => [...seen, notice])))
    return { token, worker, all } satisfies Recorder
  })

/** The notices recorded so far, the markers left out. */
const recorded = (recorder: Recorder) =>
  Effect.map(Ref.get(recorder.all), (all) => all.filter((notice) => markerOf(notice) === undefined))

/**
 * Every notice published to `channel` before this call, once arrived: on a real server a
 * marker, a notice about `token` (so that a worker's channel shared by tokens hands it to
 * this token's stream), is published on the channel after them and read back from `read`
 * (what the stream recorded, in order); `at` finds it there, and what came before it is
 * returned. On memory, `settle`.
 */
const quietOn = <A>(
  fx: Fixture,
  channel: string,
  token: string,
  read: Effect.Effect<ReadonlyArray<A>>,
  at: (a: A) => string | undefined
): Effect.Effect<ReadonlyArray<A>> =>
  Effect.gen(function* () {
    if (fx.quiet._tag === "Settle") {
      yield* fx.quiet.settle
      return (yield* read).filter((a) => at(a) === undefined)
    }
    const marker = `${markerPrefix}${process.pid}-${++markers}`
    yield* fx.quiet.publish(channel, `granted:${token} 1 ${JSON.stringify([0, marker])}`)
    const index = (all: ReadonlyArray<A>) => all.findIndex((a) => at(a) === marker)
    yield* untilReal(
      "the marker notice",
      Effect.map(read, (all) => index(all) >= 0),
      { within: 5_000 }
    )
    const all = yield* read
    return all.slice(0, index(all)).filter((a) => at(a) === undefined)
  })

/** Wait for at least `n` recorded notices, then for every notice sent so far, and return them all. */
const noticesSeen = (fx: Fixture, recorder: Recorder, n: number) =>
  Effect.gen(function* () {
    if (n > 0) {
      yield* untilReal(
        `${n} notice(s)`,
        Effect.map(recorded(recorder), (all) => all.length >= n),
        { within: 5_000 }
      )
    }
    return yield* quietOn(
      fx,
      fx.store.noticeChannel(recorder.token, recorder.worker),
      recorder.token,
      Ref.get(recorder.all),
      markerOf
    )
  })

/** The TTLs of `token`'s keys, from one `tokenKeys`, by name (-1: none or absent). */
const ttlsOf = (fx: Fixture, token: string) =>
  Effect.map(
    fx.store.tokenKeys(token),
    (infos) => (name: string) =>
      Option.getOrElse(
        Option.flatMap(Option.fromNullishOr(infos.find((info) => info.name === name)), (info) => info.ttlMs),
        () => -1
      )
  )

/** The TTL of one key of `token` as `tokenKeys` reports it (-1: none or absent). */
const ttlOf = (fx: Fixture, token: string, name: string) => Effect.map(ttlsOf(fx, token), (ttl) => ttl(name))

/**
 * Real-time bounds leave a quarter of the lock expiration either way (300 ms on the real
 * servers): `lateStep`, advanced twice, outlasts an entry refreshed before the first
 * (by half a lock expiration) while one refreshed in between still has a quarter left.
 */
const lateStep = (fx: Fixture) => Math.floor((fx.lockExpirationMs * 3) / 4)

/** Past an unclaimed grant's expiry by a fifth of the lock expiration, well within a queued entry's. */
const pastHandoff = (fx: Fixture) => fx.handoffTimeoutMs + Math.floor(fx.lockExpirationMs / 5)

/** Register the queue hand-off cases for `backend`. */
export const queueHandoff = (backend: Backend): void => {
  const test = backend.test

  test("fast path: a free lock with nobody queued is taken at once, and a release grants nothing", (fx) =>
    Effect.gen(function* () {
      const grant = yield* takes(fx, "tok", "A", { slices: ["a"] })
      assert.isTrue(Number.isInteger(grant.fence) && grant.fence > 0, `fence ${grant.fence}`)
      deepStrictEqual(grant.values, [Option.none()])
      assert.strictEqual(grant.queued, 0)
      assert.strictEqual(yield* lockValue(fx, "tok"), "A:1")
      deepStrictEqual(yield* fx.store.queue("tok"), [])
      deepStrictEqual(yield* release(fx, "tok", "A"), { released: true, queued: 0 })
      assert.strictEqual(yield* lockValue(fx, "tok"), undefined)
      // no longer the holder's to release
      deepStrictEqual(yield* release(fx, "tok", "A"), { released: false, queued: 0 })
      const next = yield* takes(fx, "tok", "B")
      assert.isTrue(next.fence > grant.fence, `fences ${grant.fence} then ${next.fence}`)
    }))

  test("held: Queued with the lock's time left, the worker queued once, and the holder told each time", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      const holderSees = yield* recordNotices(fx, "tok", "A")
      const waiterSees = yield* recordNotices(fx, "tok", "B")
      const first = yield* waits(fx, "tok", "B")
      const lockMs = fx.lockExpirationMs
      assert.isTrue(first.remainingMs > 0 && first.remainingMs <= lockMs, `remainingMs ${first.remainingMs}`)
      if (fx.exactTime) assert.strictEqual(first.remainingMs, lockMs)
      deepStrictEqual(yield* fx.store.queue("tok"), ["B"])
      // a second attempt refreshes the entry in its place, and tells the holder again
      yield* waits(fx, "tok", "B")
      deepStrictEqual(yield* fx.store.queue("tok"), ["B"])
      assert.strictEqual(yield* fx.store.queueLength("tok", "A"), 1)
      assert.strictEqual(yield* fx.store.queueLength("tok", "B"), 0)
      // contention on another token that A holds is no notice about this one
      yield* takes(fx, "other", "A")
      yield* waits(fx, "other", "C")
      deepStrictEqual(yield* noticesSeen(fx, holderSees, 2), [contended, contended])
      deepStrictEqual(yield* noticesSeen(fx, waiterSees, 0), [])
    }))

  test("writeIfHolder extends the lock when asked, and counts the workers queued other than the writer when asked", (fx) =>
    Effect.gen(function* () {
      const lockMs = fx.lockExpirationMs
      const step = Math.floor((lockMs * 2) / 3)
      yield* takes(fx, "tok", "A")
      yield* fx.advance(step)
      const extending = { extend: true, instanceId: "A" }
      assert.strictEqual(yield* fx.store.writeIfHolder("tok", lockOf("A"), [["a", "1"]], extending), 0)
      yield* fx.advance(step)
      // past the grant's expiry, within the write's: still A's, a lock expiration from the write
      const held = Option.getOrThrow(yield* fx.store.holder("tok"))
      assert.strictEqual(held.lockId, lockOf("A"))
      if (fx.exactTime) assert.strictEqual(held.remainingMs, lockMs - step)
      else assert.isTrue(held.remainingMs > 0 && held.remainingMs <= lockMs - step, `remainingMs ${held.remainingMs}`)
      // not asked: nothing counted, and the lock left to expire when it would have
      assert.strictEqual(yield* fx.store.writeIfHolder("tok", lockOf("A"), [["a", "2"]]), undefined)
      yield* fx.advance(lockMs - step + 50)
      assert.isTrue(Option.isNone(yield* fx.store.holder("tok")))
      deepStrictEqual(yield* fx.store.readSlices("tok", ["a"]), [Option.some("2")])

      // two workers queued: counted, but for the writer's own entry
      yield* takes(fx, "two", "A")
      yield* waits(fx, "two", "B")
      yield* waits(fx, "two", "C")
      const write = (value: string, instanceId: string) =>
        fx.store.writeIfHolder("two", lockOf("A"), [["a", value]], { instanceId })
      assert.strictEqual(yield* write("1", "A"), 2)
      assert.strictEqual(yield* write("2", "B"), 1)
      assert.strictEqual(yield* fx.store.queueLength("two", "A"), 2)
      // a bad instance id is refused before anything is written
      yield* failsWith(write("3", "a b"), "InvalidInstanceId")
      yield* failsWith(write("3", ""), "InvalidInstanceId")
      deepStrictEqual(yield* fx.store.readSlices("two", ["a"]), [Option.some("2")])
    }))

  test("no barging: a release grants the lock to the queue's head, and only the head can take it", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      const headSees = yield* recordNotices(fx, "tok", "B")
      deepStrictEqual(yield* release(fx, "tok", "A"), { released: true, queued: 1 })
      // B's own lock id, under the next fence
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      deepStrictEqual(yield* fx.store.queue("tok"), [])
      deepStrictEqual(yield* noticesSeen(fx, headSees, 1), [handedOver(a.fence + 1, "B:1", 0)])
      // a newcomer finds the lock granted to B, for at most the hand-off timeout
      const newcomer = yield* waits(fx, "tok", "C")
      assert.isTrue(
        newcomer.remainingMs > 0 && newcomer.remainingMs <= fx.handoffTimeoutMs,
        `remainingMs ${newcomer.remainingMs}`
      )
      // and so does the worker that just released it
      yield* waits(fx, "tok", "A", { n: 2 })
      deepStrictEqual(yield* fx.store.queue("tok"), ["C", "A"])
      // an attempt of B (its notice lost) takes its grant over, under the grant's fence
      const b = yield* takes(fx, "tok", "B")
      assert.strictEqual(b.fence, a.fence + 1)
      assert.strictEqual(b.queued, 2)
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      deepStrictEqual(yield* fx.store.queue("tok"), ["C", "A"])
    }))

  test("order: successive releases grant the queued workers in arrival order", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      for (const worker of ["B", "C", "D"]) yield* waits(fx, "tok", worker)
      deepStrictEqual(yield* fx.store.queue("tok"), ["B", "C", "D"])
      let holder = "A"
      for (const [next, behind] of [
        ["B", 2],
        ["C", 1],
        ["D", 0]
      ] as const) {
        deepStrictEqual(yield* release(fx, "tok", holder), { released: true, queued: behind + 1 })
        assert.strictEqual(yield* lockValue(fx, "tok"), lockOf(next))
        assert.strictEqual((yield* takes(fx, "tok", next)).queued, behind)
        holder = next
      }
      deepStrictEqual(yield* release(fx, "tok", "D"), { released: true, queued: 0 })
      assert.strictEqual(yield* lockValue(fx, "tok"), undefined)
    }))

  test("one wake-up: a release with three workers queued notifies the queue's head alone", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A")
      const holderSees = yield* recordNotices(fx, "tok", "A")
      const seen = new Map<string, Recorder>()
      for (const worker of ["B", "C", "D"]) seen.set(worker, yield* recordNotices(fx, "tok", worker))
      for (const worker of ["B", "C", "D"]) yield* waits(fx, "tok", worker)
      deepStrictEqual(yield* noticesSeen(fx, holderSees, 3), [contended, contended, contended])
      yield* release(fx, "tok", "A")
      deepStrictEqual(yield* noticesSeen(fx, seen.get("B")!, 1), [handedOver(a.fence + 1, "B:1", 2)])
      deepStrictEqual(yield* noticesSeen(fx, seen.get("C")!, 0), [])
      deepStrictEqual(yield* noticesSeen(fx, seen.get("D")!, 0), [])
      deepStrictEqual(yield* noticesSeen(fx, holderSees, 0), [contended, contended, contended])
    }))

  test("channelNotices: every notice of the channel with its token; tokens of one channel share it", (fx) =>
    Effect.gen(function* () {
      const seen = yield* Ref.make<ReadonlyArray<TokenNotice>>([])
      const notices = yield* fx.store.channelNotices("tok", "B")
      yield* Effect.forkChild(Stream.runForEach(notices, (n) => Ref.update(seen, (all) => [...all, n])))
      const named = (all: ReadonlyArray<TokenNotice>) => all.map((n) => `${n.notice._tag}:${n.token}`)
      const shared = fx.store.noticeChannel("tok", "B") === fx.store.noticeChannel("tok2", "B")
      assert.notStrictEqual(fx.store.noticeChannel("tok", "B"), fx.store.noticeChannel("tok", "C"))
      // B queues behind A on both tokens; A's releases grant each to B
      for (const token of ["tok", "tok2"]) {
        yield* takes(fx, token, "A")
        yield* waits(fx, token, "B")
        yield* release(fx, token, "A")
      }
      // one channel per worker: both tokens' notices, each naming its token; one channel per
      // token (a Cluster): the token's own
      const expected = shared ? ["Granted:tok", "Granted:tok2"] : ["Granted:tok"]
      yield* untilReal(
        "the notices",
        Effect.map(Ref.get(seen), (all) => all.length >= expected.length),
        { within: 5_000 }
      )
      const channel = fx.store.noticeChannel("tok", "B")
      const all = yield* quietOn(fx, channel, "tok", Ref.get(seen), (n) => markerOf(n.notice))
      deepStrictEqual(named(all), expected)
    }))

  test("requeue: a release or a commit with requeue puts the worker back at the tail", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      yield* waits(fx, "tok", "C")
      // counted before the requeue
      deepStrictEqual(yield* release(fx, "tok", "A", { requeue: true }), { released: true, queued: 2 })
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      deepStrictEqual(yield* fx.store.queue("tok"), ["C", "A"])
      yield* takes(fx, "tok", "B")
      // B queues again under a lock id of its own: its next grant installs it
      assert.strictEqual(
        yield* fx.store.commitAndReleaseQueued("tok", "B:1", [["a", "1"]], {
          instanceId: "B",
          requeue: true,
          queueAs: "B:2"
        }),
        2
      )
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
      deepStrictEqual(yield* fx.store.queue("tok"), ["A", "B"])
      yield* release(fx, "tok", "C")
      // A queued with no lock id of its own: its grant is a pending one, claimed by an attempt
      assert.strictEqual(yield* lockValue(fx, "tok"), "?A")
      yield* takes(fx, "tok", "A", { n: 3 })
      yield* fx.store.releaseQueued("tok", "A:3", { instanceId: "A" })
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:2")
    }))

  test("a release with requeue by a worker that does not hold the lock queues it all the same", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      const holderSees = yield* recordNotices(fx, "tok", "A")
      deepStrictEqual(yield* release(fx, "tok", "C", { requeue: true }), { released: false, queued: 1 })
      assert.strictEqual(yield* lockValue(fx, "tok"), "A:1")
      deepStrictEqual(yield* fx.store.queue("tok"), ["B", "C"])
      // C's place has a deadline of its own: B's, set earlier, runs out first
      const step = lateStep(fx)
      yield* fx.advance(step)
      deepStrictEqual(yield* release(fx, "tok", "C", { requeue: true }), { released: false, queued: 1 })
      assert.isTrue(yield* fx.store.extend("tok", "A:1"))
      yield* fx.advance(step)
      deepStrictEqual(yield* fx.store.queue("tok"), ["C"])
      // a release tells the holder nothing
      deepStrictEqual(yield* noticesSeen(fx, holderSees, 0), [])
    }))

  test("leaving: a waiting worker just leaves; a grantee's pending grant passes to the next head", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A")
      for (const worker of ["B", "C", "D"]) yield* waits(fx, "tok", worker)
      const nextSees = yield* recordNotices(fx, "tok", "C")
      yield* release(fx, "tok", "A")
      yield* fx.store.leaveQueue("tok", "D")
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      deepStrictEqual(yield* fx.store.queue("tok"), ["C"])
      yield* fx.store.leaveQueue("tok", "B")
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
      deepStrictEqual(yield* fx.store.queue("tok"), [])
      // each grant takes a fence: B's, unused, then C's
      deepStrictEqual(yield* noticesSeen(fx, nextSees, 1), [handedOver(a.fence + 2, "C:1", 0)])
      // the grant is C's now: B has to queue
      yield* waits(fx, "tok", "B")
      yield* takes(fx, "tok", "C")
    }))

  test("a grant not claimed within handoffTimeout: the next attempt, by anyone, grants the lock to the next head", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      yield* waits(fx, "tok", "C")
      yield* release(fx, "tok", "A")
      const nextSees = yield* recordNotices(fx, "tok", "C")
      yield* fx.advance(pastHandoff(fx))
      assert.strictEqual(yield* lockValue(fx, "tok"), undefined)
      // D, a newcomer, does not take the free lock: C is queued ahead, and D's attempt grants it to C
      const newcomer = yield* waits(fx, "tok", "D")
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
      if (fx.exactTime) assert.strictEqual(newcomer.remainingMs, fx.handoffTimeoutMs)
      // C holds the lock now: D's attempt told it so
      deepStrictEqual(yield* noticesSeen(fx, nextSees, 2), [handedOver(a.fence + 2, "C:1", 0), contended])
      deepStrictEqual(yield* fx.store.queue("tok"), ["D"])
    }))

  test("a grantee whose grant expired unclaimed: its claim takes a free lock, and goes back to the head of a held one", (fx) =>
    Effect.gen(function* () {
      // t1: B's grant will have expired with C queued behind it
      const a1 = yield* takes(fx, "t1", "A")
      yield* waits(fx, "t1", "B")
      yield* waits(fx, "t1", "C")
      const bSees = yield* recordNotices(fx, "t1", "B")
      yield* release(fx, "t1", "A")
      // t2: C's grant will have expired, and passed on (unclaimed) to E, when C claims
      const a2 = yield* takes(fx, "t2", "A")
      yield* waits(fx, "t2", "C")
      yield* waits(fx, "t2", "E")
      const cSees = yield* recordNotices(fx, "t2", "C")
      yield* release(fx, "t2", "A")
      yield* fx.advance(pastHandoff(fx))

      // C is the head, the lock free: the claim of the grant that expired takes it all the same
      const b = yield* takes(fx, "t1", "B", { claim: a1.fence + 1, n: 2 })
      assert.strictEqual(b.fence, a1.fence + 2)
      assert.strictEqual(b.queued, 1)
      assert.strictEqual(yield* lockValue(fx, "t1"), "B:2")
      deepStrictEqual(yield* fx.store.queue("t1"), ["C"])

      // D's attempt passes C's expired grant to E, whose grant takes the next fence
      yield* waits(fx, "t2", "D")
      assert.strictEqual(yield* lockValue(fx, "t2"), "E:1")
      // C's claim names the fence before E's: the grant its expiry passed on; C goes first again
      yield* waits(fx, "t2", "C", { claim: a2.fence + 1, n: 2 })
      deepStrictEqual(yield* fx.store.queue("t2"), ["C", "D"])
      assert.strictEqual(yield* lockValue(fx, "t2"), "E:1")
      // the fences claimed with are the ones the grants' notices named
      deepStrictEqual(yield* noticesSeen(fx, bSees, 1), [handedOver(a1.fence + 1, "B:1", 1)])
      deepStrictEqual(yield* noticesSeen(fx, cSees, 1), [handedOver(a2.fence + 1, "C:1", 1)])
    }))

  test("a lock handed over that expired unextended: a write, an extension or a commit with its grant's fence takes it back while nobody had it since", (fx) =>
    Effect.gen(function* () {
      /** A releases `token` to B, whose lock (`B:1`) then expires unextended; the grant's fence. */
      const expiredGrant = (token: string) =>
        Effect.gen(function* () {
          const a = yield* takes(fx, token, "A")
          yield* waits(fx, token, "B")
          yield* release(fx, token, "A")
          assert.strictEqual(yield* lockValue(fx, token), "B:1")
          return a.fence + 1
        })
      const w = yield* expiredGrant("w")
      const e = yield* expiredGrant("e")
      const c = yield* expiredGrant("c")
      yield* expiredGrant("n")
      const m = yield* expiredGrant("m")
      yield* fx.advance(pastHandoff(fx))
      for (const token of ["w", "e", "c", "n", "m"]) assert.strictEqual(yield* lockValue(fx, token), undefined)

      // a write: the lock is B's again, for a full lock expiration
      yield* fx.store.writeIfHolder("w", "B:1", [["a", "1"]], { claim: w })
      deepStrictEqual(yield* fx.store.readSlices("w", ["a"]), [Option.some("1")])
      const held = Option.getOrThrow(yield* fx.store.holder("w"))
      assert.strictEqual(held.lockId, "B:1")
      assert.strictEqual(held.fence, w)
      if (fx.exactTime) assert.strictEqual(held.remainingMs, fx.lockExpirationMs)
      else assert.isAbove(held.remainingMs, fx.handoffTimeoutMs)
      // an extension
      assert.isTrue(yield* fx.store.extend("e", "B:1", [], { claim: e }))
      assert.strictEqual(yield* lockValue(fx, "e"), "B:1")
      // a commit: written and released
      assert.strictEqual(
        yield* fx.store.commitAndReleaseQueued("c", "B:1", [["a", "1"]], { instanceId: "B", claim: c }),
        0
      )
      deepStrictEqual(yield* fx.store.readSlices("c", ["a"]), [Option.some("1")])
      assert.strictEqual(yield* lockValue(fx, "c"), undefined)
      // without the claim, an expired lock is lost as before
      deepStrictEqual(
        (yield* failsWith(fx.store.writeIfHolder("n", "B:1", [["a", "1"]]), "LockLost")).holder,
        Option.none()
      )
      assert.isFalse(yield* fx.store.extend("n", "B:1"))

      // C took the free lock meanwhile: B's claim takes nothing back, and writes nothing
      yield* takes(fx, "m", "C")
      const taken = yield* failsWith(fx.store.writeIfHolder("m", "B:1", [["a", "1"]], { claim: m }), "LockLost")
      deepStrictEqual(taken.holder, Option.some("C:1"))
      // C released it: free again, but the fence moved on with C's grant
      yield* release(fx, "m", "C")
      deepStrictEqual(
        (yield* failsWith(fx.store.writeIfHolder("m", "B:1", [["a", "1"]], { claim: m }), "LockLost")).holder,
        Option.none()
      )
      assert.isFalse(yield* fx.store.extend("m", "B:1", [], { claim: m }))
      yield* failsWith(
        fx.store.commitAndReleaseQueued("m", "B:1", [["a", "1"]], { instanceId: "B", claim: m }),
        "LockLost"
      )
      deepStrictEqual(yield* fx.store.readSlices("m", ["a"]), [Option.none()])
      assert.strictEqual(yield* lockValue(fx, "m"), undefined)
      // A failover that lost writes can bring the fence back to a number already granted: B,
      // queued under B:1, was granted it at F + 1 on the lost primary; on the one promoted the
      // lock is free and the fence has reached F + 1 through other grants, with B still queued.
      // B's claim of that grant takes nothing: B was never granted it on this timeline.
      const f = yield* takes(fx, "f", "A")
      yield* waits(fx, "f", "B")
      yield* fx.putRaw(fx.keys.fence("f"), String(f.fence + 1))
      yield* fx.expireRaw(fx.keys.lock("f"), 1)
      yield* fx.advance(20)
      assert.strictEqual(yield* lockValue(fx, "f"), undefined)
      yield* failsWith(fx.store.writeIfHolder("f", "B:1", [["a", "1"]], { claim: f.fence + 1 }), "LockLost")
      deepStrictEqual(yield* fx.store.readSlices("f", ["a"]), [Option.none()])

      // a claim that is not a fence is refused before any I/O
      yield* failsWith(fx.store.writeIfHolder("m", "B:1", [["a", "1"]], { claim: -1 }), "InvalidClaim")
      yield* failsWith(fx.store.extend("m", "B:1", [], { claim: 1.5 }), "InvalidClaim")
    }))

  test("a claim whose fence has moved on is an ordinary attempt: the queue's head gets the free lock", (fx) =>
    Effect.gen(function* () {
      // t2: B's grant expired unclaimed, then another grant was made and claimed since
      const a2 = yield* takes(fx, "t2", "A")
      yield* waits(fx, "t2", "B")
      yield* waits(fx, "t2", "C")
      yield* release(fx, "t2", "A")
      yield* fx.advance(pastHandoff(fx))
      yield* waits(fx, "t2", "D")
      assert.strictEqual(yield* lockValue(fx, "t2"), "C:1")
      // B's grant took a fence, C's the next
      assert.strictEqual((yield* takes(fx, "t2", "C")).fence, a2.fence + 2)
      yield* release(fx, "t2", "C")
      assert.strictEqual(yield* lockValue(fx, "t2"), "D:1")
      yield* waits(fx, "t2", "E")
      // t1, the late notice: B's grant was claimed (by a re-check) and released since
      const a1 = yield* takes(fx, "t1", "A")
      yield* waits(fx, "t1", "B")
      yield* release(fx, "t1", "A")
      assert.strictEqual((yield* takes(fx, "t1", "B")).fence, a1.fence + 1)
      yield* waits(fx, "t1", "C")
      yield* waits(fx, "t1", "D")
      yield* release(fx, "t1", "B")
      assert.strictEqual(yield* lockValue(fx, "t1"), "C:1")
      // C's grant (t1) and D's (t2) expire unclaimed: each lock is free, with a worker queued
      yield* fx.advance(pastHandoff(fx))
      for (const [token, stale, head] of [
        ["t1", a1.fence, "D"],
        ["t2", a2.fence, "E"]
      ] as const) {
        assert.strictEqual(yield* lockValue(fx, token), undefined, token)
        deepStrictEqual(yield* fx.store.queue(token), [head], token)
        // B claims with the fence of its old grant: it takes nothing, and queues behind the head
        yield* waits(fx, token, "B", { claim: stale, n: 2 })
        assert.strictEqual(yield* lockValue(fx, token), lockOf(head), token)
        deepStrictEqual(yield* fx.store.queue(token), ["B"], token)
        yield* takes(fx, token, head)
        deepStrictEqual(yield* release(fx, token, head), { released: true, queued: 1 }, token)
        assert.strictEqual(yield* lockValue(fx, token), "B:2", token)
      }
    }))

  test("a Granted notice names the grant's fence and lock id: the grantee holds it under that fence", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      yield* waits(fx, "tok", "C")
      const bSees = yield* recordNotices(fx, "tok", "B")
      const cSees = yield* recordNotices(fx, "tok", "C")
      yield* release(fx, "tok", "A")
      // taken over with the notice's fence (a grantee that claims it, within the hand-off
      // timeout), the fence stays
      const b = yield* takes(fx, "tok", "B", { claim: a.fence + 1 })
      assert.strictEqual(b.fence, a.fence + 1)
      const [notice] = yield* noticesSeen(fx, bSees, 1)
      deepStrictEqual(notice, handedOver(a.fence + 1, "B:1", 1))
      // B writes under the grant's own lock id, then releases
      yield* fx.store.writeIfHolder("tok", "B:1", [["a", "1"]])
      yield* release(fx, "tok", "B")
      // the next grant takes the next fence (taken over at once, within the hand-off timeout)
      assert.strictEqual((yield* takes(fx, "tok", "C")).fence, b.fence + 1)
      deepStrictEqual(yield* noticesSeen(fx, cSees, 1), [handedOver(b.fence + 1, "C:1", 0)])
    }))

  test("a grant's notice carries the slices the release names; a grantee that needs another takes the grant over", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A", { slices: ["a"] })
      yield* waits(fx, "tok", "B", { slices: ["a", "b"] })
      const bSees = yield* recordNotices(fx, "tok", "B")
      // written (a), carried as read (c, never stored), and b is not named
      yield* fx.store.commitAndReleaseQueued("tok", "A:1", [["a", "1"]], { instanceId: "A", carry: ["a", "c"] })
      // B needs b too: an attempt takes its grant over (the same fence, within the hand-off
      // timeout) and reads both
      const b = yield* takes(fx, "tok", "B", { slices: ["a", "b"], n: 2 })
      assert.strictEqual(b.fence, a.fence + 1)
      deepStrictEqual(b.values, [Option.some("1"), Option.none()])
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:2")
      deepStrictEqual(yield* noticesSeen(fx, bSees, 1), [
        handedOver(a.fence + 1, "B:1", 0, [
          ["a", Option.some("1")],
          ["c", Option.none()]
        ])
      ])
      // a plain release carries what it names
      yield* waits(fx, "tok", "C")
      const cSees = yield* recordNotices(fx, "tok", "C")
      yield* fx.store.releaseQueued("tok", "B:2", { instanceId: "B", carry: ["a"] })
      deepStrictEqual(yield* noticesSeen(fx, cSees, 1), [handedOver(b.fence + 1, "C:1", 0, [["a", Option.some("1")]])])
    }))

  test("a leave that names a lock id leaves only the entry queued under it, and passes on only its grant", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      // B's next attempt waits under B:2: a leave for its earlier attempt takes nothing
      yield* waits(fx, "tok", "B", { n: 2 })
      yield* fx.store.leaveQueue("tok", "B", "B:1")
      deepStrictEqual(yield* fx.store.queue("tok"), ["B"])
      // granted under B:2: the late leave passes nothing on either
      yield* waits(fx, "tok", "C")
      yield* release(fx, "tok", "A")
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:2")
      yield* fx.store.leaveQueue("tok", "B", "B:1")
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:2")
      // B's own leave, under the lock id of its grant, passes it on to C
      yield* fx.store.leaveQueue("tok", "B", "B:2")
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
      deepStrictEqual(yield* fx.store.queue("tok"), [])
      // a queued entry leaves under its own lock id
      yield* waits(fx, "tok", "D", { n: 4 })
      yield* fx.store.leaveQueue("tok", "D", "D:4")
      deepStrictEqual(yield* fx.store.queue("tok"), [])
    }))

  test("a claim that is not a fence is refused before any I/O", (fx) =>
    Effect.gen(function* () {
      for (const claim of [-1, 1.5, Number.NaN, Number.MAX_SAFE_INTEGER + 1]) {
        yield* failsWith(attempt(fx, "tok", "A", { claim }), "InvalidClaim")
      }
      assert.strictEqual(yield* fx.keyCount, 0)
    }))

  test("an entry not refreshed for a lock expiration is dropped, and never granted", (fx) =>
    Effect.gen(function* () {
      // two steps outlast one lock expiration, one step is well within it
      const step = lateStep(fx)
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      yield* fx.advance(step)
      yield* waits(fx, "tok", "C")
      assert.isTrue(yield* fx.store.extend("tok", "A:1"))
      yield* fx.advance(step)
      deepStrictEqual(yield* fx.store.queue("tok"), ["C"])
      assert.strictEqual(yield* fx.store.queueLength("tok", "A"), 1)
      deepStrictEqual(yield* release(fx, "tok", "A"), { released: true, queued: 1 })
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
      // B's next attempt queues it anew
      yield* waits(fx, "tok", "B")
      deepStrictEqual(yield* fx.store.queue("tok"), ["B"])
    }))

  test("a worker that stopped refreshing its entry is dropped, however often the others refresh theirs", (fx) =>
    Effect.gen(function* () {
      // The chaos soak's leftover: a worker killed while queued, on a token that a live worker
      // keeps waiting for. Its entry must not live on through the refreshes of others.
      const step = Math.floor(fx.lockExpirationMs / 3)
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "killed")
      for (let i = 0; i < 7; i++) {
        yield* fx.advance(step)
        // the live worker's re-checks, while A keeps its lock
        yield* waits(fx, "tok", "live")
        assert.isTrue(yield* fx.store.extend("tok", "A:1"))
      }
      // more than two lock expirations later, only the live worker waits
      deepStrictEqual(yield* fx.store.queue("tok"), ["live"])
      assert.strictEqual(yield* fx.store.queueLength("tok", "live"), 0)
      deepStrictEqual(yield* release(fx, "tok", "A"), { released: true, queued: 1 })
      assert.strictEqual(yield* lockValue(fx, "tok"), "live:1")
      // a lone worker is not contended: it may take a lease
      assert.strictEqual((yield* takes(fx, "tok", "live")).queued, 0)
      deepStrictEqual(yield* release(fx, "tok", "live"), { released: true, queued: 0 })
      // and when it is done, nothing of the token's lock is left
      deepStrictEqual(yield* fx.store.queue("tok"), [])
      assert.strictEqual(yield* lockValue(fx, "tok"), undefined)
      assert.strictEqual(yield* fx.keyCount, 1) // the fence alone
    }))

  test("the last live entry to go takes the queue with it, late entries included: by leaving or by its grant", (fx) =>
    Effect.gen(function* () {
      const step = lateStep(fx)
      const names = (token: string) => Effect.map(fx.store.tokenKeys(token), (infos) => infos.map((info) => info.name))
      for (const token of ["t1", "t2"]) {
        yield* takes(fx, token, "A")
        yield* waits(fx, token, "B")
      }
      yield* fx.advance(step)
      for (const token of ["t1", "t2"]) {
        yield* waits(fx, token, "C")
        assert.isTrue(yield* fx.store.extend(token, "A:1"))
      }
      yield* fx.advance(step)
      // B's deadline has passed, C's has not: the queue lives on for C
      for (const token of ["t1", "t2"]) deepStrictEqual(yield* fx.store.queue(token), ["C"])
      // t1: C leaves
      yield* fx.store.leaveQueue("t1", "C")
      deepStrictEqual(yield* names("t1"), ["fence", "lock"])
      // t2: C is granted the lock and takes it
      yield* release(fx, "t2", "A")
      yield* takes(fx, "t2", "C")
      deepStrictEqual(yield* names("t2"), ["fence", "lock"])
    }))

  test("commitAndReleaseQueued writes and grants in one step; with the lock lost it writes and grants nothing", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A", { slices: ["a"] })
      yield* waits(fx, "tok", "B")
      const headSees = yield* recordNotices(fx, "tok", "B")
      assert.strictEqual(yield* fx.store.commitAndReleaseQueued("tok", "A:1", [["a", "1"]], { instanceId: "A" }), 1)
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      // taken over within the hand-off timeout: the grant's fence
      const b = yield* takes(fx, "tok", "B", { slices: ["a"] })
      deepStrictEqual(b.values, [Option.some("1")])
      assert.strictEqual(b.fence, a.fence + 1)
      // the notice carries what was written
      deepStrictEqual(yield* noticesSeen(fx, headSees, 1), [
        handedOver(a.fence + 1, "B:1", 0, [["a", Option.some("1")]])
      ])

      // B's lock expires while C waits, refreshing its entry
      const half = lateStep(fx)
      yield* waits(fx, "tok", "C")
      const cSees = yield* recordNotices(fx, "tok", "C")
      yield* fx.advance(half)
      yield* waits(fx, "tok", "C")
      yield* fx.advance(half)
      const lost = yield* failsWith(
        fx.store.commitAndReleaseQueued("tok", "B:1", [["a", "2"]], { instanceId: "B", requeue: true }),
        "LockLost"
      )
      deepStrictEqual(lost.holder, Option.none())
      deepStrictEqual(yield* fx.store.readSlices("tok", ["a"]), [Option.some("1")])
      // no grant: the lock is still free, C still queued and told nothing, B not queued
      assert.strictEqual(yield* lockValue(fx, "tok"), undefined)
      deepStrictEqual(yield* fx.store.queue("tok"), ["C"])
      deepStrictEqual(yield* noticesSeen(fx, cSees, 0), [])

      // the holder died: a newcomer's attempt does not take the free lock, it grants it to C
      yield* waits(fx, "tok", "E")
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
      // a commit by a worker that does not hold the lock names the holder
      yield* takes(fx, "tok", "C")
      const other = yield* failsWith(
        fx.store.commitAndReleaseQueued("tok", "A:1", [["a", "3"]], { instanceId: "A" }),
        "LockLost"
      )
      deepStrictEqual(other.holder, Option.some("C:1"))
      deepStrictEqual(yield* fx.store.readSlices("tok", ["a"]), [Option.some("1")])
      assert.strictEqual(yield* lockValue(fx, "tok"), "C:1")
    }))

  test("the fence lives as long as the slices: a queued grant and a queued commit refresh it", (fx) =>
    Effect.gen(function* () {
      /**
       * A third of a lock expiration after the fence was last refreshed (within B's lock),
       * `step` refreshes slice `a`: the fence must follow. Both TTLs come from one read; a
       * fence left behind is that third short, twice the tolerance (200 ms on the real servers).
       */
      const gap = Math.floor(fx.lockExpirationMs / 3)
      const fenceFollows = (label: string, step: Effect.Effect<unknown, unknown>) =>
        Effect.gen(function* () {
          yield* fx.advance(gap)
          yield* step
          const ttl = yield* ttlsOf(fx, "tok")
          const [fence, slice] = [ttl("fence"), ttl("s:a")]
          assert.isAtLeast(fence, slice - Math.floor(gap / 2), `${label}: fence TTL ${fence} ms, slice TTL ${slice} ms`)
        })
      yield* takes(fx, "tok", "A")
      yield* fx.store.commitAndReleaseQueued("tok", "A:1", [["a", "1"]], { instanceId: "A" })
      yield* fenceFollows("acquireQueued", takes(fx, "tok", "B", { slices: ["a"] }))
      yield* fenceFollows(
        "commitAndReleaseQueued",
        fx.store.commitAndReleaseQueued("tok", "B:1", [["a", "2"]], { instanceId: "B" })
      )
    }))

  test("tokenKeys lists the queue, its deadlines and its lock ids: sets that live as long as the newest entry", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      const lockMs = fx.lockExpirationMs
      yield* fx.advance(Math.floor(lockMs / 2))
      yield* waits(fx, "tok", "C")
      const infos = yield* fx.store.tokenKeys("tok")
      for (const name of ["queue", "queue:d", "queue:i"]) {
        const info = infos.find((key) => key.name === name)
        assert.isDefined(info, `${name} in ${infos.map((key) => key.name).join(", ")}`)
        assert.strictEqual(info!.kind, "set", name)
        assert.strictEqual(info!.size, 2, name)
        const ttl = Option.getOrElse(info!.ttlMs, () => -1)
        // C's deadline, not B's (half a lock expiration shorter)
        assert.isTrue(ttl > lockMs - Math.floor(lockMs / 4) && ttl <= lockMs, `${name}: TTL ${ttl} ms`)
        if (fx.exactTime) assert.strictEqual(ttl, lockMs, name)
      }
      // gone with the last entry
      yield* fx.store.leaveQueue("tok", "B")
      yield* fx.store.leaveQueue("tok", "C")
      const names = (yield* fx.store.tokenKeys("tok")).map((key) => key.name)
      assert.notInclude(names, "queue")
      assert.notInclude(names, "queue:d")
      assert.notInclude(names, "queue:i")
    }))

  test("an entry's refresh only lengthens the queue's life: a shorter lock expiration cuts no other entry short", (fx) =>
    Effect.gen(function* () {
      const a = yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      // B's worker has a lock expiration ten times this store's: the queue lives that long
      const longMs = fx.lockExpirationMs * 10
      for (const key of [fx.keys.queue("tok"), fx.keys.queueDeadlines("tok")]) yield* fx.expireRaw(key, longMs)
      // behind it, with this store's lock expiration: C queues and refreshes its entry, D goes
      // to the head (a grantee whose grant expired)
      yield* waits(fx, "tok", "C")
      yield* waits(fx, "tok", "C")
      yield* waits(fx, "tok", "D", { claim: a.fence })
      deepStrictEqual(yield* fx.store.queue("tok"), ["D", "B", "C"])
      for (const name of ["queue", "queue:d"]) {
        const ttl = yield* ttlOf(fx, "tok", name)
        assert.isAbove(ttl, longMs - 1_000, `${name}: TTL ${ttl} ms`)
      }
    }))

  test("a claim refused half-way (a fence that is not a number) leaves the grant pending for its worker", (fx) =>
    Effect.gen(function* () {
      yield* takes(fx, "tok", "A")
      yield* waits(fx, "tok", "B")
      yield* release(fx, "tok", "A")
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      yield* fx.putRaw(fx.keys.fence("tok"), "not a number")
      yield* failsWith(attempt(fx, "tok", "B", { n: 2 }), "StoreRefused")
      // repaired (the holder's report reads the fence too), the grant is still B's
      yield* fx.putRaw(fx.keys.fence("tok"), "2")
      assert.strictEqual(yield* lockValue(fx, "tok"), "B:1")
      const b = yield* takes(fx, "tok", "B", { n: 2 })
      assert.strictEqual(b.fence, 2)
    }))

  test("a queue key of another kind refuses every queue step that writes, and nothing changes", (fx) =>
    Effect.gen(function* () {
      for (const [token, key] of [
        ["t1", fx.keys.queue("t1")],
        ["t2", fx.keys.queueDeadlines("t2")],
        ["t3", fx.keys.queueIds("t3")]
      ] as const) {
        const a = yield* takes(fx, token, "A")
        yield* fx.putRaw(key, "not a set")
        const steps: ReadonlyArray<
          readonly [string, Effect.Effect<unknown, InvalidInput | LockLost | AcknowledgedError>]
        > = [
          ["acquireQueued", attempt(fx, token, "B", { slices: ["a"] })],
          ["releaseQueued", release(fx, token, "A", { requeue: true })],
          ["commitAndReleaseQueued", fx.store.commitAndReleaseQueued(token, "A:1", [["a", "x"]], { instanceId: "A" })],
          ["leaveQueue", fx.store.leaveQueue(token, "A")]
        ]
        for (const [name, step] of steps) {
          const refused = yield* failsWith(step, "StoreRefused")
          assert.include(refused.reply, "WRONGTYPE", `${name} with ${key}`)
        }
        // the lock is still A's, under the same fence, and nothing was written
        deepStrictEqual(
          Option.map(yield* fx.store.holder(token), (holder) => [holder.lockId, holder.fence]),
          Option.some(["A:1", a.fence])
        )
        deepStrictEqual(yield* fx.store.readSlices(token, ["a"]), [Option.none()])
      }
    }))

  test("a lock id that could pass for a pending grant is refused, before any I/O", (fx) =>
    Effect.gen(function* () {
      const before = yield* Option.match(fx.commandsProcessed, { onNone: () => Effect.succeed(0), onSome: (n) => n })
      const pending = "?B"
      yield* failsWith(fx.store.acquireQueued("tok", pending, [], { instanceId: "A" }), "InvalidLockId")
      yield* failsWith(fx.store.releaseQueued("tok", pending, { instanceId: "A" }), "InvalidLockId")
      yield* failsWith(
        fx.store.commitAndReleaseQueued("tok", pending, [["a", "1"]], { instanceId: "A" }),
        "InvalidLockId"
      )
      const after = yield* Option.match(fx.commandsProcessed, { onNone: () => Effect.succeed(0), onSome: (n) => n })
      assert.strictEqual(after - before, 0, "commands reached the server")
      assert.strictEqual(yield* fx.keyCount, 0)
    }))
}
