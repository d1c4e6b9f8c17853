import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestClock from "effect/testing/TestClock"
import { Redis } from "ioredis"
import * as Health from "../src/Health.js"
import * as InstanceId from "../src/InstanceId.js"
import { makeKeys } from "../src/internal/keys.js"
import * as Signals from "../src/internal/signals.js"
import * as Supervisor from "../src/internal/supervisor.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as RedisStore from "../src/RedisStore.js"
import { Store } from "../src/Store.js"
import { liveSleep } from "./conformance/helpers.js"
import { atLevels, capture } from "./support/logs.js"
import { untilReal } from "./support/poll.js"
import * as RedisServer from "./support/RedisServer.js"

/** The worker under test: the notices it listens to are addressed to this id. */
const ME = "inst-a"

const workerLayer = <A, E, R>(store: Layer.Layer<A | Store | LeaseholdConfig.LeaseholdConfig, E, R>) =>
  Signals.layer.pipe(
    Layer.provideMerge(Supervisor.layer),
    Layer.provideMerge(Layer.mergeAll(store, Health.layer, InstanceId.layerFixed(ME)))
  )

/** Build a worker's signals in `scope`, logs captured. */
const build = <A, E, R>(store: Layer.Layer<A | Store | LeaseholdConfig.LeaseholdConfig, E, R>, scope: Scope.Scope) =>
  Effect.gen(function* () {
    const logs = capture()
    const context = yield* Layer.buildWithScope(workerLayer(store), scope).pipe(Effect.provide(logs.layer))
    return {
      logs: logs.lines,
      lines: () => atLevels(logs.lines).map((line) => `${line.level} ${line.message}`),
      signals: Context.get(context, Signals.Signals),
      store: Context.get(context, Store),
      health: Context.get(context, Health.Health),
      context
    }
  })

/** Listen on a token: the events arrive in a queue the test reads. */
const listen = (signals: Signals.Signals.Service, token: string) =>
  Effect.gen(function* () {
    const stream = yield* signals.subscribe(token)
    const queue = yield* Queue.unbounded<Signals.SignalEvent>()
    yield* stream.pipe(
      Stream.runForEach((event) => Queue.offer(queue, event)),
      Effect.forkScoped
    )
    return queue
  })

/** The real clock, for waits that must not depend on the TestClock. */
const liveClock = Clock.Clock.defaultValue()

const next = (queue: Queue.Queue<Signals.SignalEvent>, ms = 5_000) =>
  Queue.take(queue).pipe(
    Effect.timeoutOrElse({ duration: ms, orElse: () => Effect.failSync(() => new Error("no signal arrived")) }),
    Effect.provideService(Clock.Clock, liveClock)
  )

/** A queue step that must take the lock, or must queue the worker. */
const expect = (tag: "Acquired" | "Queued", step: Effect.Effect<{ readonly _tag: string }, unknown>) =>
  Effect.flatMap(step, (result) =>
    result._tag === tag ? Effect.void : Effect.die(`expected ${tag}, got ${result._tag}`)
  )

const take = (store: Store.Service, token: string, worker: string, n = 1) =>
  expect("Acquired", store.acquireQueued(token, `${worker}:${n}`, [], { instanceId: worker }))
const queue = (store: Store.Service, token: string, worker: string, n = 1) =>
  expect("Queued", store.acquireQueued(token, `${worker}:${n}`, [], { instanceId: worker }))
const release = (store: Store.Service, token: string, worker: string, n = 1) =>
  store.releaseQueued(token, `${worker}:${n}`, { instanceId: worker })

/**
 * Make the store send `ME` one `Granted` notice about `token`, as the protocol does: `ME`
 * queues behind another worker's lock, whose release hands the lock to `ME`. `ME` then
 * leaves the queue without claiming: the lock is free again, and nobody else was told.
 */
const sendGranted = (store: Store.Service, token: string) =>
  Effect.gen(function* () {
    yield* take(store, token, "inst-b")
    yield* queue(store, token, ME)
    yield* release(store, token, "inst-b")
    yield* store.leaveQueue(token, ME)
  })

/**
 * Make the store send `ME` one `Contended` notice about `token`: `ME` holds the lock and
 * another worker queues behind it, then leaves; `ME` releases a lock nobody waits for.
 */
const sendContended = (store: Store.Service, token: string) =>
  Effect.gen(function* () {
    yield* take(store, token, ME)
    yield* queue(store, token, "inst-b")
    yield* store.leaveQueue(token, "inst-b")
    yield* release(store, token, ME)
  })

