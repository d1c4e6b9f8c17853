/**
 * Workers behind Sentinel through a failover: modifications that run while the primary is
 * SIGKILLed go on once a replica is promoted; the writes the replicas never had are lost,
 * as asynchronous replication allows; the socket records such a loss took are written back
 * by their workers, and updates reach the sockets again.
 *
 * One deployment serves the whole file; each test has its own key prefix.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { decodeSocketRecord } from "../src/internal/codec.js"
import { makeKeys } from "../src/internal/keys.js"
import { redisWorkersOn, update } from "./delivery/workers.js"
import { Counter, holding, redisSentinelWorkers, type Worker } from "./state/workers.js"
import { succeedsReal, untilReal } from "./support/poll.js"
import * as RedisSentinel from "./support/RedisSentinel.js"
import * as RedisServer from "./support/RedisServer.js"
import { settle } from "./support/testClock.js"

const deployments = RedisSentinel.shared()
afterAll(deployments.close, 60_000)

let testCount = 0

const inc = (w: Worker, token: string) => w.states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }])

const healthy = (workers: ReadonlyArray<{ readonly health: { readonly healthy: Effect.Effect<boolean> } }>) =>
  untilReal(
    "every loop of every worker running",
    Effect.map(
      Effect.forEach(workers, (w) => w.health.healthy),
      (all) => all.every(Boolean)
    ),
    { within: 20_000 }
  )

/**
 * Five modifications of `tok`, replicated; then one more, whose commit no replica can take
 * as it is written, and a failover to replica A. B is frozen and cut off first, and stays so
 * until A is promoted: it never has the commit, and is never promoted. The modification
 * takes the lock with A linked, then holds it while A is frozen and cut off too (linked, A
 * would receive the commit within microseconds whether or not anything waited for it); A is
 * thawed, and takes the commit from the primary's backlog, only if the modification waits
 * for a replica's acknowledgement (a `WAIT` blocked on the primary), and frozen again right
 * after the acknowledgement, before the primary is SIGKILLed.
 */
/** One turn of the event loop. */
const macrotask = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/** Turns of the fibers and of the event loop: what this process has to do without I/O, it has done. */
const processTurns = Effect.forEach(Array.from({ length: 10 }), () => Effect.andThen(settle, macrotask), {
  discard: true
})

const acknowledgedThenFailover = (minReplicasAck: 0 | 1) =>
  Effect.gen(function* () {
    const sentinel = yield* deployments.get
    const cluster = yield* redisSentinelWorkers(sentinel, {
      keyPrefix: `fo${++testCount}`,
      commandTimeout: 1_000,
      minReplicasAck,
      // A thawed links again at its next replication tick (each second); below the lock expiration
      replicaAckTimeout: 6_000
    })
    const w = yield* cluster.worker()
    for (let i = 0; i < 5; i++) yield* inc(w, "tok")
    yield* sentinel.awaitReplicated
    const primary = yield* sentinel.primary
    const [a, b] = yield* sentinel.replicas
    assert.isDefined(b)
    // a frozen replica's socket would still take writes into its kernel buffer: cut the links
    const cutOff = Effect.orDie(primary.command("CLIENT", "KILL", "TYPE", "replica"))
    yield* b!.pause
    yield* cutOff
    yield* untilReal("A linked again", sentinel.linked(a!), { within: 20_000 })
    const { fiber: modification, open } = yield* holding(w, "tok")
    yield* a!.pause
    yield* cutOff
    yield* open
    const waiting = yield* succeedsReal(
      "the modification acknowledged, or waiting for a replica",
      Effect.flatMap(
        Effect.sync(() => Option.fromNullishOr(modification.pollUnsafe())),
        (done) =>
          Option.isSome(done)
            ? Effect.succeed(false)
            : Effect.filterOrFail(
                Effect.map(sentinel.blockedInWait(primary), (blocked) => blocked > 0),
                (blocked) => blocked,
                () => "neither yet"
              )
      ),
      { within: 20_000 }
    )
    // A commit acknowledged on its own reply, its WAIT sent after it but not awaited, is
    // acknowledged within a moment of that WAIT: look again once that moment is over. The
    // server sent the commit's reply before the WAIT blocked, so before it answers this
    // round trip of another connection: the reply is in this process when it returns, and
    // what follows of it here needs no I/O, only the fibers' turns.
    yield* sentinel.blockedInWait(primary)
    yield* processTurns
    const waited =
      waiting &&
      Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(modification.pollUnsafe()))) &&
      (yield* sentinel.blockedInWait(primary)) > 0
    if (waited) yield* a!.resume
    yield* Fiber.join(modification)
    yield* a!.pause
    const { old } = yield* sentinel.failoverTo(a!)
    yield* Effect.addFinalizer(() => sentinel.rejoin(old))
    const stored = yield* cluster.stored("tok")
    const next = yield* succeedsReal("a modification after the promotion", inc(w, "tok"), { within: 20_000 })
    return { waited, stored, next }
  })

