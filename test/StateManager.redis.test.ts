import { createHash } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { singleServer } from "../src/internal/redis/script.js"
import * as Scripts from "../src/internal/redis/scripts/index.js"
import type * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import { within } from "./conformance/helpers.js"
import { type StateBackend, stateSuite } from "./state/suite.js"
import { Counter, holding, Other, redisCluster, type Worker } from "./state/workers.js"
import * as Logs from "./support/logs.js"
import * as Monitor from "./support/monitor.js"
import { succeedsReal, untilReal } from "./support/poll.js"
import type * as RedisServer from "./support/RedisServer.js"

const redis: StateBackend = {
  name: "redis",
  test: (name, input, body) =>
    it.live(name, () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ commandTimeout: 1_000, ...input })
        yield* body(cluster, {
          advance: (ms) => Effect.sleep(ms),
          quiet: () => Monitor.quiet(cluster.server),
          until: (label, check) => untilReal(label, check, { within: 5_000 })
        }).pipe(Effect.provide(Logs.into(cluster.logs)))
      })
    )
}

stateSuite(redis)

/**
 * Load every script on the server, so no EVALSHA below meets NOSCRIPT and is sent again as
 * EVAL (a script a warm-up did not run, or ran later than the watch began, would be).
 */
const loadScripts = (cluster: { readonly server: RedisServer.RedisServer }) =>
  Effect.forEach(Scripts.all, (script) => cluster.server.command("SCRIPT", "LOAD", script.lua(singleServer)), {
    discard: true
  }).pipe(Effect.orDie)

/** The scripts by the SHA1 an EVALSHA names. */
const scriptNames = new Map(
  Scripts.all.map((script) => [createHash("sha1").update(script.lua(singleServer)).digest("hex"), script.name])
)

/** The scripts by their text, as EVAL sends them (a client's first call of a script). */
const scriptsByText = new Map(Scripts.all.map((script) => [script.lua(singleServer), script.name]))

/** What clients sent between two barriers (the scripts' own commands left out), a script by its name. */
const sentBetween = (m: Monitor.Monitor, from: number, to: number) =>
  Monitor.sentBetween(m, from, to).map((command) =>
    command.args[0] === "evalsha"
      ? (scriptNames.get(command.args[1]!) ?? "unknown script")
      : command.args[0] === "eval"
        ? (scriptsByText.get(command.args[1]!) ?? "unknown script")
        : command.args[0]
  )

describe("round trips", () => {
  it.live(
    "an uncontended modification is two commands (the grant with the reads, the commit with the release), the next ones of the same worker one",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster()
        const w = yield* cluster.worker()
        // the client's first call of each script warmed up (ioredis sends it as EVAL)
        for (let i = 1; i <= 2; i++) yield* w.states.modify("warm", Counter, (s) => [null, { n: s.n + 1 }])
        yield* loadScripts(cluster)
        const m = yield* Monitor.monitor(cluster.server)
        const from = yield* Monitor.barrier(cluster.server, m)
        for (let i = 1; i <= 3; i++) yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
        const to = yield* Monitor.barrier(cluster.server, m)
        deepStrictEqual(sentBetween(m, from, to), [
          "leaseholdAcquireQueued",
          "leaseholdCommitAndReleaseQueued",
          "leaseholdCommitIfUnchanged",
          "leaseholdCommitIfUnchanged"
        ])
        // with no queue key at all, the steps touch no sorted set of the queue (`quiet`)
        deepStrictEqual(
          m.commands.slice(from, to).filter((command) => command.fromScript && command.args[0]!.startsWith("z")),
          []
        )
        assert.strictEqual(yield* cluster.stored("t"), 3)
      })
  )
})

