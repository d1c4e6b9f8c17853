/**
 * `minReplicasAck` on a real primary with one real replica: a modification returns only
 * once the replica has it; a replica that does not answer makes it fail with
 * `NotAcknowledged` within the acknowledgement timeout while the shared command
 * connection goes on answering; the WAITs are shared by the steps sent together; with 0
 * nothing changes (no acknowledged connection, no WAIT). And the store conformance suite
 * with `minReplicasAck` 1.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Scope from "effect/Scope"
import { makeKeys } from "../src/internal/keys.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { Store } from "../src/Store.js"
import type { Backend, Fixture } from "./conformance/backend.js"
import { onServer } from "./conformance/onServer.js"
import { storeSuite } from "./conformance/storeSuite.js"
import { redisWorkers, update } from "./delivery/workers.js"
import { Counter, redisWorkersAt, type Worker } from "./state/workers.js"
import { untilReal } from "./support/poll.js"
import * as RedisServer from "./support/RedisServer.js"
import { caughtUp, replicated, startReplica } from "./support/replica.js"

const inc = (w: Worker, token: string) => w.states.modify(token, Counter, (s) => [s.n + 1, { n: s.n + 1 }])

/** The replica acknowledges writes (a write, then its acknowledgement). */
const acknowledging = caughtUp

/** The counter as a server holds it (0 when missing). */
const counterOn = (server: RedisServer.RedisServer, key: string) =>
  Effect.map(RedisServer.getRaw(server, key), (raw) =>
    Option.match(raw, { onNone: () => 0, onSome: (text) => (JSON.parse(text) as { n: number }).n })
  )

/** The calls of some commands so far (`INFO commandstats`). */
const calls = (server: RedisServer.RedisServer, ...commands: ReadonlyArray<string>) =>
  Effect.map(Effect.orDie(server.info("commandstats")), (stats) =>
    RedisServer.commandCalls(stats, (name) => !commands.some((command) => name === `cmdstat_${command}`))
  )

/** The store's connections of one role on a server. */
const connections = (server: RedisServer.RedisServer, role: string) =>
  Effect.map(
    Effect.orDie(server.command("CLIENT", "LIST")),
    (list) =>
      String(list)
        .split("\n")
        .filter((line) => line.includes(`name=leasehold:${role}`)).length
  )