describe("state across a failover", () => {
  it.live(
    "a primary SIGKILLed while two workers modify a token: the modifications fail meanwhile, then go on, one after another",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* deployments.get
        const cluster = yield* redisSentinelWorkers(sentinel, { keyPrefix: `fo${++testCount}`, commandTimeout: 1_000 })
        const workers = [yield* cluster.worker(), yield* cluster.worker()]
        for (let i = 0; i < 10; i++) yield* inc(workers[i % 2]!, "tok")
        yield* sentinel.awaitReplicated

        let promotedAt: number | undefined
        const outcomes: Array<{ readonly at: number; readonly ok: boolean }> = []
        const loops = yield* Effect.forEach(workers, (w) =>
          Effect.forkChild(
            Effect.forever(
              Effect.result(inc(w, "tok")).pipe(
                Effect.tap((result) =>
                  Effect.sync(() => outcomes.push({ at: performance.now(), ok: Result.isSuccess(result) }))
                ),
                Effect.tap(Effect.sleep(5))
              )
            )
          )
        )
        yield* untilReal(
          "modifications under way",
          Effect.sync(() => outcomes.filter((o) => o.ok).length >= 5),
          { within: 5_000 }
        )
        const { old } = yield* sentinel.failover("kill")
        yield* Effect.addFinalizer(() => sentinel.rejoin(old))
        promotedAt = performance.now()
        yield* untilReal(
          "20 modifications after the promotion",
          Effect.sync(() => outcomes.filter((o) => o.ok && o.at > promotedAt!).length >= 20),
          { within: 30_000 }
        )
        yield* Effect.forEach(loops, Fiber.interrupt)
        assert.isTrue(
          outcomes.some((o) => !o.ok),
          "no modification failed: the primary was not killed mid-run"
        )
        // one after another again, each seeing the one before
        const seen: Array<number> = []
        for (let i = 0; i < 10; i++) seen.push(yield* inc(workers[i % 2]!, "tok"))
        deepStrictEqual(
          seen,
          seen.map((_, i) => seen[0]! + i)
        )
        assert.isAtLeast(seen[0]!, 11, "the replicated modifications are kept")
        assert.strictEqual(yield* cluster.stored("tok"), seen[9]!)
        yield* healthy(workers)
      }),
    120_000
  )

  it.live(
    "what the replicas never had is lost with the primary: acknowledged modifications and their grants' fences",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* deployments.get
        const cluster = yield* redisSentinelWorkers(sentinel, { keyPrefix: `fo${++testCount}`, commandTimeout: 1_000 })
        const w = yield* cluster.worker()
        for (let i = 0; i < 5; i++) yield* inc(w, "tok")
        yield* sentinel.awaitReplicated
        const grantsBefore = yield* cluster.grants("tok")

        const { old, value: acknowledged } = yield* sentinel.failoverLosing(
          Effect.forEach([1, 2, 3], () => inc(w, "tok"))
        )
        yield* Effect.addFinalizer(() => sentinel.rejoin(old))
        deepStrictEqual(acknowledged, [6, 7, 8])
        // the next modification starts from what was replicated: 6 again, under a fence
        // number that was handed out before
        assert.strictEqual(
          yield* succeedsReal("a modification after the promotion", inc(w, "tok"), { within: 20_000 }),
          6
        )
        assert.strictEqual(yield* cluster.grants("tok"), grantsBefore + 1)
        assert.strictEqual(yield* cluster.stored("tok"), 6)
      }),
    120_000
  )

  it.live(
    "with minReplicasAck 1 what the replicas never had is not acknowledged: NotAcknowledged instead of a silent loss",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* deployments.get
        const cluster = yield* redisSentinelWorkers(sentinel, {
          keyPrefix: `fo${++testCount}`,
          commandTimeout: 1_000,
          minReplicasAck: 1,
          replicaAckTimeout: 1_000
        })
        const w = yield* cluster.worker()
        for (let i = 0; i < 5; i++) yield* inc(w, "tok")
        // One replica had each of them when it returned; the promise holds whichever of the
        // two Sentinel promotes once both have them.
        yield* sentinel.awaitReplicated

        const { old, value: outcomes } = yield* sentinel.failoverLosing(
          Effect.forEach([1, 2, 3], () => Effect.result(inc(w, "tok")))
        )
        yield* Effect.addFinalizer(() => sentinel.rejoin(old))
        deepStrictEqual(
          outcomes.map((outcome) =>
            Result.isFailure(outcome) ? outcome.failure._tag : `acknowledged ${outcome.success}`
          ),
          ["NotAcknowledged", "NotAcknowledged", "NotAcknowledged"]
        )
        // every modification acknowledged is kept: the next one follows the fifth
        assert.strictEqual(
          yield* succeedsReal("a modification after the promotion", inc(w, "tok"), { within: 20_000 }),
          6
        )
        assert.strictEqual(yield* cluster.stored("tok"), 6)
        assert.strictEqual(yield* inc(w, "tok"), 7)
      }),
    120_000
  )
})