/** A `Granted` notice as the queue steps send it: naming its grant by a fence. */
const isGranted = (event: Signals.SignalEvent) => {
  assert.strictEqual(event._tag, "Granted")
  const fence = event._tag === "Granted" ? event.fence : undefined
  assert.isTrue(fence !== undefined && Number.isSafeInteger(fence) && fence > 0, `fence ${fence}`)
}
const contended = { _tag: "Contended" } as const

const signalsErrors = Metric.withAttributes(Supervisor.loopErrors, { loop: Signals.loopName })
const errorCount = Effect.map(Metric.value(signalsErrors), (state) => state.count)

describe("Signals on MemoryStore", () => {
  const memory = (input: LeaseholdConfig.Input = {}) =>
    MemoryStore.layer.pipe(Layer.provideMerge(LeaseholdConfig.layer({ retryJitter: false, ...input })))

  const setup = (input: LeaseholdConfig.Input = {}) =>
    Effect.gen(function* () {
      const worker = yield* build(memory(input), yield* Effect.scope)
      return { ...worker, control: Context.get(worker.context, MemoryStore.MemoryStoreControl) }
    })

  it.effect("a listener receives the Contended and Granted notices of its token addressed to its worker", () =>
    Effect.gen(function* () {
      const { signals, store } = yield* setup()
      const events = yield* listen(signals, "tok")
      // ME holds the lock and inst-b queues behind it: ME is told Contended
      yield* take(store, "tok", ME)
      yield* queue(store, "tok", "inst-b")
      // ME's release hands the lock to inst-b: that notice is inst-b's, not ME's
      yield* release(store, "tok", ME)
      yield* take(store, "tok", "inst-b")
      // ME queues behind inst-b (inst-b is told), and inst-b's release hands the lock to ME
      yield* queue(store, "tok", ME, 2)
      yield* release(store, "tok", "inst-b")
      // a notice to ME about another token is not this listener's
      yield* sendContended(store, "other")
      deepStrictEqual(yield* next(events), contended)
      isGranted(yield* next(events))
      assert.strictEqual(yield* Queue.size(events), 0)
    })
  )

  it.effect("listeners of one token share one entry, dropped when the last leaves", () =>
    Effect.gen(function* () {
      const { signals, store } = yield* setup()
      const first = yield* Scope.make()
      const second = yield* Scope.make()
      const a = yield* listen(signals, "tok").pipe(Scope.provide(first))
      const b = yield* listen(signals, "tok").pipe(Scope.provide(second))
      deepStrictEqual(yield* signals.tokens, ["tok"])
      yield* sendGranted(store, "tok")
      isGranted(yield* next(a))
      isGranted(yield* next(b))
      yield* Scope.close(first, Exit.void)
      deepStrictEqual(yield* signals.tokens, ["tok"])
      yield* sendContended(store, "tok")
      deepStrictEqual(yield* next(b), contended)
      yield* Scope.close(second, Exit.void)
      deepStrictEqual(yield* signals.tokens, [])
    })
  )

  it.effect("a token's subscription outlives its last listener by one to two sweeps, then goes", () =>
    Effect.gen(function* () {
      const { signals, store } = yield* setup()
      const first = yield* Scope.make()
      yield* listen(signals, "tok").pipe(Scope.provide(first))
      yield* Scope.close(first, Exit.void)
      deepStrictEqual(yield* signals.tokens, [])
      deepStrictEqual(yield* signals.subscribed, ["tok"])
      // a listener within the linger reuses it: no new subscription, signals delivered
      const second = yield* Scope.make()
      const events = yield* listen(signals, "tok").pipe(Scope.provide(second))
      yield* sendGranted(store, "tok")
      isGranted(yield* next(events))
      yield* TestClock.adjust(3 * Signals.lingerMs)
      deepStrictEqual(yield* signals.subscribed, ["tok"])
      yield* Scope.close(second, Exit.void)
      yield* TestClock.adjust(Signals.lingerMs)
      deepStrictEqual(yield* signals.subscribed, ["tok"])
      yield* TestClock.adjust(Signals.lingerMs)
      deepStrictEqual(yield* signals.subscribed, [])
      // listening again after the sweep subscribes again
      const again = yield* listen(signals, "tok")
      deepStrictEqual(yield* signals.subscribed, ["tok"])
      yield* sendContended(store, "tok")
      deepStrictEqual(yield* next(again), contended)
    })
  )

  it.effect("a mark tells whether a notice about its token can have arrived unheard since", () =>
    Effect.gen(function* () {
      const { signals, store, control } = yield* setup()
      // nothing subscribed yet: nothing can be trusted
      assert.isTrue(signals.missedSince("tok", signals.mark("tok")))
      const other = yield* listen(signals, "other")
      // the worker's channel delivers: a mark taken now, with nothing since, missed nothing
      const first = signals.mark("tok")
      assert.isFalse(signals.missedSince("tok", first))
      // a notice about another token is not one about this token
      yield* sendContended(store, "other")
      deepStrictEqual(yield* next(other), contended)
      assert.isFalse(signals.missedSince("tok", first))
      // a notice about the token, with nobody listening to it, was missed
      yield* sendGranted(store, "tok")
      yield* untilReal(
        "the notice about tok arrived",
        Effect.sync(() => signals.missedSince("tok", first)),
        { within: 5_000 }
      )
      // a lost subscription may have lost anything
      const second = signals.mark("tok")
      assert.isFalse(signals.missedSince("tok", second))
      yield* control.dropSubscriptions
      deepStrictEqual(yield* next(other), { _tag: "Resubscribed" })
      assert.isTrue(signals.missedSince("tok", second))
      // a sweep forgets which tokens the notices were about: one that arrived after a mark
      // and before a sweep still counts as missed
      const third = signals.mark("tok")
      yield* sendGranted(store, "tok")
      yield* untilReal(
        "the notice arrived",
        Effect.sync(() => signals.missedSince("tok", third)),
        { within: 5_000 }
      )
      const fourth = signals.mark("tok")
      yield* sendContended(store, "other")
      deepStrictEqual(yield* next(other), contended)
      yield* TestClock.adjust(Signals.lingerMs)
      assert.isTrue(signals.missedSince("tok", third))
      assert.isTrue(signals.missedSince("tok", fourth))
    })
  )

  it.effect("a lost subscription is restored: every listener gets Resubscribed, then later signals", () =>
    Effect.gen(function* () {
      const { signals, store, control, lines } = yield* setup()
      const a = yield* listen(signals, "tok")
      const b = yield* listen(signals, "tok")
      const c = yield* listen(signals, "other")
      yield* control.dropSubscriptions
      for (const queue of [a, b, c]) deepStrictEqual(yield* next(queue), { _tag: "Resubscribed" })
      yield* sendGranted(store, "tok")
      isGranted(yield* next(a))
      isGranted(yield* next(b))
      deepStrictEqual(lines(), [
        "ERROR signals: task error, retrying until it recovers: store unavailable during subscribe: the subscriber connection was dropped",
        "INFO signals: task recovered"
      ])
    })
  )

  it.effect("seven failures in a row: one ERROR, one INFO, and the next signal is delivered", () =>
    Effect.gen(function* () {
      const { signals, store, control, lines, health } = yield* setup()
      const events = yield* listen(signals, "tok")
      const before = yield* errorCount
      yield* control.setAvailable(false)
      // attempts at 0, 1, 3, 7, 15, 31, 61 s: seven errors
      for (let i = 0; i < 62; i++) yield* TestClock.adjust(1_000)
      assert.strictEqual((yield* errorCount) - before, 7)
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.state._tag, "Retrying")
      yield* control.setAvailable(true)
      deepStrictEqual(yield* next(events), { _tag: "Resubscribed" })
      yield* sendGranted(store, "tok")
      isGranted(yield* next(events))
      assert.strictEqual(yield* Clock.currentTimeMillis, 62_000)
      deepStrictEqual(lines(), [
        "ERROR signals: task error, retrying until it recovers: store unavailable during subscribe: the memory store is set unavailable",
        "INFO signals: task recovered"
      ])
      assert.isTrue(yield* health.healthy)
    })
  )

  it.effect("subscribing while the store is away fails with StoreUnavailable and leaves nothing behind", () =>
    Effect.gen(function* () {
      const { signals, store, control } = yield* setup()
      yield* control.setAvailable(false)
      const error = yield* Effect.flip(Effect.scoped(signals.subscribe("tok")))
      assert.strictEqual(error._tag, "StoreUnavailable")
      deepStrictEqual(yield* signals.tokens, [])
      deepStrictEqual(yield* signals.subscribed, [])
      yield* control.setAvailable(true)
      const events = yield* listen(signals, "tok")
      yield* sendGranted(store, "tok")
      isGranted(yield* next(events))
    })
  )

  it.effect("a bad token is refused before anything else", () =>
    Effect.gen(function* () {
      const { signals } = yield* setup()
      const error = yield* Effect.flip(Effect.scoped(signals.subscribe("a*")))
      assert.strictEqual(error._tag, "InvalidToken")
      deepStrictEqual(yield* signals.tokens, [])
    })
  )

  it.effect("T7: closing the worker while the loop waits in a retry delay is immediate", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const { signals, control, health } = yield* build(memory(), scope).pipe(
        Effect.map((w) => ({ ...w, control: Context.get(w.context, MemoryStore.MemoryStoreControl) }))
      )
      yield* listen(signals, "tok").pipe(Scope.provide(scope))
      yield* control.setAvailable(false)
      for (let i = 0; i < 40; i++) yield* TestClock.adjust(1_000)
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.state._tag, "Retrying")
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      const exit = yield* Fiber.join(closing).pipe(
        Effect.timeout(1_000),
        Effect.provideService(Clock.Clock, liveClock),
        Effect.exit
      )
      assert.isTrue(Exit.isSuccess(exit))
      assert.strictEqual(yield* Clock.currentTimeMillis, 40_000)
    })
  )
})