describe("RedisStore with minReplicasAck", () => {
  it.live(
    "1: a modification returns once the replica has it; while the replica is frozen it waits",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const cluster = yield* redisWorkersAt(primary, { minReplicasAck: 1, replicaAckTimeout: 8_000 })
        const w = yield* cluster.worker()
        const key = cluster.keys.slice("tok", "counter")
        for (let i = 1; i <= 5; i++) {
          assert.strictEqual(yield* inc(w, "tok"), i)
          assert.strictEqual(yield* counterOn(replica, key), i, `the replica has modification ${i} when it returns`)
        }
        // one for the test's store, one for the worker's
        assert.strictEqual(yield* connections(primary, "acknowledged"), 2)

        yield* replica.pause
        const fiber = yield* Effect.forkChild(inc(w, "tok"))
        yield* Effect.sleep(1_000)
        const early = yield* Effect.sync(() => Option.fromNullishOr(fiber.pollUnsafe()))
        yield* replica.resume
        assert.isTrue(Option.isNone(early), "the modification returned while the replica was frozen")
        assert.strictEqual(yield* Fiber.join(fiber), 6)
        assert.strictEqual(yield* counterOn(replica, key), 6)
      }),
    60_000
  )

  it.live(
    "a frozen replica: NotAcknowledged within the timeout, and the command connection answers meanwhile",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const cluster = yield* redisWorkersAt(primary, { minReplicasAck: 1, replicaAckTimeout: 1_500 })
        const w = yield* cluster.worker()
        // another token: the first modification of "tok" on this worker takes a grant
        assert.strictEqual(yield* inc(w, "warm"), 1)

        yield* replica.pause
        const started = performance.now()
        const fiber = yield* Effect.forkChild(Effect.result(inc(w, "tok")))
        // the grant is sent, and its WAIT blocks the acknowledged connection
        yield* Effect.sleep(300)
        const readStarted = performance.now()
        assert.strictEqual((yield* w.states.get("tok", Counter)).n, 0)
        assert.isTrue(Option.isSome(yield* cluster.store.holder("tok")), "the grant is made on the primary")
        yield* cluster.store.readSlices("other", ["counter"])
        const readMs = performance.now() - readStarted
        const during = yield* Effect.sync(() => Option.fromNullishOr(fiber.pollUnsafe()))
        assert.isTrue(
          Option.isNone(during),
          `the reads (${Math.round(readMs)} ms) waited until the modification was over: the command connection was stalled`
        )

        const result = yield* Fiber.join(fiber)
        const elapsed = performance.now() - started
        yield* replica.resume
        assert.isTrue(Result.isFailure(result), "the modification succeeded without its replica")
        if (Result.isFailure(result)) {
          const error = result.failure
          assert.strictEqual(error._tag, "NotAcknowledged", error.message)
          if (error._tag === "NotAcknowledged") {
            deepStrictEqual(
              { acknowledged: error.acknowledged, required: error.required, timeoutMs: error.timeoutMs },
              { acknowledged: 0, required: 1, timeoutMs: 1_500 }
            )
            assert.include(error.message, "outcome is unknown")
          }
        }
        assert.isAtLeast(elapsed, 1_400, "failed before the acknowledgement timeout")
        assert.isBelow(elapsed, 1_500 + 5_000, "failed long after the acknowledgement timeout")
        // the grant that was not acknowledged was released: the next modification goes on at once
        assert.strictEqual(yield* inc(w, "tok"), 1)
        assert.strictEqual(yield* counterOn(replica, cluster.keys.slice("tok", "counter")), 1)
      }),
    60_000
  )

  it.live(
    "a step written after its batch's WAIT (a script resent after NOSCRIPT) waits for a WAIT of its own",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const cluster = yield* redisWorkersAt(primary, { minReplicasAck: 1, replicaAckTimeout: 1_000 })
        assert.strictEqual((yield* cluster.store.tryAcquire("tok", "lock-1", []))._tag, "Acquired")
        // The scripts forgotten, as on a primary just promoted: ioredis sends a script as
        // EVAL once its EVALSHA is refused, after the WAIT that followed the EVALSHA, which
        // finds nothing new to wait for.
        yield* Effect.orDie(primary.command("SCRIPT", "FLUSH"))
        yield* caughtUp(primary)
        yield* replica.pause
        const result = yield* Effect.result(cluster.store.tryAcquire("tok2", "lock-2", []))
        yield* replica.resume
        assert.isTrue(Result.isFailure(result) && result.failure._tag === "NotAcknowledged", JSON.stringify(result))
        assert.isTrue(Option.isSome(yield* RedisServer.getRaw(primary, cluster.keys.lock("tok2"))))
      }),
    60_000
  )

  it.live(
    "a server demoted between a step and its WAIT (WAIT refused on a replica): NotAcknowledged, not StoreRefused",
    () =>
      Effect.gen(function* () {
        const { primary } = yield* replicated
        // A replica that takes writes stands for a primary a failover has just demoted: the
        // step is written, and its WAIT is refused ("cannot be used with replica instances").
        const demoted = yield* startReplica(primary, ["--replica-read-only", "no"])
        const cluster = yield* redisWorkersAt(demoted, { minReplicasAck: 1, replicaAckTimeout: 1_000 })
        const result = yield* Effect.result(cluster.store.tryAcquire("tok", "lock-1", []))
        assert.isTrue(Result.isFailure(result), "acknowledged on a replica")
        if (Result.isFailure(result)) {
          const error = result.failure
          assert.strictEqual(error._tag, "NotAcknowledged", error.message)
          if (error._tag === "NotAcknowledged") {
            deepStrictEqual(
              { acknowledged: error.acknowledged, required: error.required },
              { acknowledged: 0, required: 1 }
            )
          }
        }
        assert.isTrue(
          Option.isSome(yield* RedisServer.getRaw(demoted, cluster.keys.lock("tok"))),
          "the step was written"
        )
      }),
    60_000
  )

  it.live(
    "a step whose reply comes before its WAIT's is covered by that WAIT: one WAIT per step, one after the other",
    () =>
      Effect.gen(function* () {
        const { primary } = yield* replicated
        const cluster = yield* redisWorkersAt(primary, { minReplicasAck: 1 })
        const w = yield* cluster.worker()
        assert.strictEqual(yield* inc(w, "tok"), 1)
        const before = yield* calls(primary, "wait")
        const steps = yield* calls(primary, "evalsha", "eval")
        for (let i = 2; i <= 41; i++) assert.strictEqual(yield* inc(w, "tok"), i)
        const waits = (yield* calls(primary, "wait")) - before
        const scripts = (yield* calls(primary, "evalsha", "eval")) - steps
        // after the first modification's grant and commit, each is one step (commitIfUnchanged)
        assert.strictEqual(scripts, 40, "one step per modification")
        // a step taken for one written after its WAIT waits for a WAIT more
        assert.isAtMost(waits, scripts, `${waits} WAITs for ${scripts} steps sent one after the other`)
      }),
    60_000
  )

  it.live(
    "a modification in one step not acknowledged fails, and is not undone: the next one reads it",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const cluster = yield* redisWorkersAt(primary, { minReplicasAck: 1, replicaAckTimeout: 1_000 })
        const w = yield* cluster.worker()
        assert.strictEqual(yield* inc(w, "tok"), 1)
        yield* replica.pause
        const result = yield* Effect.result(inc(w, "tok"))
        yield* replica.resume
        assert.isTrue(Result.isFailure(result) && result.failure._tag === "NotAcknowledged", String(result))
        if (Result.isFailure(result) && result.failure._tag === "NotAcknowledged") {
          assert.strictEqual(result.failure.operation, "commitIfUnchanged")
        }
        assert.strictEqual(yield* cluster.stored("tok"), 2)
        assert.strictEqual(yield* inc(w, "tok"), 3)
        yield* untilReal(
          "the replica catches up",
          Effect.map(counterOn(replica, cluster.keys.slice("tok", "counter")), (n) => n === 3),
          { within: 10_000 }
        )
      }),
    60_000
  )

  it.live(
    "a commit not acknowledged fails, and is not undone: its outcome is unknown",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const cluster = yield* redisWorkersAt(primary, { minReplicasAck: 1, replicaAckTimeout: 1_000 })
        const w = yield* cluster.worker()
        assert.strictEqual(yield* inc(w, "tok"), 1)
        // the grant is acknowledged; the replica freezes before the commit
        const result = yield* Effect.result(
          w.states.modifyEffect("tok", Counter, (s) => Effect.as(replica.pause, [s.n + 1, { n: s.n + 1 }] as const))
        )
        yield* replica.resume
        assert.isTrue(Result.isFailure(result) && result.failure._tag === "NotAcknowledged", String(result))
        if (Result.isFailure(result) && result.failure._tag === "NotAcknowledged") {
          assert.strictEqual(result.failure.operation, "commitAndReleaseQueued")
        }
        // made on the primary, and the replica catches up: here the change stays
        assert.strictEqual(yield* cluster.stored("tok"), 2)
        yield* untilReal(
          "the replica catches up",
          Effect.map(counterOn(replica, cluster.keys.slice("tok", "counter")), (n) => n === 2),
          { within: 10_000 }
        )
        assert.strictEqual(yield* inc(w, "tok"), 3)
      }),
    60_000
  )

  it.live(
    "the steps sent together share one WAIT; with 0 there is no WAIT and no acknowledged connection",
    () =>
      Effect.gen(function* () {
        const { primary } = yield* replicated
        const acknowledged = yield* redisWorkersAt(primary, { keyPrefix: "ack", minReplicasAck: 1 })
        const w = yield* acknowledged.worker()
        const tokens = Array.from({ length: 40 }, (_, i) => `t${i}`)
        const before = yield* calls(primary, "wait")
        const steps = yield* calls(primary, "evalsha", "eval")
        deepStrictEqual(
          yield* Effect.forEach(tokens, (token) => inc(w, token), { concurrency: "unbounded" }),
          tokens.map(() => 1)
        )
        const waits = (yield* calls(primary, "wait")) - before
        const scripts = (yield* calls(primary, "evalsha", "eval")) - steps
        assert.isAtLeast(scripts, 80, "a grant and a commit per modification")
        assert.isAtLeast(waits, 2)
        assert.isBelow(waits, 40, `${waits} WAITs for ${scripts} steps: each step had its own`)

        const plain = yield* redisWorkersAt(primary, { keyPrefix: "plain" })
        const p = yield* plain.worker()
        const waitsBefore = yield* calls(primary, "wait")
        for (let i = 1; i <= 5; i++) assert.strictEqual(yield* inc(p, "tok"), i)
        assert.strictEqual((yield* calls(primary, "wait")) - waitsBefore, 0)
        // the first fixture's acknowledged connections (its test's store's and its worker's),
        // and none of the second's
        assert.strictEqual(yield* connections(primary, "acknowledged"), 2)
      }),
    60_000
  )

  it.live(
    "an update for another worker's socket is sent once the replica has it; while the replica is frozen it waits in the outbox, and arrives once",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const fx = yield* redisWorkers(primary.url, {
          minReplicasAck: 1,
          replicaAckTimeout: 1_000,
          retryDelayInitial: 50,
          retryDelayMax: 200
        })
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* a.tokens.link("token1", "sid1")
        const mailbox = makeKeys("leasehold").mailbox(a.id)
        const length = (server: RedisServer.RedisServer) =>
          Effect.map(Effect.orDie(server.command("XLEN", mailbox)), Number)
        assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "sent")
        assert.strictEqual(yield* length(replica), 1, "the replica has the update when send returns")

        yield* replica.pause
        const started = performance.now()
        const outcome = yield* b.mailbox.send("token1", update(2))
        const elapsed = performance.now() - started
        // appended on the primary, not acknowledged: kept to be appended again
        assert.strictEqual(outcome, "buffered")
        assert.isAtLeast(elapsed, 900, `send returned after ${elapsed} ms, before the acknowledgement timeout`)
        yield* Effect.sleep(1_500)
        yield* replica.resume
        // appended again once the replica acknowledges: a copy that A's reader drops
        yield* untilReal(
          "the outbox appends again",
          Effect.map(length(primary), (n) => n >= 3),
          { within: 20_000 }
        )
        yield* untilReal(
          "A receives the update",
          Effect.sync(() => a.received.length >= 2),
          { within: 10_000 }
        )
        yield* Effect.sleep(500)
        deepStrictEqual(
          a.received.map(([token, u]) => [token, u.n]),
          [
            ["token1", 1],
            ["token1", 2]
          ]
        )
      }),
    60_000
  )
})

