/**
 * The state manager's behaviour, once, for both stores: `StateManager.memory.test.ts`
 * runs it on MemoryStore under TestClock, `StateManager.redis.test.ts` on RedisStore
 * against a real redis-server. Grants are counted by the store's fencing counter.
 */

import { assert, describe } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Lease from "../../src/internal/lease.js"
import type * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as StateManager from "../../src/StateManager.js"
import { failsWith } from "../conformance/helpers.js"
import { atLevels } from "../support/logs.js"
import { type Cluster, Counter, Other, type Worker } from "./workers.js"

export interface Tools {
  /** Let `ms` pass: TestClock on memory, real time on Redis. */
  readonly advance: (ms: number) => Effect.Effect<void>
  /**
   * Wait until nothing more is under way for `token`, before asserting that something did
   * not happen: on memory the fibers run until they wait (no time passes); on a real server,
   * barriers on the server of the token's keys until no client sends anything between two.
   */
  readonly quiet: (token: string) => Effect.Effect<void>
  /** Wait until `check` holds (polling; on memory the TestClock moves 1 ms a poll; fails the test after a while). */
  readonly until: (label: string, check: Effect.Effect<boolean, unknown>) => Effect.Effect<void>
}

/** Until `fiber` has ended. */
const ended = <A, E>(tools: Tools, fiber: Fiber.Fiber<A, E>, label = "the fiber to end") =>
  tools.until(
    label,
    Effect.sync(() => fiber.pollUnsafe() !== undefined)
  )

/** Run `effect` to its end while time moves (a lease may wait out its quantum meanwhile). */
const run = <A, E>(tools: Tools, effect: Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const fiber = yield* Effect.forkChild(effect)
    yield* ended(tools, fiber, "the effect to end")
    return yield* Fiber.join(fiber)
  })

const join = <A, E>(tools: Tools, fiber: Fiber.Fiber<A, E>) => Effect.andThen(ended(tools, fiber), Fiber.join(fiber))

export interface StateBackend {
  readonly name: "memory" | "redis" | "redis-cluster"
  readonly test: (
    name: string,
    input: LeaseholdConfig.Input,
    body: (cluster: Cluster, tools: Tools) => Effect.Effect<void, unknown, Scope.Scope>
  ) => void
}

const inc = (w: Worker, token: string, by = 1) => w.states.modify(token, Counter, (s) => [s.n + by, { n: s.n + by }])

/** The no-barging tests' history: the loop's count, the waiter's, and the loop's count when the waiter was served. */
const Served = StateManager.slice("served", Schema.Struct({ n: Schema.Number, w: Schema.Number, at: Schema.Number }), {
  n: 0,
  w: 0,
  at: -1
})

/** A modification that holds its turn until `gate` opens. */
const held = (w: Worker, token: string, gate: Deferred.Deferred<void>, entered?: Deferred.Deferred<void>) =>
  w.states.modifyEffect(token, Counter, (s) =>
    Effect.gen(function* () {
      if (entered !== undefined) yield* Deferred.succeed(entered, undefined)
      yield* Deferred.await(gate)
      return [s.n + 1, { n: s.n + 1 }] as const
    })
  )

/**
 * Start a modification on `token` that holds its turn (and the lock) until `open` runs.
 * Returns once it has entered (time moves meanwhile on memory: a lease may have to end first).
 */
const blocker = (tools: Tools, w: Worker, token: string) =>
  Effect.gen(function* () {
    const gate = yield* Deferred.make<void>()
    const entered = yield* Deferred.make<void>()
    const fiber = yield* Effect.forkChild(held(w, token, gate, entered))
    yield* tools.until("the modification entered", Deferred.isDone(entered))
    return { fiber, open: Deferred.succeed(gate, undefined) }
  })

/**
 * Wait until the workers queued for the token's lock are exactly `ids` (order ignored),
 * within 3 s of clock time: far less than a queue entry lives unrefreshed (the lock
 * expiration, 10 s by default), so an entry left behind cannot pass for one that left.
 */
const queueBecomes = (cluster: Cluster, tools: Tools, ids: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const started = yield* Clock.currentTimeMillis
    yield* tools.until(
      `queue ${JSON.stringify(ids)}`,
      Effect.map(cluster.store.queue("t"), (now) => now.length === ids.length && ids.every((id) => now.includes(id)))
    )
    const elapsed = (yield* Clock.currentTimeMillis) - started
    assert.isBelow(elapsed, 3_000, `queue ${JSON.stringify(ids)} only after ${elapsed} ms`)
  })

/** A worker of no cluster, queued for the token's lock by hand (its lock ids are `<id>:<n>`, as the protocol makes them). */
const queueFake = (cluster: Cluster, token: string, id: string) =>
  Effect.flatMap(cluster.store.acquireQueued(token, `${id}:1`, [], { instanceId: id }), (result) =>
    result._tag === "Queued" ? Effect.void : Effect.die(`${id} took the lock of ${token} instead of queuing`)
  )

/** A worker of no cluster takes the token's free lock by hand (lock id `<id>:1`). */
const holdFake = (cluster: Cluster, token: string, id: string) =>
  Effect.flatMap(cluster.store.acquireQueued(token, `${id}:1`, [], { instanceId: id }), (result) =>
    result._tag === "Acquired" ? Effect.void : Effect.die(`${id} was queued for ${token} instead of taking it`)
  )

/** The token's lock as its value reads: a lock id, `?<worker>` for a pending grant, `undefined` when free. */
const lockValue = (cluster: Cluster, token: string) =>
  Effect.map(cluster.store.holder(token), (holder) => Option.getOrUndefined(Option.map(holder, (h) => h.lockId)))

/**
 * Wait until `check` holds, within 2 s of clock time: far less than a grant or a lock left
 * behind would hold the token up (the hand-off timeout or the lock expiration of the tests
 * that use it).
 */
const soon = (tools: Tools, label: string, check: Effect.Effect<boolean, unknown>) =>
  Effect.gen(function* () {
    const started = yield* Clock.currentTimeMillis
    yield* tools.until(label, check)
    const elapsed = (yield* Clock.currentTimeMillis) - started
    assert.isBelow(elapsed, 2_000, `${label} only after ${elapsed} ms`)
  })

const lockBecomes = (cluster: Cluster, tools: Tools, value: string) =>
  soon(
    tools,
    `lock ${value}`,
    Effect.map(lockValue(cluster, "t"), (now) => now === value)
  )