describe("a modification in one step on the values of the worker's last grant", () => {
  const add = (seen: Array<number>) => (s: { readonly n: number }) => {
    seen.push(s.n)
    return [s.n, { n: s.n + 1 }] as const
  }
  const bump = (s: { readonly n: number }) => [null, { n: s.n + 1 }] as const
  /** Workers `a` and `b`, each with a store of its own, which knows nothing of the other's grants. */
  const twoProcesses = Effect.gen(function* () {
    const cluster = yield* redisCluster()
    const a = yield* cluster.worker()
    const b = yield* cluster.worker()
    return { cluster, a, b }
  })

  it.live("values another worker moved on refuse the step: the function runs again on what is stored", () =>
    Effect.gen(function* () {
      const { cluster, a, b } = yield* twoProcesses
      for (let i = 1; i <= 2; i++) yield* a.states.modify("warm", Counter, bump)
      yield* loadScripts(cluster)
      yield* a.states.modify("t", Counter, bump)
      yield* b.states.modify("t", Counter, bump)
      const m = yield* Monitor.monitor(cluster.server)
      const from = yield* Monitor.barrier(cluster.server, m)
      const seen: Array<number> = []
      assert.strictEqual(yield* a.states.modify("t", Counter, add(seen)), 2)
      // the step on what a's grant left (1), refused; then the queued way, on what b wrote (2)
      deepStrictEqual(seen, [1, 2])
      const refused = yield* Monitor.barrier(cluster.server, m)
      // refused once: its next release is not remembered, nor the step tried
      yield* a.states.modify("t", Counter, bump)
      yield* a.states.modify("t", Counter, bump)
      const to = yield* Monitor.barrier(cluster.server, m)
      assert.isFalse(sentBetween(m, refused, to).includes("leaseholdCommitIfUnchanged"))
      deepStrictEqual(sentBetween(m, from, refused), [
        "leaseholdCommitIfUnchanged",
        "leaseholdAcquireQueued",
        "leaseholdCommitAndReleaseQueued"
      ])
      assert.strictEqual(yield* cluster.stored("t"), 5)
    })
  )

  it.live("the values are compared, not only the fence: a value changed under the same fence refuses the step", () =>
    Effect.gen(function* () {
      const cluster = yield* redisCluster()
      const a = yield* cluster.worker()
      yield* a.states.modify("t", Counter, bump)
      // as a failover that lost writes leaves it: the fence the same, the value another
      yield* cluster.server.command("SET", "leasehold:{t}:s:counter", JSON.stringify({ n: 10 })).pipe(Effect.orDie)
      const seen: Array<number> = []
      assert.strictEqual(yield* a.states.modify("t", Counter, add(seen)), 10)
      deepStrictEqual(seen, [1, 10])
      assert.strictEqual(yield* cluster.stored("t"), 11)
    })
  )

  it.live("a lock held by another worker refuses the step: the modification waits its turn", () =>
    Effect.gen(function* () {
      const { cluster, a, b } = yield* twoProcesses
      yield* a.states.modify("t", Counter, bump)
      // b holds the lock, its function not yet returned (it will write 2)
      const held = yield* holding(b, "t")
      const seen: Array<number> = []
      const later = yield* Effect.forkChild(a.states.modify("t", Counter, add(seen)))
      // its step refused, a waits in the token's queue behind b
      yield* untilReal(
        "a queued",
        Effect.map(cluster.store.queue("t"), (ids) => ids.includes(a.id)),
        { within: 5_000 }
      )
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(later.pollUnsafe()))))
      yield* held.open
      yield* Fiber.join(held.fiber)
      assert.strictEqual(yield* Fiber.join(later), 2)
      assert.strictEqual(seen[seen.length - 1], 2)
      assert.strictEqual(yield* cluster.stored("t"), 3)
    })
  )

  it.live("two processes modifying a token in runs, one after the other and concurrently: exact", () =>
    Effect.gen(function* () {
      const { cluster, a, b } = yield* twoProcesses
      // a and b alternate in runs: every run's first modification may be refused
      for (let run = 0; run < 10; run++) {
        const w = run % 2 === 0 ? a : b
        yield* Effect.forEach(Array.from({ length: 8 }), () => w.states.modify("t", Counter, bump), {
          concurrency: run % 3 === 0 ? 4 : 1,
          discard: true
        })
      }
      assert.strictEqual(yield* cluster.stored("t"), 80)
    })
  )
})