const LOCK_EXPIRATION_MS = 600
/**
 * Short, so that a test of an unclaimed grant waits little (in real time), and long enough
 * for a release and the grantee's next commands on a loaded machine (each write here waits
 * for the replica: a 150 ms grant ran out under the suite's load).
 */
const HANDOFF_TIMEOUT_MS = 300
const COMMAND_TIMEOUT_MS = 500

/** Commands that do not touch data: the harness's own, the replica's, and the WAITs. */
const uncounted = new Set(["cmdstat_ping", "cmdstat_info", "cmdstat_wait", "cmdstat_replconf", "cmdstat_psync"])

let testCount = 0

/**
 * One primary with its replica for the whole conformance suite (each test starting its own
 * pair would wait for a first sync every time): every test begins on an empty database that
 * the replica has caught up with, under a key prefix of its own.
 */
const sharedScope = Effect.runSync(Scope.make())
afterAll(() => Effect.runPromise(Scope.close(sharedScope, Exit.void)))
let sharedPair: Promise<Effect.Success<typeof replicated>> | undefined
const shared = Effect.promise(() => {
  sharedPair ??= Effect.runPromise(Scope.provide(replicated, sharedScope))
  return sharedPair
})

/** The conformance suite's backend: a primary with a replica, every promise-carrying step acknowledged by it. */
const acknowledgedRedis: Backend = {
  name: "redis",
  canHang: true,
  test: (name, body) =>
    it.live(name, () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* shared
        yield* Effect.orDie(primary.command("FLUSHALL"))
        yield* caughtUp(primary)
        const linked = untilReal(
          "the replica linked again",
          Effect.map(Effect.orDie(replica.info("replication")), (info) => info.master_link_status === "up"),
          { within: 20_000 }
        )
        const keyPrefix = `ack${++testCount}`
        const config = LeaseholdConfig.layer({
          keyPrefix,
          lockExpiration: LOCK_EXPIRATION_MS,
          handoffTimeout: HANDOFF_TIMEOUT_MS,
          lockWarningThreshold: 100,
          commandTimeout: COMMAND_TIMEOUT_MS,
          connectTimeout: COMMAND_TIMEOUT_MS,
          minReplicasAck: 1,
          // as long as the suite's short lock allows: a loaded machine's replica may take 150 ms
          replicaAckTimeout: LOCK_EXPIRATION_MS - 10
        })
        const context = yield* Layer.build(RedisStore.layer({ url: primary.url }).pipe(Layer.provide(config))).pipe(
          Effect.orDie
        )
        const fixture: Fixture = {
          store: Context.get(context, Store),
          keys: makeKeys(keyPrefix),
          lockExpirationMs: LOCK_EXPIRATION_MS,
          handoffTimeoutMs: HANDOFF_TIMEOUT_MS,
          commandTimeoutMs: COMMAND_TIMEOUT_MS,
          exactTime: false,
          advance: (ms) => Effect.sleep(ms),
          ...onServer(primary, uncounted),
          outage: {
            begin: primary.kill,
            // idempotent: the suite also runs it as a finalizer; back once the replica is linked again
            end: Effect.andThen(
              Effect.flatMap(primary.pid, (pid) => (Option.isNone(pid) ? primary.restart : Effect.void)),
              Effect.andThen(linked, acknowledging(primary))
            )
          }
        }
        yield* body(fixture)
      })
    )
}

describe("Store conformance: RedisStore with a replica and minReplicasAck 1", () => {
  storeSuite(acknowledgedRedis)
})