/** The error a fiber failed with, or a defect naming how else it ended. */
const failureOf = <A, E>(tools: Tools, fiber: Fiber.Fiber<A, E>) =>
  Effect.flatMap(Effect.andThen(ended(tools, fiber), Fiber.await(fiber)), (exit) =>
    Exit.isFailure(exit) && Option.isSome(Cause.findErrorOption(exit.cause))
      ? Effect.succeed(Option.getOrThrow(Cause.findErrorOption(exit.cause)))
      : Effect.die(`expected a failure, got ${String(exit)}`)
  )

/** Wait until a worker has no local entry left. */
const idle = (tools: Tools, w: Worker) =>
  tools.until(
    "no local entry",
    Effect.map(w.lease.sessions, (n) => n === 0)
  )

const oplock = { oplock: true } as const

export const stateSuite = (backend: StateBackend) => {
  const test = backend.test

  describe("modifications", () => {
    test("R2: two modifications in sequence see each other's writes", {}, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        assert.strictEqual(yield* w.states.modify("t", Counter, (s) => [s.n, { n: s.n + 1 }]), 0)
        assert.strictEqual(yield* w.states.modify("t", Counter, (s) => [s.n, { n: s.n + 2 }]), 1)
        deepStrictEqual(yield* w.states.get("t", Counter), { n: 3 })
        assert.strictEqual(yield* cluster.stored("t"), 3)
        assert.strictEqual(yield* cluster.grants("t"), 2)
      })
    )

    test("S2: ten concurrent +1 on one token: 10, no lock and no local entry left", {}, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        yield* Effect.all(
          Array.from({ length: 10 }, () => inc(w, "t")),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(yield* cluster.stored("t"), 10)
        assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
        assert.strictEqual(yield* w.lease.sessions, 0)
      })
    )

    test(
      "a value over maxValueBytes is refused before any I/O and nothing is written",
      { maxValueBytes: 64 },
      (cluster) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          yield* w.states.modify("t", Other, () => [null, { s: "small" }])
          const refused = yield* failsWith(
            w.states.modifyAll("t", { counter: Counter, other: Other }, (v) =>
              Effect.succeed([null, { counter: { n: v.counter.n + 1 }, other: { s: "x".repeat(100) } }] as const)
            ),
            "ValueTooLarge"
          )
          assert.strictEqual(refused.slice, "other")
          assert.strictEqual(refused.maxBytes, 64)
          assert.strictEqual(refused.bytes, JSON.stringify({ s: "x".repeat(100) }).length)
          // neither slice changed: the counter's write was refused with the other's
          assert.strictEqual(yield* cluster.stored("t"), 0)
          deepStrictEqual(yield* cluster.store.readSlices("t", ["other"]), [
            Option.some(JSON.stringify({ s: "small" }))
          ])
          // the lock is free again
          yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
          assert.strictEqual(yield* cluster.stored("t"), 1)
        })
    )

    test("a modification sees its grant's fencing number, one more at every grant; outside one, None", {}, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        deepStrictEqual(yield* StateManager.fence, Option.none())
        const seen: Array<Option.Option<number>> = []
        for (let i = 0; i < 3; i++) {
          seen.push(
            yield* w.states.modifyEffect("t", Counter, (s) =>
              Effect.map(StateManager.fence, (fence) => [fence, { n: s.n + 1 }] as const)
            )
          )
        }
        deepStrictEqual(seen, [Option.some(1), Option.some(2), Option.some(3)])
        assert.strictEqual(yield* cluster.grants("t"), 3)
      })
    )

    test("a failing modification changes nothing", {}, (cluster, tools) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        yield* inc(w, "t")
        const error = yield* Effect.flip(w.states.modifyEffect("t", Counter, () => Effect.fail("nope" as const)))
        assert.strictEqual(error, "nope")
        assert.strictEqual(yield* cluster.stored("t"), 1)
        // the release follows the failed modification
        yield* tools.until("the lock is released", Effect.map(cluster.store.holder("t"), Option.isNone))
        assert.strictEqual(yield* inc(w, "t"), 2)
      })
    )

    test("an interrupted modification changes nothing and frees the lock", {}, (cluster, tools) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        yield* inc(w, "t")
        const fiber = yield* blocker(tools, w, "t")
        yield* Fiber.interrupt(fiber.fiber)
        yield* tools.until("the lock is released", Effect.map(cluster.store.holder("t"), Option.isNone))
        assert.strictEqual(yield* cluster.stored("t"), 1)
        assert.strictEqual(yield* inc(w, "t"), 2)
      })
    )

    test("only slices whose encoding changed are written; several slices under one lock", {}, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        const result = yield* w.states.modifyAll("t", { c: Counter, o: Other }, (v) =>
          Effect.succeed([v.c.n, { c: { n: v.c.n + 5 }, o: v.o }] as const)
        )
        assert.strictEqual(result, 0)
        assert.strictEqual(yield* cluster.stored("t"), 5)
        // the unchanged slice was not written
        assert.isTrue(Option.isNone((yield* cluster.store.readSlices("t", ["other"]))[0]!))
        yield* w.states.modifyAll("t", { c: Counter, o: Other }, (v) =>
          Effect.succeed([null, { c: v.c, o: { s: `n=${v.c.n}` } }] as const)
        )
        deepStrictEqual(yield* w.states.get("t", Other), { s: "n=5" })
        assert.strictEqual(yield* cluster.grants("t"), 2)
      })
    )

    test("a stored value that does not decode is replaced by the initial value, with one warning", {}, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        yield* inc(w, "t")
        const lock = yield* cluster.store.tryAcquire("t", "planter", [])
        assert.strictEqual(lock._tag, "Acquired")
        yield* cluster.store.commitAndRelease("t", "planter", [["counter", '{"n":"not a number"}']])
        const before = atLevels(cluster.logs, ["WARN"]).length
        assert.strictEqual(yield* inc(w, "t"), 1)
        const warnings = atLevels(cluster.logs, ["WARN"]).slice(before)
        assert.strictEqual(warnings.length, 1)
        assert.include(warnings[0]!.message, "slice counter of token t does not decode")
        assert.strictEqual(yield* cluster.stored("t"), 1)
      })
    )

    test("a bad token is refused before any I/O", {}, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        for (const token of ["a*", "", "x".repeat(129), "a b"]) {
          const error = yield* Effect.flip(inc(w, token))
          assert.strictEqual(error._tag, "InvalidToken")
          assert.strictEqual((yield* Effect.flip(w.states.get(token, Counter)))._tag, "InvalidToken")
        }
        assert.strictEqual(yield* w.lease.sessions, 0)
      })
    )
  })

  describe("lock", () => {
    test(
      "S3: a modification that outlives its lock fails with LockExpired and writes nothing",
      { lockExpiration: 300, lockWarningThreshold: 100 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          const gate = yield* Deferred.make<void>()
          const entered = yield* Deferred.make<void>()
          const fiber = yield* Effect.forkChild(
            w.states.modifyEffect(
              "t",
              Counter,
              (s) =>
                Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
                  0,
                  { n: s.n + 666 }
                ] as const),
              { event: "slow" }
            )
          )
          yield* Deferred.await(entered)
          yield* tools.advance(400)
          yield* Deferred.succeed(gate, undefined)
          const exit = yield* Fiber.await(fiber)
          assert.isTrue(Exit.isFailure(exit))
          const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.findErrorOption(exit.cause)) : undefined
          assert.strictEqual(error?._tag, "LockExpired")
          if (error?._tag === "LockExpired") {
            deepStrictEqual(error.event, Option.some("slow"))
            assert.strictEqual(error.token, "t")
          }
          assert.strictEqual(yield* cluster.stored("t"), 0)
        })
    )

    test(
      "S4: a blocker outlives its lock; a waiter then writes 4252; the blocker's write is refused",
      { lockExpiration: 300, lockWarningThreshold: 100 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const a = yield* cluster.worker()
          const b = yield* cluster.worker()
          const gate = yield* Deferred.make<void>()
          const entered = yield* Deferred.make<void>()
          const blocker = yield* Effect.forkChild(
            a.states.modifyEffect("t", Counter, () =>
              Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
                0,
                { n: 666 }
              ] as const)
            )
          )
          yield* Deferred.await(entered)
          const waiter = yield* Effect.forkChild(b.states.modify("t", Counter, () => [0, { n: 4252 }]))
          yield* tools.until(
            "b queued",
            Effect.map(cluster.store.queue("t"), (ids) => ids.includes(b.id))
          )
          yield* tools.advance(400)
          yield* Fiber.join(waiter)
          yield* Deferred.succeed(gate, undefined)
          const exit = yield* Fiber.await(blocker)
          assert.isTrue(Exit.isFailure(exit))
          assert.strictEqual(yield* cluster.stored("t"), 4252)
        })
    )

    test(
      "S5: a hold over the threshold logs one warning per modification, not per slice",
      { lockWarningThreshold: 100 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          const before = atLevels(cluster.logs, ["WARN"]).length
          const gate = yield* Deferred.make<void>()
          const entered = yield* Deferred.make<void>()
          const fiber = yield* Effect.forkChild(
            w.states.modifyAll(
              "t",
              { c: Counter, o: Other },
              (v) =>
                Effect.as(Effect.andThen(Deferred.succeed(entered, undefined), Deferred.await(gate)), [
                  null,
                  { c: { n: v.c.n + 1 }, o: { s: "x" } }
                ] as const),
              { event: "slow-event" }
            )
          )
          yield* Deferred.await(entered)
          yield* tools.advance(150)
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(fiber)
          yield* inc(w, "t")
          const warnings = atLevels(cluster.logs, ["WARN"]).slice(before)
          assert.strictEqual(warnings.length, 1)
          assert.include(warnings[0]!.message, "token t")
          assert.include(warnings[0]!.message, "slow-event")
        })
    )

    test(
      "no lost wake-up: a waiter on another worker is granted on the release, not after a re-check",
      // re-checks every 30 s (a tenth of the lock expiration, half the hand-off timeout): a
      // lost notice would show as a wait of that long
      { lockExpiration: 300_000, handoffTimeout: 60_000, lockWarningThreshold: 100_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const a = yield* cluster.worker()
          const b = yield* cluster.worker()
          const first = yield* blocker(tools, a, "t")
          const second = yield* Effect.forkChild(inc(b, "t"))
          yield* tools.until(
            "b queued",
            Effect.map(cluster.store.queue("t"), (ids) => ids.includes(b.id))
          )
          // b's steps after queueing (listening, a last attempt) are over: it waits for the notice
          yield* tools.quiet("t")
          const released = yield* Clock.currentTimeMillis
          yield* first.open
          yield* Fiber.join(first.fiber)
          yield* tools.until(
            "the waiter finished",
            Effect.map(
              Effect.sync(() => Option.fromNullishOr(second.pollUnsafe())),
              Option.isSome
            )
          )
          // within 5 s of the release, far from the 30 s of a re-check (real time on Redis, a
          // few ms on a quiet machine; on memory the clock moves 1 ms a poll)
          const waited = (yield* Clock.currentTimeMillis) - released
          assert.isBelow(waited, 5_000, `the waiter finished ${waited} ms after the release`)
          assert.strictEqual(yield* cluster.stored("t"), 2)
          deepStrictEqual(yield* cluster.store.queue("t"), [])
        })
    )

    test(
      "one wake-up per hand-off, in queue order: three workers queued behind a fourth cost their write and release alone",
      // re-checks (every 5 s: half the hand-off timeout) and hand-off timeouts (10 s) far beyond the test
      { lockExpiration: 60_000, handoffTimeout: 10_000, lockWarningThreshold: 30_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const seen = yield* Effect.transposeOption(Option.map(cluster.scripts, (watch) => watch("t")))
          const a = yield* cluster.worker()
          const others = [yield* cluster.worker(), yield* cluster.worker(), yield* cluster.worker()]
          const workers = [a, ...others]
          /** The index in `workers` of the worker each script seen so far names. */
          const senders = Option.match(seen, {
            onNone: () => Effect.succeed<ReadonlyArray<number>>([]),
            onSome: (scripts) =>
              Effect.map(scripts, (all) => all.map((args) => workers.findIndex((w) => args.includes(w.id))))
          })
          const first = yield* blocker(tools, a, "t")
          const done: Array<string> = []
          const fibers: Array<Fiber.Fiber<number, unknown>> = []
          for (const w of others) {
            fibers.push(yield* Effect.forkChild(Effect.tap(inc(w, "t"), () => Effect.sync(() => done.push(w.id)))))
            yield* tools.until(
              "queued",
              Effect.map(cluster.store.queue("t"), (ids) => ids.includes(w.id))
            )
          }
          deepStrictEqual(
            yield* cluster.store.queue("t"),
            others.map((w) => w.id)
          )
          // A waiter that queued before it listened attempts once more right after it listens
          // (its grant may have been announced before): two scripts each, then they wait.
          yield* tools.quiet("t")
          if (Option.isSome(seen)) {
            yield* tools.until(
              "every waiter waits",
              Effect.map(senders, (all) => [1, 2, 3].every((i) => all.filter((s) => s === i).length === 2))
            )
          }
          const before = yield* Effect.transposeOption(cluster.operations)
          const sentBefore = (yield* senders).length
          yield* first.open
          yield* Fiber.join(first.fiber)
          const answers: Array<number> = []
          for (const fiber of fibers) answers.push(yield* Fiber.join(fiber))
          // the last grantee's modification is acknowledged once written; it releases a turn later
          // (waited for without asking the store, which would count)
          yield* tools.until(
            "every session has ended",
            Effect.map(
              Effect.forEach(workers, (w) => w.lease.sessions),
              (counts) => counts.every((n) => n === 0)
            )
          )
          if (Option.isSome(before) && Option.isSome(cluster.operations)) {
            // Memory: a's commit-and-release; then each waiter behind which another waits writes
            // its one modification in its release (its caller not seen to come back: no turn
            // kept for it), and the last, whom nobody waits behind, writes it (acknowledged
            // then, the grant kept one turn for a caller that comes back), then releases: the
            // notice is the grant, no claim follows it; a waiter woken for nothing would add an
            // attempt of its own.
            assert.strictEqual((yield* cluster.operations.value) - before.value, 1 + others.length + 1)
          } else {
            // Redis, whose scripts name their worker: from a's release on, the scripts come
            // from a, then b, then c, then d, each in one run (a write and a release, or both
            // at once; no claim): nobody else sends anything between a release and the
            // grantee's own next step.
            const after = (yield* senders).slice(sentBefore)
            const runs = after.filter((sender, i) => i === 0 || after[i - 1] !== sender)
            deepStrictEqual(runs, [0, 1, 2, 3])
            assert.isAtMost(after.length, 1 + 2 * others.length)
          }
          // served in queue order: each read what the one before it wrote (each answered once
          // its write is stored: a grantee's write goes in its release, which hands the lock
          // on, so on the embedded store the next may be answered first)
          deepStrictEqual(answers, [2, 3, 4])
          deepStrictEqual([...done].sort(), others.map((w) => w.id).sort())
          assert.strictEqual(yield* cluster.stored("t"), 4)
          deepStrictEqual(yield* cluster.store.queue("t"), [])
        })
    )

    /**
     * Callers on `a` modify the token in a tight loop (several keep `a`'s local queue from
     * emptying, so that it holds its lock without a break). The loop's 20th increment holds its turn until a
     * waiter on `b` has queued, so the waiter queued between the 19th increment stored and the
     * 20th. Both record in one slice: the loop's count `n` (each increment answers the count it
     * wrote, so every one is counted exactly) and `at`, the loop's count when the waiter was
     * served: the loop's increments stored after the waiter queued and before its turn are
     * the 20th to the `at`th. The fencing counter, read in the 20th turn and in the waiter's,
     * shows that no grant came between the loop's grant then and the waiter's.
     *
     * The loop ends when the waiter is served, or after `loopMs` of real time, read in the loop
     * itself: no wait of the test runs beside the loop. A tight loop keeps Node's timers
     * waiting, and on memory `TestClock.adjust` waits until every fiber is suspended, which a
     * running loop never is: a poll beside it would only see the loop's end. For the same reason
     * the clock of memory moves inside the turns, by 1 ms each (every other fiber waits for the
     * turn then), so that a quantum can end.
     */
    const noBarging = (quantumMs: number) => (cluster: Cluster, tools: Tools) =>
      Effect.gen(function* () {
        const memory = Option.isSome(cluster.operations)
        const loopMs = 10_000
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        const go = yield* Deferred.make<void>()
        let stop = false
        const waiter = yield* Effect.forkChild(
          Effect.andThen(
            Deferred.await(go),
            b.states.modifyEffect("t", Served, (s) =>
              Effect.map(cluster.grants("t"), (fence) => [[s.n, fence], { ...s, w: s.w + 1, at: s.n }] as const)
            )
          ).pipe(
            Effect.ensuring(
              Effect.sync(() => {
                stop = true
              })
            )
          )
        )
        let queuedAt = 0
        let fenceAtQueue = 0
        const deadline = performance.now() + loopMs
        /** The counts the loop's increments answered, and the clock when each one's turn began (by count). */
        const counts: Array<number> = []
        const turnAt: Array<number> = []
        const caller = Effect.whileLoop({
          while: () => !stop && performance.now() < deadline,
          body: () =>
            Effect.flatMap(
              a.states.modifyEffect("t", Served, (s) =>
                Effect.gen(function* () {
                  if (memory) yield* tools.advance(1)
                  turnAt[s.n + 1] = yield* Clock.currentTimeMillis
                  if (s.n + 1 === 20) {
                    yield* Deferred.succeed(go, undefined)
                    yield* tools.until(
                      "the waiter queued",
                      Effect.map(cluster.store.queue("t"), (ids) => ids.includes(b.id))
                    )
                    queuedAt = yield* Clock.currentTimeMillis
                    fenceAtQueue = yield* cluster.grants("t")
                  }
                  return [s.n + 1, { ...s, n: s.n + 1 }] as const
                })
              ),
              (count) => Effect.sync(() => counts.push(count))
            ),
          step: () => undefined
        })
        yield* Effect.all(
          Array.from({ length: 4 }, () => caller),
          { concurrency: "unbounded" }
        )
        assert.isTrue(stop, `the remote waiter did not get its turn within ${loopMs} ms of the loop`)
        const [at, waiterFence] = yield* Fiber.join(waiter)
        // the grant held when the waiter queued was the last before its own: no barging
        assert.strictEqual(waiterFence, fenceAtQueue + 1, "grants between the waiter's queueing and its turn")
        // every increment of the loop once, and the waiter's once, between two of them
        deepStrictEqual(
          [...counts].sort((x, y) => x - y),
          counts.map((_, i) => i + 1)
        )
        const [raw] = yield* cluster.store.readSlices("t", ["served"])
        deepStrictEqual(
          Option.map(raw!, (text) => JSON.parse(text)),
          Option.some({ n: counts.length, w: 1, at })
        )
        if (quantumMs === 0) {
          // the increment in its turn when the waiter queued, and none after it
          assert.strictEqual(at, 20)
        } else {
          // those of one quantum from the waiter's queueing on, timed exactly on memory (the
          // turn in progress when the quantum ends began within it), with 300 ms to spare on Redis
          assert.isAtLeast(at, 20)
          const slackMs = memory ? 0 : 300
          for (let count = 21; count <= at; count++) {
            assert.isAtMost(turnAt[count]! - queuedAt, quantumMs + slackMs, `the ${count}th increment's turn`)
          }
        }
      })

    test(
      "no barging, a quantum of 0: of a tight loop on one worker, one increment at most lands between a waiter on another queueing and its turn",
      { leaseQuantum: 0 },
      noBarging(0)
    )

    test(
      "no barging, the default quantum: of a tight loop on one worker, only the increments of one quantum land between a waiter on another queueing and its turn",
      {},
      noBarging(2)
    )
  })

  describe("the store queue", () => {
    test("R10: the queue's length excludes this worker, +1 per other worker queued", {}, (cluster) =>
      Effect.gen(function* () {
        const a = yield* cluster.worker()
        const b = yield* cluster.worker()
        const c = yield* cluster.worker()
        // the workers queue behind a holder, each under its own id
        const held = yield* cluster.store.acquireQueued("t", "holder:1", [], { instanceId: "holder" })
        assert.strictEqual(held._tag, "Acquired")
        yield* queueFake(cluster, "t", a.id)
        assert.strictEqual(yield* cluster.store.queueLength("t", a.id), 0)
        yield* queueFake(cluster, "t", b.id)
        assert.strictEqual(yield* cluster.store.queueLength("t", a.id), 1)
        yield* queueFake(cluster, "t", c.id)
        assert.strictEqual(yield* cluster.store.queueLength("t", a.id), 2)
        // and the holder counts every worker queued behind it
        assert.strictEqual(yield* cluster.store.queueLength("t", "holder"), 3)
        assert.notStrictEqual(a.id, b.id)
        assert.notStrictEqual(b.id, c.id)
      })
    )

    test("a waiting worker is queued exactly while it has a waiter", {}, (cluster, tools) =>
      Effect.gen(function* () {
        const holder = yield* cluster.worker()
        const w = yield* cluster.worker()
        const blocking = yield* blocker(tools, holder, "t")
        const a = yield* Effect.forkChild(inc(w, "t"))
        const b = yield* Effect.forkChild(inc(w, "t"))
        yield* queueBecomes(cluster, tools, [w.id])
        yield* Fiber.interrupt(a)
        yield* tools.quiet("t")
        deepStrictEqual(yield* cluster.store.queue("t"), [w.id])
        yield* Fiber.interrupt(b)
        yield* queueBecomes(cluster, tools, [])
        yield* idle(tools, w)
        yield* blocking.open
        yield* join(tools, blocking.fiber)
      })
    )

    test(
      "R12: a waiter that queues while the worker's leaving is in flight ends queued; leaving again leaves the queue",
      {},
      (cluster, tools) =>
        Effect.gen(function* () {
          const holder = yield* cluster.worker()
          const w = yield* cluster.worker()
          const blocking = yield* blocker(tools, holder, "t")
          const first = yield* Effect.forkChild(inc(w, "t"))
          yield* queueBecomes(cluster, tools, [w.id])
          // the last waiter leaves and, in the same instant, another one queues
          yield* Effect.sync(() => first.interruptUnsafe())
          const second = yield* Effect.forkChild(inc(w, "t"))
          yield* tools.quiet("t")
          yield* queueBecomes(cluster, tools, [w.id])
          yield* tools.quiet("t")
          deepStrictEqual(yield* cluster.store.queue("t"), [w.id])
          // and that one leaves while its attempt to queue is under way
          const third = yield* Effect.forkChild(inc(w, "t"))
          yield* Effect.sync(() => second.interruptUnsafe())
          yield* Fiber.interrupt(third)
          yield* queueBecomes(cluster, tools, [])
          yield* idle(tools, w)
          yield* blocking.open
          yield* join(tools, blocking.fiber)
          assert.strictEqual(yield* cluster.stored("t"), 1)
        })
    )

    test("R13: a waiter interrupted while it queues leaves no queue entry", {}, (cluster, tools) =>
      Effect.gen(function* () {
        const holder = yield* cluster.worker()
        const w = yield* cluster.worker()
        const blocking = yield* blocker(tools, holder, "t")
        for (let i = 0; i < 5; i++) {
          const waiter = yield* Effect.forkChild(inc(w, "t"))
          yield* Effect.yieldNow
          yield* Fiber.interrupt(waiter)
        }
        yield* queueBecomes(cluster, tools, [])
        yield* idle(tools, w)
        yield* tools.quiet("t")
        deepStrictEqual(yield* cluster.store.queue("t"), [])
        yield* blocking.open
        yield* join(tools, blocking.fiber)
      })
    )

    // Interrupted at the later points of a wait: the lock handed to the waiter's worker and
    // not yet claimed, or its claim under way. Re-checks every second (a tenth of the lock
    // expiration, or half the hand-off timeout); what a grant or a lock left behind would
    // cost (the hand-off timeout, the lock expiration) is far beyond the 2 s `soon` allows.
    const releaseFake = (cluster: Cluster, id: string) =>
      cluster.store.releaseQueued("t", `${id}:1`, { instanceId: id })

    /** A worker `b` whose modification waits in the queue behind a fake holder `H`, with a fake `N` behind it. */
    const queuedBetweenFakes = (cluster: Cluster, tools: Tools) =>
      Effect.gen(function* () {
        const b = yield* cluster.worker()
        yield* holdFake(cluster, "t", "H")
        const waiter = yield* Effect.forkChild(inc(b, "t"))
        yield* queueBecomes(cluster, tools, [b.id])
        yield* queueFake(cluster, "t", "N")
        deepStrictEqual(yield* cluster.store.queue("t"), [b.id, "N"])
        yield* tools.quiet("t")
        return { b, waiter }
      })

    test(
      "a waiter interrupted while its worker's grant is pending, unclaimed: the grant passes to the next worker, and no entry is left",
      { lockExpiration: 10_000, handoffTimeout: 4_000, commandTimeout: 4_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const b = yield* cluster.worker()
          const c = yield* cluster.worker()
          yield* holdFake(cluster, "t", "H")
          const waiter = yield* Effect.forkChild(inc(b, "t"))
          yield* queueBecomes(cluster, tools, [b.id])
          const next = yield* Effect.forkChild(inc(c, "t", 10))
          yield* queueBecomes(cluster, tools, [b.id, c.id])
          deepStrictEqual(yield* cluster.store.queue("t"), [b.id, c.id])
          yield* tools.quiet("t")
          // H's release hands the lock to b, who does not hear of it before its only waiter is gone
          const heard = yield* cluster.handoffs.unheard("t", b, releaseFake(cluster, "H"))
          yield* Fiber.interrupt(waiter)
          yield* heard
          yield* soon(
            tools,
            "c's modification is done",
            Effect.map(
              Effect.sync(() => Option.fromNullishOr(next.pollUnsafe())),
              Option.isSome
            )
          )
          assert.strictEqual(yield* Fiber.join(next), 10)
          // three fences: H's, b's grant (never used), c's
          assert.strictEqual(yield* cluster.grants("t"), 3)
          assert.strictEqual(yield* cluster.stored("t"), 10)
          deepStrictEqual(yield* cluster.store.queue("t"), [])
          yield* idle(tools, b)
        })
    )

    test(
      "a claim whose reply is lost: the lock it took is released at once and handed to the next worker, and no entry is left",
      { lockExpiration: 20_000, handoffTimeout: 2_000, lockWarningThreshold: 10_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const { b, waiter } = yield* queuedBetweenFakes(cluster, tools)
          yield* cluster.handoffs.claimReplyLost("t", b, releaseFake(cluster, "H"))
          // memory: the notice lost, b's claim is its re-check, a second on (Redis: the
          // pause was waited out)
          if (backend.name === "memory") yield* tools.advance(1_100)
          // b's re-check took its grant over (H's fence, then b's grant's); the release of the
          // claim whose reply was lost handed the lock to N (the next fence)
          yield* lockBecomes(cluster, tools, "N:1")
          assert.strictEqual(yield* cluster.grants("t"), 3)
          assert.strictEqual((yield* failureOf(tools, waiter))._tag, "StoreUnavailable")
          deepStrictEqual(yield* cluster.store.queue("t"), [])
          yield* idle(tools, b)
          assert.strictEqual(yield* cluster.stored("t"), 0)
        })
    )

    // memory answers every step at once: a claim cannot be under way while a waiter leaves
    if (backend.name !== "memory") {
      test(
        "a waiter interrupted while its worker's claim is under way: the lock is released at once and handed to the next worker, and no entry is left",
        { lockExpiration: 20_000, handoffTimeout: 2_000, lockWarningThreshold: 10_000, commandTimeout: 5_000 },
        (cluster, tools) =>
          Effect.gen(function* () {
            const { b, waiter } = yield* queuedBetweenFakes(cluster, tools)
            const claimHeld = Option.getOrThrow(cluster.handoffs.claimHeld)
            yield* claimHeld("t", b, releaseFake(cluster, "H"), Fiber.interrupt(waiter))
            // b's claim took its grant over (H's fence, then b's grant's); the release of the
            // interrupted claim handed the lock to N (the next fence)
            yield* lockBecomes(cluster, tools, "N:1")
            assert.strictEqual(yield* cluster.grants("t"), 3)
            assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(waiter)))
            deepStrictEqual(yield* cluster.store.queue("t"), [])
            yield* idle(tools, b)
            assert.strictEqual(yield* cluster.stored("t"), 0)
          })
      )
    }

    // memory only: the store holds a notice back until the test delivers it
    if (backend.name === "memory") {
      test(
        "a Granted notice that arrives after its grant was claimed and released takes nothing: the queue's head gets the free lock",
        // re-checks every 700 ms; a grant pending for 2 s ends 5 ms before the waiter's re-check
        { lockExpiration: 7_000, handoffTimeout: 2_000, lockWarningThreshold: 5_000 },
        (cluster, tools) =>
          Effect.gen(function* () {
            const lateNotice = Option.getOrThrow(cluster.handoffs.lateNotice)
            const b = yield* cluster.worker()
            yield* holdFake(cluster, "t", "H")
            const gate = yield* Deferred.make<void>()
            const entered = yield* Deferred.make<void>()
            const first = yield* Effect.forkChild(held(b, "t", gate, entered))
            yield* queueBecomes(cluster, tools, [b.id])
            // H hands the lock to b, whose notice is held back: b's re-check claims the grant
            const deliver = yield* lateNotice("t", b, releaseFake(cluster, "H"))
            yield* tools.advance(700)
            yield* tools.until("b's claim", Deferred.isDone(entered))
            // X and Y queue behind b; b's release hands the lock to X, who never claims it
            yield* queueFake(cluster, "t", "X")
            yield* queueFake(cluster, "t", "Y")
            yield* Deferred.succeed(gate, undefined)
            yield* join(tools, first)
            yield* lockBecomes(cluster, tools, "X:1")
            // b waits again, behind Y
            const second = yield* Effect.forkChild(inc(b, "t"))
            yield* tools.until(
              "b queued behind Y",
              Effect.map(cluster.store.queue("t"), (ids) => ids.length === 2 && ids[0] === "Y" && ids[1] === b.id)
            )
            // X's grant expires: the lock is free, Y at the head, and b's re-check is 5 ms away
            // (a grant's remaining time + 5 ms)
            const pending = yield* cluster.store.holder("t")
            assert.isTrue(Option.isSome(pending))
            yield* tools.advance(Option.getOrThrow(pending).remainingMs)
            assert.strictEqual(yield* lockValue(cluster, "t"), undefined)
            deepStrictEqual(yield* cluster.store.queue("t"), ["Y", b.id])
            // now b hears of its first grant
            yield* deliver
            yield* tools.quiet("t")
            // b did not take the free lock ahead of Y (nor serve its waiter under it): its
            // attempt granted the lock to Y, and b waits behind
            assert.strictEqual(yield* cluster.stored("t"), 1)
            assert.strictEqual(yield* lockValue(cluster, "t"), "Y:1")
            deepStrictEqual(yield* cluster.store.queue("t"), [b.id])
            assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))))
            // Y leaves: its grant passes to b, whose waiter is served
            yield* cluster.store.leaveQueue("t", "Y")
            assert.strictEqual(yield* join(tools, second), 2)
            assert.strictEqual(yield* cluster.stored("t"), 2)
          })
      )
    }
  })

  describe("leases (oplock)", () => {
    test(
      "R3: m1 modifies twice with one grant; m2 breaks m1's lease and leases; closing m2 leaves the final state",
      // a hold time far above the bound: a lease that nobody broke would outlast it
      { ...oplock, leaseHoldTime: 30_000, lockExpiration: 60_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const m1 = yield* cluster.worker()
          const m2 = yield* cluster.worker()
          yield* inc(m1, "t")
          assert.isTrue(m1.lease.isLeased("t"))
          assert.strictEqual(yield* cluster.grants("t"), 1)
          yield* inc(m1, "t")
          assert.strictEqual(yield* cluster.grants("t"), 1)
          const contended = yield* Clock.currentTimeMillis
          yield* run(tools, inc(m2, "t"))
          // m2's contention ended m1's lease, not m1's hold time
          assert.isBelow((yield* Clock.currentTimeMillis) - contended, 3_000)
          assert.strictEqual(yield* cluster.grants("t"), 2)
          yield* tools.until(
            "m1's lease is over",
            Effect.sync(() => !m1.lease.isLeased("t"))
          )
          assert.isTrue(m2.lease.isLeased("t"))
          // batch durability: every acknowledged modification is stored already
          assert.strictEqual(yield* cluster.stored("t"), 3)
          yield* run(tools, m2.close)
          assert.strictEqual(yield* cluster.stored("t"), 3)
          assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
        })
    )

    test(
      "a lease given up before its second modification is not taken again for the lease hold time; one that served two is",
      { ...oplock, leaseHoldTime: 2_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const m1 = yield* cluster.worker()
          const m2 = yield* cluster.worker()
          const leaseOver = (w: Worker, label: string) =>
            tools.until(
              label,
              Effect.sync(() => !w.lease.isLeased("t"))
            )
          // one modification under m1's lease, then m2's breaks it and leases
          yield* inc(m1, "t")
          assert.isTrue(m1.lease.isLeased("t"))
          yield* run(tools, inc(m2, "t"))
          yield* leaseOver(m1, "m1's lease is over")
          assert.isTrue(m2.lease.isLeased("t"))
          // m1 breaks m2's lease (one modification too) and takes none: the lock is free after it
          yield* run(tools, inc(m1, "t"))
          assert.isFalse(m1.lease.isLeased("t"))
          yield* leaseOver(m2, "m2's lease is over")
          assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
          // neither leases it again: a grant for each modification, the lock free between them
          const grants = yield* cluster.grants("t")
          yield* run(tools, inc(m2, "t"))
          assert.isFalse(m2.lease.isLeased("t"))
          yield* run(tools, inc(m1, "t"))
          assert.isFalse(m1.lease.isLeased("t"))
          assert.strictEqual(yield* cluster.grants("t"), grants + 2)
          assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
          // once the lease hold time has passed, a modification leases the token again
          yield* tools.advance(2_001)
          yield* run(tools, inc(m1, "t"))
          assert.isTrue(m1.lease.isLeased("t"))
          // a lease that served two modifications before another worker broke it is taken again at once
          yield* inc(m1, "t")
          yield* run(tools, inc(m2, "t"))
          yield* leaseOver(m1, "m1's second lease is over")
          assert.isTrue(m2.lease.isLeased("t"))
          yield* run(tools, inc(m1, "t"))
          assert.isTrue(m1.lease.isLeased("t"))
          assert.strictEqual(yield* cluster.stored("t"), 9)
        })
    )

    for (const quantum of [2, 0]) {
      test(
        `R4 (quantum ${quantum}): m1 holds a modification while m2 starts two: 2 grants, 3 in the end`,
        { ...oplock, leaseQuantum: quantum, leaseDurability: "memory" },
        (cluster, tools) =>
          Effect.gen(function* () {
            const m1 = yield* cluster.worker()
            const m2 = yield* cluster.worker()
            const first = yield* blocker(tools, m1, "t")
            const a = yield* Effect.forkChild(inc(m2, "t"))
            const b = yield* Effect.forkChild(inc(m2, "t"))
            yield* tools.until(
              "m2 queued",
              Effect.map(cluster.store.queue("t"), (ids) => ids.includes(m2.id))
            )
            yield* first.open
            yield* join(tools, first.fiber)
            yield* join(tools, a)
            yield* join(tools, b)
            assert.strictEqual(yield* cluster.grants("t"), 2)
            // memory durability (as Reflex): m2's modifications live in its lease until it ends
            assert.strictEqual(yield* cluster.stored("t"), 1)
            yield* run(tools, m2.close)
            assert.strictEqual(yield* cluster.stored("t"), 3)
          })
      )

      test(
        `R5 (quantum ${quantum}): with m2 and m3 contending, exactly one leases and the other does a single update: 3 grants`,
        { ...oplock, leaseQuantum: quantum },
        (cluster, tools) =>
          Effect.gen(function* () {
            const m1 = yield* cluster.worker()
            const m2 = yield* cluster.worker()
            const m3 = yield* cluster.worker()
            const first = yield* blocker(tools, m1, "t")
            const b = yield* Effect.forkChild(inc(m2, "t"))
            const c = yield* Effect.forkChild(inc(m3, "t"))
            yield* tools.until(
              "m2 and m3 queued",
              Effect.map(cluster.store.queue("t"), (ids) => ids.length === 2)
            )
            yield* first.open
            yield* join(tools, first.fiber)
            yield* join(tools, b)
            yield* join(tools, c)
            assert.strictEqual(yield* cluster.grants("t"), 3)
            assert.strictEqual(Number(m2.lease.isLeased("t")) + Number(m3.lease.isLeased("t")), 1)
            assert.strictEqual(yield* cluster.stored("t"), 3)
          })
      )
    }

    test("R6: two workers racing: exactly one lease survives", oplock, (cluster, tools) =>
      Effect.gen(function* () {
        for (const gap of [0, 0, 100]) {
          const token = `race-${gap}-${Math.random().toString(36).slice(2, 8)}`
          const m1 = yield* cluster.worker()
          const m2 = yield* cluster.worker()
          const a = yield* Effect.forkChild(inc(m1, token))
          if (gap > 0) yield* tools.advance(gap)
          const b = yield* Effect.forkChild(inc(m2, token))
          yield* join(tools, a)
          yield* join(tools, b)
          yield* tools.until(
            "one lease left",
            Effect.sync(() => Number(m1.lease.isLeased(token)) + Number(m2.lease.isLeased(token)) === 1)
          )
          assert.strictEqual(yield* cluster.stored(token), 2)
          yield* run(tools, m1.close)
          yield* run(tools, m2.close)
        }
      })
    )

    test(
      "R7: contention the moment a lease starts: the modification completes as a single update",
      oplock,
      (cluster, tools) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          const fiber = yield* blocker(tools, w, "t")
          // another worker queues behind the lease the moment it starts
          yield* queueFake(cluster, "t", "another-instance")
          yield* fiber.open
          assert.strictEqual(yield* join(tools, fiber.fiber), 1)
          // w released: its release handed the lock to the queued worker (the lock id it queued
          // under, which nobody uses)
          yield* tools.until(
            "the lock is handed to the queued worker",
            Effect.map(cluster.store.holder("t"), (holder) =>
              Option.exists(holder, (h) => h.lockId === "another-instance:1")
            )
          )
          assert.isFalse(w.lease.isLeased("t"))
          // two fences: w's grant, then the hand-off's
          assert.strictEqual(yield* cluster.grants("t"), 2)
          assert.strictEqual(yield* cluster.stored("t"), 1)
          // the queued worker leaves: the lock is free
          yield* cluster.store.leaveQueue("t", "another-instance")
          assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
        })
    )

    test(
      "closing a worker during a leased modification lets it finish, writes it and releases",
      { ...oplock, leaseDurability: "memory" },
      (cluster, tools) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          yield* inc(w, "t")
          yield* inc(w, "t")
          const fiber = yield* blocker(tools, w, "t")
          const closing = yield* Effect.forkChild(w.close)
          // the close is under way, and waits for the modification
          yield* tools.quiet("t")
          yield* fiber.open
          assert.strictEqual(yield* join(tools, fiber.fiber), 3)
          yield* join(tools, closing)
          assert.strictEqual(yield* cluster.stored("t"), 3)
          assert.isTrue(Option.isNone(yield* cluster.store.holder("t")))
          assert.strictEqual(yield* cluster.grants("t"), 1)
        })
    )

    test("R8: slices are fetched into a leased cache when first needed", oplock, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        yield* inc(w, "t")
        yield* w.states.modify("t", Other, () => [null, { s: "b" }])
        yield* inc(w, "t")
        assert.strictEqual(yield* cluster.grants("t"), 1)
        deepStrictEqual(yield* w.states.get("t", Other), { s: "b" })
        assert.strictEqual(yield* cluster.stored("t"), 2)
      })
    )

    test(
      "R9: a lease broken while a modification outlives the lock expiration: extended, no error",
      { ...oplock, lockExpiration: 300, lockWarningThreshold: 200, leaseHoldTime: 250 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const m1 = yield* cluster.worker()
          const m2 = yield* cluster.worker()
          const slow = yield* blocker(tools, m1, "t")
          const other = yield* Effect.forkChild(inc(m2, "t"))
          for (let i = 0; i < 8; i++) yield* tools.advance(60)
          yield* slow.open
          assert.strictEqual(yield* join(tools, slow.fiber), 1)
          assert.strictEqual(yield* join(tools, other), 2)
          assert.strictEqual(yield* cluster.grants("t"), 2)
        })
    )

    test(
      "R11: after one of R's two waiters finishes, the other is not passed over by H's next lease",
      { ...oplock, lockExpiration: 20_000, lockWarningThreshold: 10_000 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const h = yield* cluster.worker()
          const r = yield* cluster.worker()
          yield* inc(h, "t")
          assert.isTrue(h.lease.isLeased("t"))
          const gate = yield* Deferred.make<void>()
          const entered = yield* Deferred.make<void>()
          const r1 = yield* Effect.forkChild(held(r, "t", gate, entered))
          const r2 = yield* Effect.forkChild(inc(r, "t"))
          yield* tools.until("the modification entered", Deferred.isDone(entered))
          const hNext = yield* Effect.forkChild(inc(h, "t"))
          yield* tools.until(
            "h queued behind r",
            Effect.map(cluster.store.queue("t"), (ids) => ids.includes(h.id))
          )
          yield* Deferred.succeed(gate, undefined)
          yield* join(tools, r1)
          yield* tools.until(
            "r's second waiter finished",
            Effect.map(
              Effect.sync(() => Option.fromNullishOr(r2.pollUnsafe())),
              Option.isSome
            )
          )
          yield* join(tools, hNext)
          assert.strictEqual(yield* cluster.stored("t"), 4)
        })
    )

    test("a leased modification is acknowledged only once written (batch durability)", oplock, (cluster) =>
      Effect.gen(function* () {
        const w = yield* cluster.worker()
        for (let i = 1; i <= 5; i++) {
          yield* inc(w, "t")
          assert.strictEqual(yield* cluster.stored("t"), i)
        }
        assert.strictEqual(yield* cluster.grants("t"), 1)
      })
    )

    test(
      "a failed flush: the lease's modifications fail, it is logged and counted, the next holder reads the last write",
      oplock,
      (cluster, tools) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          yield* inc(w, "t")
          assert.isTrue(w.lease.isLeased("t"))
          const failuresBefore = (yield* Metric.value(Lease.flushFailures)).count
          const warningsBefore = atLevels(cluster.logs, ["WARN"]).length
          // the lease's lock is taken away behind its back
          const holder = Option.getOrThrow(yield* cluster.store.holder("t"))
          assert.isTrue((yield* cluster.store.release("t", holder.lockId)).released)
          const error = yield* Effect.flip(run(tools, inc(w, "t")))
          assert.strictEqual(error._tag, "LockExpired")
          assert.strictEqual((yield* Metric.value(Lease.flushFailures)).count, failuresBefore + 1)
          const warnings = atLevels(cluster.logs, ["WARN"]).slice(warningsBefore)
          assert.isTrue(
            warnings.some((line) => line.message.includes("writing the leased modifications of token t failed"))
          )
          assert.strictEqual(yield* cluster.stored("t"), 1)
          yield* tools.until(
            "the lease is over",
            Effect.sync(() => !w.lease.isLeased("t"))
          )
          // a new grant reads what was last written
          assert.strictEqual(yield* run(tools, inc(w, "t")), 2)
        })
    )

    test(
      "a lease ends after its hold time and the lock is released",
      { ...oplock, lockExpiration: 1_000, leaseHoldTime: 200, lockWarningThreshold: 500 },
      (cluster, tools) =>
        Effect.gen(function* () {
          const w = yield* cluster.worker()
          yield* inc(w, "t")
          assert.isTrue(w.lease.isLeased("t"))
          yield* tools.advance(250)
          yield* tools.until(
            "the lease ended",
            Effect.sync(() => !w.lease.isLeased("t"))
          )
          yield* tools.until("the lock is free", Effect.map(cluster.store.holder("t"), Option.isNone))
          assert.strictEqual(yield* w.lease.sessions, 0)
        })
    )
  })
}