describe("round trips of a lease", () => {
  it.live("a token's first leased modification is written before the lease subscribes to its notices", () =>
    Effect.gen(function* () {
      const cluster = yield* redisCluster({ oplock: true })
      // the worker under test has subscribed nothing yet (on a single server its notices come
      // on one channel of its own, kept between waits); its client sends each script as EVAL
      // the first time, as EVALSHA after, so both count as a script
      const w = yield* cluster.worker()
      const kind = (command: Monitor.Command) => (command.args[0]!.startsWith("eval") ? "script" : command.args[0])
      const m = yield* Monitor.monitor(cluster.server)
      const from = yield* Monitor.barrier(cluster.server, m)
      /** What clients sent from `start` on, once `n` commands have come (the lease's own come after the acknowledgement). */
      const sentOnce = (start: number, n: number) =>
        Effect.gen(function* () {
          yield* untilReal(
            `${n} commands`,
            Effect.sync(() => Monitor.sentBetween(m, start, m.commands.length).length >= n),
            { within: 5_000 }
          )
          const end = yield* Monitor.barrier(cluster.server, m)
          return { end, sent: Monitor.sentBetween(m, start, end).map(kind) }
        })
      yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
      assert.isTrue(w.lease.isLeased("t"))
      const first = yield* sentOnce(from, 4)
      // the grant with the read, the write (the acknowledgement), and only then the lease's
      // subscription and its one look at the queue
      deepStrictEqual(first.sent, ["script", "script", "subscribe", "script"])
      // a lease of another token listens on the same channel: no second subscription
      yield* w.states.modify("t2", Counter, (s) => [null, { n: s.n + 1 }])
      assert.isTrue(w.lease.isLeased("t2"))
      deepStrictEqual((yield* sentOnce(first.end, 3)).sent, ["script", "script", "script"])
      assert.strictEqual(yield* cluster.stored("t"), 1)
    })
  )

  it.live(
    "a contended grant of one modification writes in its release, and lingers once its caller was seen to come back at once",
    () =>
      Effect.gen(function* () {
        // the oplock off: every grant is held for the modifications queued here; a quantum long
        // enough that a grant's write fits in it, and that a caller's next modification within
        // two of them (200 ms) counts as coming back at once; re-checks (half the hand-off
        // timeout) far beyond a round
        const cluster = yield* redisCluster({ lockExpiration: 30_000, handoffTimeout: 10_000, leaseQuantum: 100 })
        const [a, b, c] = [yield* cluster.worker(), yield* cluster.worker(), yield* cluster.worker()]
        for (const w of [a, b, c]) yield* w.states.modify("warm", Counter, (s) => [null, { n: s.n + 1 }])
        yield* loadScripts(cluster)
        const queued = (ids: ReadonlyArray<string>) =>
          untilReal(
            `${ids.join(", ")} queued`,
            Effect.map(cluster.store.queue("t"), (queue) => ids.every((id) => queue.includes(id))),
            { within: 5_000 }
          )
        const increment = (w: Worker) => w.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }])
        const m = yield* Monitor.monitor(cluster.server)
        /**
         * a holds t's lock; b (running `onB`), then c, queue behind it, so that b's grant comes
         * with c waiting (c, waiting, sends nothing before its grant). From a's release on:
         * what b sent up to its own release, which hands the lock to c. Rounds start apart by
         * more than two quanta: b's next one is no caller coming back at once.
         */
        const round = <A>(onB: Effect.Effect<A, unknown>) =>
          Effect.gen(function* () {
            yield* Effect.sleep(300)
            const held = yield* holding(a, "t")
            const fromB = yield* Effect.forkChild(onB)
            yield* queued([b.id])
            const fromC = yield* Effect.forkChild(increment(c))
            yield* queued([b.id, c.id])
            const from = yield* Monitor.barrier(cluster.server, m)
            yield* held.open
            yield* Fiber.join(held.fiber)
            const answers = [yield* Fiber.join(fromB), yield* Fiber.join(fromC)]
            const to = yield* Monitor.barrier(cluster.server, m)
            const sent = sentBetween(m, from, to)
            const released = sent.indexOf("leaseholdCommitAndReleaseQueued")
            const bReleased = sent.indexOf("leaseholdCommitAndReleaseQueued", released + 1)
            return { answers, sent: sent.slice(released + 1, bReleased + 1) }
          })
        const release = ["leaseholdCommitAndReleaseQueued"]
        // grants of one modification whose caller does not come back: the write in the release
        for (let n = 1; n <= 3; n++) {
          const { answers, sent } = yield* round(increment(b))
          deepStrictEqual(answers, [3 * n - 1, 3 * n])
          deepStrictEqual(sent, release)
        }
        // b's caller comes back at once: its grant had not lingered, so its next modification
        // queues behind c's
        const fourth = yield* round(Effect.zip(increment(b), increment(b)))
        deepStrictEqual(fourth.answers, [[11, 13], 12])
        deepStrictEqual(fourth.sent, release)
        // seen to come back: b's next grant lingers for its caller (a write, then a turn of the
        // event loop; the caller does not come, this time)
        const fifth = yield* round(increment(b))
        deepStrictEqual(fifth.answers, [15, 16])
        deepStrictEqual(fifth.sent, ["leaseholdWriteIfHolder", ...release])
        assert.strictEqual(yield* cluster.stored("t"), 16)
      }),
    60_000
  )
})