describe("an acknowledged modification across a failover to the replica that had it last", () => {
  it.live(
    "with minReplicasAck 1 it waits for the one replica that can take it, and is kept once that replica is promoted",
    () =>
      Effect.gen(function* () {
        const outcome = yield* acknowledgedThenFailover(1)
        deepStrictEqual(outcome, { waited: true, stored: 6, next: 7 })
      }),
    120_000
  )

  it.live(
    "with minReplicasAck 0 it is acknowledged while no replica has it, and lost when one is promoted",
    () =>
      Effect.gen(function* () {
        const outcome = yield* acknowledgedThenFailover(0)
        deepStrictEqual(outcome, { waited: false, stored: 5, next: 6 })
      }),
    120_000
  )
})

describe("tokens and mailboxes across a failover", () => {
  it.live(
    "a socket record the promoted replica never had is written back by its worker, and updates reach both sockets again",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* deployments.get
        const keyPrefix = `fo${++testCount}`
        const keys = makeKeys(keyPrefix)
        const fx = yield* redisWorkersOn(
          { sentinels: sentinel.addresses, sentinelName: sentinel.name },
          { keyPrefix, retryDelayInitial: 50, retryDelayMax: 500 }
        )
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "sent")
        yield* untilReal(
          "A receives 1",
          Effect.sync(() => a.received.length === 1),
          { within: 10_000 }
        )
        yield* sentinel.awaitReplicated

        const { old, promoted } = yield* sentinel.failoverLosing(a.tokens.link("token2", "sid2"))
        yield* Effect.addFinalizer(() => sentinel.rejoin(old))
        const record = yield* succeedsReal(
          "token2's record back on the new primary",
          Effect.flatMap(RedisServer.getRaw(promoted, keys.socket("token2")), (raw) =>
            Option.match(raw, { onNone: () => Effect.fail("missing"), onSome: Effect.succeed })
          ),
          { within: 20_000 }
        )
        deepStrictEqual(
          decodeSocketRecord(keys.socket("token2"), record),
          Result.succeed({ instanceId: a.id, connectionId: "sid2" })
        )
        yield* healthy([a, b])
        yield* b.mailbox.send("token2", update(2))
        yield* b.mailbox.send("token1", update(3))
        yield* untilReal(
          "A receives 2 and 3",
          Effect.sync(() => a.received.length === 3),
          { within: 20_000 }
        )
        deepStrictEqual(
          a.received.map(([token, value]) => [token, value.n]),
          [
            ["token1", 1],
            ["token2", 2],
            ["token1", 3]
          ]
        )
      }),
    120_000
  )
})