describe("Signals on RedisStore", () => {
  const config = LeaseholdConfig.layer({
    retryJitter: false,
    retryDelayInitial: 20,
    retryDelayMax: 100,
    commandTimeout: 300,
    connectTimeout: 1_000
  })
  const redis = (server: RedisServer.RedisServer) =>
    RedisStore.layer({ url: server.url }).pipe(Layer.provideMerge(config))
  // on a single server, the one notice channel of the worker, shared by every token
  const channel = makeKeys("leasehold").workerNotices(ME)

  const setup = Effect.gen(function* () {
    const server = yield* RedisServer.start()
    const worker = yield* build(redis(server), yield* Effect.scope)
    return { server, ...worker }
  })

  /** A plain client for what the harness's one-shot connections cannot do. */
  const adminClient = (server: RedisServer.RedisServer) =>
    Effect.acquireRelease(
      Effect.promise(async () => {
        const client = new Redis(server.port, "127.0.0.1", { lazyConnect: true, retryStrategy: () => null })
        client.on("error", () => undefined)
        await client.connect()
        return client
      }),
      (client) => Effect.sync(() => client.disconnect())
    )

  const lostLine = (server: RedisServer.RedisServer) =>
    `ERROR signals: task error, retrying until it recovers: store unavailable during subscribe: subscriber connection to ${server.url} lost`

  it.live(
    "two listeners share one Redis subscription; the token's entry goes with the last, the worker's notice channel stays",
    () =>
      Effect.gen(function* () {
        const { server, signals, store } = yield* setup
        /** The leasehold channels the server has subscribers for. */
        const subscribed = Effect.map(
          Effect.orDie(server.command("PUBSUB", "CHANNELS", "leasehold:*")),
          (reply) => reply as ReadonlyArray<string>
        )
        const first = yield* Scope.make()
        const second = yield* Scope.make()
        const a = yield* listen(signals, "tok").pipe(Scope.provide(first))
        const b = yield* listen(signals, "tok").pipe(Scope.provide(second))
        assert.strictEqual(yield* Effect.orDie(server.numsub(channel)), 1)
        deepStrictEqual(yield* subscribed, [channel])
        yield* sendGranted(store, "tok")
        isGranted(yield* next(a))
        isGranted(yield* next(b))
        yield* Scope.close(first, Exit.void)
        assert.strictEqual(yield* Effect.orDie(server.numsub(channel)), 1)
        yield* Scope.close(second, Exit.void)
        deepStrictEqual(yield* signals.tokens, [])
        // not dropped at every wait: the subscription outlives its last listener (Signals.lingerMs)
        yield* liveSleep(200)
        assert.strictEqual(yield* Effect.orDie(server.numsub(channel)), 1)
        // and it serves the next listeners, of any token, without another subscription
        const c = yield* listen(signals, "tok")
        const d = yield* listen(signals, "tok2")
        deepStrictEqual(yield* subscribed, [channel])
        assert.strictEqual(yield* Effect.orDie(server.numsub(channel)), 1)
        yield* sendGranted(store, "tok")
        isGranted(yield* next(c))
        assert.strictEqual(yield* Queue.size(d), 0)
      })
  )

  it.live("a killed subscriber connection: Resubscribed for every listener, then later signals", () =>
    Effect.gen(function* () {
      const { server, signals, store, lines } = yield* setup
      const a = yield* listen(signals, "tok")
      const b = yield* listen(signals, "tok")
      assert.strictEqual(yield* Effect.orDie(server.clientKill("pubsub")), 1)
      deepStrictEqual(yield* next(a), { _tag: "Resubscribed" })
      deepStrictEqual(yield* next(b), { _tag: "Resubscribed" })
      assert.strictEqual(yield* Effect.orDie(server.numsub(channel)), 1)
      yield* sendContended(store, "tok")
      deepStrictEqual(yield* next(a), contended)
      deepStrictEqual(yield* next(b), contended)
      deepStrictEqual(lines(), [lostLine(server), "INFO signals: task recovered"])
    })
  )

  it.live("the subscriber connection killed seven times in a row: one ERROR, one INFO, next signal delivered", () =>
    Effect.gen(function* () {
      const { server, signals, store, lines } = yield* setup
      const events = yield* listen(signals, "tok")
      const admin = yield* adminClient(server)
      const before = yield* errorCount
      // At its client limit the server accepts each reconnection and closes it at once.
      const connected = Number(/connected_clients:(\d+)/.exec(yield* Effect.promise(() => admin.info("clients")))?.[1])
      yield* Effect.promise(() => admin.config("SET", "maxclients", String(connected - 1)))
      assert.strictEqual(yield* Effect.promise(() => admin.client("KILL", "TYPE", "pubsub") as Promise<number>), 1)
      yield* untilReal(
        "seven errors of the signals loop",
        Effect.map(errorCount, (n) => n - before >= 7),
        { within: 10_000 }
      )
      yield* Effect.promise(() => admin.config("SET", "maxclients", "10000"))
      deepStrictEqual(yield* next(events), { _tag: "Resubscribed" })
      yield* sendGranted(store, "tok")
      isGranted(yield* next(events))
      deepStrictEqual(lines(), [lostLine(server), "INFO signals: task recovered"])
    })
  )

  it.live("the server SIGKILLed and restarted: one ERROR, one INFO, next signal delivered", () =>
    Effect.gen(function* () {
      const { server, signals, store, lines, health } = yield* setup
      const events = yield* listen(signals, "tok")
      const before = yield* errorCount
      yield* server.kill
      yield* untilReal(
        "seven errors of the signals loop",
        Effect.map(errorCount, (n) => n - before >= 7),
        { within: 10_000 }
      )
      const [loop] = yield* health.loops
      assert.strictEqual(loop?.state._tag, "Retrying")
      yield* server.restart
      deepStrictEqual(yield* next(events), { _tag: "Resubscribed" })
      yield* sendGranted(store, "tok")
      isGranted(yield* next(events))
      deepStrictEqual(lines(), [lostLine(server), "INFO signals: task recovered"])
      assert.isTrue(yield* health.healthy)
    })
  )

  it.live("T7: closing the worker while the loop waits in a retry delay is prompt and closes its connections", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const admin = yield* adminClient(server)
      const scope = yield* Scope.make()
      const slow = RedisStore.layer({ url: server.url }).pipe(
        Layer.provideMerge(
          LeaseholdConfig.layer({ retryJitter: false, retryDelayInitial: "30 seconds", commandTimeout: 300 })
        )
      )
      const { signals, health } = yield* build(slow, scope)
      yield* listen(signals, "tok").pipe(Scope.provide(scope))
      const leasehold = Effect.map(
        Effect.promise(() => admin.client("LIST") as Promise<string>),
        (list) => list.split("\n").filter((line) => line.includes("name=leasehold")).length
      )
      assert.strictEqual(yield* leasehold, 2)
      yield* Effect.orDie(server.clientKill("pubsub"))
      // the reconnection is refused, so the loop is left in its 30 s delay
      yield* Effect.promise(() => admin.config("SET", "maxclients", "2"))
      yield* untilReal(
        "the signals loop retrying",
        Effect.map(health.loops, ([loop]) => loop?.state._tag === "Retrying"),
        { within: 5_000 }
      )
      yield* liveSleep(200)
      const started = yield* Clock.currentTimeMillis
      yield* Scope.close(scope, Exit.void)
      const elapsed = (yield* Clock.currentTimeMillis) - started
      assert.isBelow(elapsed, 1_000)
      yield* Effect.promise(() => admin.config("SET", "maxclients", "10000"))
      yield* untilReal(
        "no leasehold connection left",
        Effect.map(leasehold, (n) => n === 0),
        { within: 2_000 }
      )
    })
  )
})