describe("leases acknowledged from memory", () => {
  it.live("a tight loop of callers on one worker lets a waiter on another in", () =>
    Effect.gen(function* () {
      // a lease would last 10 s: far longer than the waits below allow
      const cluster = yield* redisCluster({
        oplock: true,
        leaseDurability: "memory",
        lockExpiration: 20_000,
        lockWarningThreshold: 10_000
      })
      const a = yield* cluster.worker()
      const b = yield* cluster.worker()
      let stop = false
      let loops = 0
      // Each modification its own caller, as request handlers are: served from memory, they
      // follow each other on microtasks alone, with nothing that waits for the socket.
      const looping = yield* Effect.forkChild(
        Effect.promise(async () => {
          while (!stop) {
            await Effect.runPromise(a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }]))
            loops++
          }
        })
      )
      yield* untilReal(
        "the loop runs",
        Effect.sync(() => loops >= 3),
        { within: 5_000 }
      )
      const waiter = yield* Effect.forkChild(b.states.modify("t", Counter, (s) => [null, { n: s.n + 1000 }]))
      yield* untilReal(
        "the waiter got its turn",
        Effect.map(
          Effect.sync(() => Option.fromNullishOr(waiter.pollUnsafe())),
          Option.isSome
        ),
        { within: 5_000 }
      )
      stop = true
      yield* Fiber.join(looping)
      yield* Fiber.join(waiter)
      // closing the worker ends its lease: what it acknowledged is written
      yield* a.close
      const stored = yield* cluster.stored("t")
      // every modification of both workers, once
      assert.strictEqual(stored, loops + 1000)
    })
  )
})

/**
 * A worker leasing "t" (stored 1), its lease with no deadline and no extension within a
 * test: 20 s of hold time on a lock of 30 s.
 */
const leasing = (input: LeaseholdConfig.Input) =>
  Effect.gen(function* () {
    const cluster = yield* redisCluster({
      oplock: true,
      leaseHoldTime: 20_000,
      lockExpiration: 30_000,
      lockWarningThreshold: 20_000,
      ...input
    })
    const w = yield* cluster.worker()
    yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
    assert.isTrue(w.lease.isLeased("t"))
    return { cluster, w }
  })

describe("interruptions while the store is away", () => {
  it.live(
    "a caller interrupted while its first attempt waits for the connection leaves nothing that blocks the token",
    () =>
      Effect.gen(function* () {
        const cluster = yield* redisCluster({ commandTimeout: 1_000 })
        const w = yield* cluster.worker()
        yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
        yield* cluster.server.kill
        yield* untilReal(
          "the worker's connection knows",
          Effect.map(w.store.status, (status) => !status.ready),
          { within: 5_000 }
        )
        // The first attempt waits (up to the command timeout) for the connection to return:
        // started at once, the caller runs to that wait (nothing before it waits for anything)
        // before the fork returns.
        const caller = yield* Effect.forkChild(
          w.states.modify("t", Counter, (s) => [null, { n: s.n + 100 }]),
          {
            startImmediately: true
          }
        )
        assert.isUndefined(caller.pollUnsafe(), "the first attempt waits for the connection")
        yield* Fiber.interrupt(caller)
        yield* cluster.server.restart
        // the same worker, the same token: nothing is left waiting for a session nobody serves
        const next = yield* within(
          "the next modification",
          10_000,
          succeedsReal(
            "a modification after the restart",
            w.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }]),
            { within: 10_000 }
          )
        )
        assert.strictEqual(next, 1)
        assert.strictEqual(yield* w.lease.sessions, 0)
      }),
    30_000
  )

  it.live(
    "a leased token's modification whose slice cannot be read fails instead of waiting for ever",
    () =>
      Effect.gen(function* () {
        const { cluster, w } = yield* leasing({ commandTimeout: 1_000, leaseDurability: "memory" })
        yield* cluster.server.kill
        // the lease has the counter in memory, not the other slice: it must read it
        const result = yield* within(
          "the modification",
          10_000,
          Effect.result(w.states.modify("t", Other, (s) => [null, { s: `${s.s}x` }]))
        )
        assert.strictEqual(result._tag === "Failure" ? result.failure._tag : "written", "StoreUnavailable")
      }),
    30_000
  )
})

/**
 * A worker leasing "t" (stored 1), with a modification in progress holding the lease's turn
 * until `go`: what is started meanwhile queues behind it, served from memory once it ends,
 * then committed in one group commit (only that group commit can find the lock gone).
 */
const behindBusyLease = Effect.gen(function* () {
  const { cluster, w } = yield* leasing({ leaseDurability: "batch" })
  const entered = yield* Deferred.make<void>()
  const go = yield* Deferred.make<void>()
  const first = yield* Effect.forkChild(
    Effect.result(
      w.states.modifyEffect("t", Counter, (s) =>
        Deferred.succeed(entered, undefined).pipe(
          Effect.andThen(Deferred.await(go)),
          Effect.as([null, { n: s.n + 1 }] as const)
        )
      )
    )
  )
  yield* Deferred.await(entered)
  return { cluster, w, first, go: Deferred.succeed(go, undefined) }
})

/**
 * Start `effect` behind the busy lease: with the hold busy it reads nothing from the store,
 * and it is queued on the lease in its first steps, which, started at once, it has run when
 * the fork returns (nothing before them waits), so that forks made in a row queue in order.
 */
const queueNow = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.forkChild(Effect.result(effect), { startImmediately: true })

/** The lock taken from under the lease: its next group commit fails. */
const stealLock = (cluster: Effect.Success<typeof behindBusyLease>["cluster"]) =>
  Effect.orDie(cluster.server.command("SET", cluster.keys.lock("t"), "another-holder"))

describe("a modification that writes nothing under a lease", () => {
  it.live(
    "read what a group commit still owes: it waits for that commit, and fails with it",
    () =>
      Effect.gen(function* () {
        const { cluster, w, first, go } = yield* behindBusyLease
        const written = yield* queueNow(w.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }]))
        const read = yield* queueNow(w.states.modify("t", Counter, (s) => [s.n, s]))
        yield* stealLock(cluster)
        yield* go
        // the lease serves the three from memory, the read after the writes, then commits them
        const [firstResult, writtenResult, readResult] = yield* within(
          "the three modifications",
          10_000,
          Effect.all([Fiber.join(first), Fiber.join(written), Fiber.join(read)])
        )
        assert.isTrue(Result.isFailure(firstResult), `first ${JSON.stringify(firstResult)}`)
        assert.isTrue(Result.isFailure(writtenResult), `written ${JSON.stringify(writtenResult)}`)
        // not 3, a value that was never stored: the read fails as the writes it read did
        assert.isTrue(Result.isFailure(readResult), `read ${JSON.stringify(readResult)}`)
        assert.strictEqual(yield* cluster.stored("t"), 1)
      }),
    30_000
  )
})

describe("a modification whose own value is refused, under a lease", () => {
  /** A value the counter's schema cannot encode: the modification fails with `InvalidSliceValue`. */
  const unencodable = { n: "not a number" } as unknown as { readonly n: number }
  const refusals = {
    modify: (w: Worker) => w.states.modify("t", Counter, (s) => [s.n, unencodable]),
    modifyEffect: (w: Worker) => w.states.modifyEffect("t", Counter, (s) => Effect.succeed([s.n, unencodable] as const))
  }

  /**
   * A write queued on the busy lease, then a modification that reads it and whose own value
   * is refused; the lock is stolen first when `steal`; then the three are served from memory
   * and the write is committed.
   */
  const refusedAfterWrite = (refuse: (w: Worker) => Effect.Effect<number, unknown>, steal: boolean) =>
    Effect.gen(function* () {
      const { cluster, w, first, go } = yield* behindBusyLease
      const written = yield* queueNow(w.states.modify("t", Counter, (s) => [s.n + 1, { n: s.n + 1 }]))
      const refused = yield* queueNow(refuse(w))
      if (steal) yield* stealLock(cluster)
      yield* go
      const refusedResult = yield* within("the refused modification", 10_000, Fiber.join(refused))
      // whether the write it read was committed when the refusal was reported
      const writtenThen = Option.fromNullishOr(written.pollUnsafe())
      const [firstResult, writtenResult] = yield* within(
        "the two writes",
        10_000,
        Effect.all([Fiber.join(first), Fiber.join(written)])
      )
      return { cluster, firstResult, writtenResult, refusedResult, writtenThen }
    })

  const tagOf = (result: Result.Result<unknown, unknown>) =>
    Result.isFailure(result) ? (result.failure as { _tag: string })._tag : "succeeded"

  for (const [name, refuse] of Object.entries(refusals)) {
    it.live(
      `${name}: it is refused only once the writes it read are acknowledged`,
      () =>
        Effect.gen(function* () {
          const run = yield* refusedAfterWrite(refuse, false)
          assert.strictEqual(tagOf(run.refusedResult), "InvalidSliceValue")
          assert.isTrue(Option.isSome(run.writtenThen), "the write it read was acknowledged before the refusal")
          assert.strictEqual(tagOf(run.writtenResult), "succeeded")
          assert.strictEqual(yield* run.cluster.stored("t"), 3)
        }),
      30_000
    )

    it.live(
      `${name}: when the writes it read are lost, it fails as they do (its outcome rests on values never stored)`,
      () =>
        Effect.gen(function* () {
          // the lock taken from under the lease: its next group commit fails
          const run = yield* refusedAfterWrite(refuse, true)
          assert.isTrue(Result.isFailure(run.writtenResult), `written ${JSON.stringify(run.writtenResult)}`)
          assert.strictEqual(tagOf(run.refusedResult), tagOf(run.writtenResult))
          assert.strictEqual(yield* run.cluster.stored("t"), 1)
        }),
      30_000
    )
  }
})
