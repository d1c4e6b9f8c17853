/**
 * The socket session over the embedded store, served in this process: the handshake, the
 * frame cap, the queue bound, bursts, and each event with `seq` applied exactly once. The
 * tests run on the TestClock: the session's timers (a handler's wait, the reload grace, the
 * pings) move only when a test moves the clock. The sockets are real: their I/O takes real
 * time, which a test waits for (`flush`, `realTurn`) before it moves the clock.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as TestClock from "effect/testing/TestClock"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import * as SocketSession from "leasehold/SocketSession"
import * as StateManager from "leasehold/StateManager"
import { Store } from "leasehold/Store"
import * as Worker from "leasehold/Worker"
import * as Seq from "../src/internal/socket/seq.js"
import {
  answers,
  Count,
  Counter,
  calls,
  connect,
  maxFrameBytes,
  pureCalls,
  pureSession,
  serveWorker,
  session
} from "./session/support.js"
import { withoutClockTime } from "./support/poll.js"

const settings = (input: LeaseholdConfig.Input = {}) => LeaseholdConfig.layer({ oplock: false, ...input })

/** A store shared by the workers of a test, with its settings. */
const sharedStore = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(settings(input))))
    return Context.pick(Store, LeaseholdConfig.LeaseholdConfig)(context)
  })

const oneWorker = Effect.flatMap(sharedStore(), serveWorker)

const clientId = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`

/** A few milliseconds of real time: the sockets' I/O, between two moves of the clock. */
const realTurn = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 5)))

/**
 * Real time for a socket's close to reach the server and be handled, between two moves of the
 * clock while a reload's grace runs on it: 20 of them before the grace (1 s in 50 ms steps)
 * is over, half a second, a wide margin on a loaded machine.
 */
const closeTurn = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 25)))

/** `fiber`'s result, the clock moved by `step` after each real turn (`between`) until it is done. */
const joinAdvancing = <A, E>(
  fiber: Fiber.Fiber<A, E>,
  step: Duration.Input,
  between: Effect.Effect<void> = realTurn,
  maxSteps = 400
) =>
  Effect.gen(function* () {
    for (let i = 0; i < maxSteps; i++) {
      yield* between
      const done = fiber.pollUnsafe()
      if (done !== undefined) return yield* done
      yield* TestClock.adjust(step)
    }
    return yield* Effect.die(`not done within ${maxSteps} steps of ${Duration.format(Duration.fromInputUnsafe(step))}`)
  })

/**
 * The server's last ping to `client` answered and its answer read by the server: the ping
 * came before the pong of the client's first ping, and the client's pong before its second
 * ping, which the server answers once it has read what came before it.
 */
const pingsAnswered = (client: { readonly flush: Effect.Effect<void> }) => Effect.andThen(client.flush, client.flush)

/**
 * A socket opened for a token another socket of it may still hold on the server (closed by
 * the client, its close not yet handled): the reload grace runs on the clock, moved until
 * the socket is linked.
 */
const reconnect = (port: number, query: { readonly token?: string; readonly client?: string }) =>
  Effect.flatMap(Effect.forkChild(connect(port, query)), (fiber) => joinAdvancing(fiber, "50 millis", closeTurn))

/** Until the effectful handler has been called `n` times more than `from`: its event is being handled. */
const handlerCalled = (from: number, n = 1) =>
  withoutClockTime(
    "the handler called",
    Effect.sync(() => calls.total >= from + n)
  )

/** The effectful handler's first event of a burst, waiting `slowMs` on the clock. */
const slowFirst = (client: { readonly send: (message: unknown) => void }) =>
  Effect.gen(function* () {
    const from = calls.total
    client.send({ type: "bump", by: 1, seq: 1, slowMs: 300 })
    yield* handlerCalled(from)
  })

/** The frames sent behind the slow first one read by the server, then its wait over. */
const releaseFirst = (client: { readonly flush: Effect.Effect<void> }): Effect.Effect<void, never, Scope.Scope> =>
  Effect.andThen(client.flush, TestClock.adjust("300 millis"))

/**
 * The token's lock held by another worker over `shared` until the clock moves 300 ms (a
 * modification of its own, which writes nothing): a pure handler's frames wait behind it.
 */
const lockHeld = (shared: Context.Context<Store | LeaseholdConfig.LeaseholdConfig>, token: string) =>
  Effect.gen(function* () {
    const entered = yield* Deferred.make<void>()
    yield* Effect.forkScoped(
      Effect.flatMap(StateManager.StateManager, (states) =>
        states.modifyEffect(token, Counter, (counter) =>
          Effect.andThen(
            Deferred.succeed(entered, undefined),
            Effect.as(Effect.sleep("300 millis"), [null, counter] as const)
          )
        )
      ).pipe(Effect.provide(Worker.layerState.pipe(Layer.provide(Layer.succeedContext(shared)))))
    )
    yield* Deferred.await(entered)
  })

/** A frame sent and taken by the server alone: its modification waits (for `lockHeld`'s lock). */
const takenAlone = (
  client: { readonly send: (message: unknown) => void; readonly flush: Effect.Effect<void> },
  frame: unknown
) =>
  Effect.andThen(
    Effect.sync(() => client.send(frame)),
    client.flush
  )

/** The frames sent since read by the server, then `lockHeld`'s lock released. */
const releaseLock = (client: { readonly flush: Effect.Effect<void> }) =>
  Effect.andThen(client.flush, TestClock.adjust("300 millis"))

describe("SocketSession on the embedded store", () => {
  it.effect("a socket without a token, or with an invalid one, gets a fresh token, then hello and state", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const none = yield* connect(port)
      assert.deepStrictEqual(
        none.frames.map((f) => f.type),
        ["new_token", "hello", "state"]
      )
      assert.strictEqual(none.frames[0]!.token, none.token)
      assert.strictEqual(none.frames[1]!.maxFrameBytes, maxFrameBytes)
      assert.deepStrictEqual(none.frames[2], { type: "state", n: 0, v: 0 })
      const invalid = yield* connect(port, { token: "not a token!" })
      assert.strictEqual(invalid.frames[0]!.type, "new_token")
      assert.notStrictEqual(invalid.token, "not a token!")
    }).pipe(Effect.scoped)
  )

  it.effect("a token held by a live tab gets a fresh one; a reload within the grace keeps its own", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const first = yield* connect(port, { token: "tab-1" })
      assert.strictEqual(first.frames[0]!.type, "hello")
      // the grace runs on the clock: the duplicate gets its own token once it is over
      const duplicate = yield* reconnect(port, { token: "tab-1" })
      assert.isAtLeast(yield* Clock.currentTimeMillis, Duration.toMillis(SocketSession.reloadGrace))
      assert.strictEqual(duplicate.frames[0]!.type, "new_token")
      assert.notStrictEqual(duplicate.token, "tab-1")
      // a reload: the old socket closes as the new one opens
      const reloading = yield* Effect.forkChild(connect(port, { token: "tab-1" }))
      yield* first.close
      const reloaded = yield* joinAdvancing(reloading, "50 millis", closeTurn)
      assert.strictEqual(reloaded.frames[0]!.type, "hello")
      assert.strictEqual(reloaded.token, "tab-1")
    }).pipe(Effect.scoped)
  )

  it.effect("a reconnect of the same client takes its token from its socket not seen to close", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const id = clientId("page")
      const old = yield* connect(port, { client: id })
      old.send({ type: "bump", by: 1, seq: 1 })
      yield* old.waitFor((f) => f.seq === 1)
      // the old socket stays open, as a half-open one does for the server
      const [took, again] = yield* Effect.timed(connect(port, { client: id, token: old.token }))
      assert.isTrue(Duration.isLessThan(took, SocketSession.reloadGrace))
      assert.strictEqual(again.frames[0]!.type, "hello")
      assert.strictEqual(again.token, old.token)
      assert.strictEqual(yield* old.closed, SocketSession.replacedCloseCode)
      again.send({ type: "bump", by: 1, seq: 1 })
      again.send({ type: "bump", by: 1, seq: 2 })
      yield* again.waitFor((f) => f.seq === 2)
      assert.deepStrictEqual(answers(again), [
        ["state", 1],
        ["update", 2]
      ])
      // another client id is another tab: a fresh token
      const other = yield* reconnect(port, { client: clientId("other"), token: old.token })
      assert.strictEqual(other.frames[0]!.type, "new_token")
      // Real time: whether the server closes a socket is its I/O, which the clock does not drive.
      assert.strictEqual(yield* TestClock.withLive(Effect.timeoutOption(again.closed, "200 millis")), Option.none())
    }).pipe(Effect.scoped)
  )

  it.effect("a socket that does not answer pings is cut; one that does stays", () =>
    Effect.gen(function* () {
      const port = yield* Effect.flatMap(sharedStore(), (shared) => serveWorker(shared, { pingInterval: "100 millis" }))
      const silent = yield* connect(port, { client: clientId("silent") }, { autoPong: false })
      const live = yield* connect(port, { client: clientId("live") })
      // the pings on the clock: the silent socket is cut at the second, once the first went
      // unanswered; the live one's answer read before each move of the clock
      const between = pingsAnswered(live)
      assert.strictEqual(yield* joinAdvancing(yield* Effect.forkChild(silent.closed), "100 millis", between), 1006)
      for (let i = 0; i < 3; i++) yield* Effect.andThen(between, TestClock.adjust("100 millis"))
      live.send({ type: "bump", by: 1, seq: 1 })
      assert.strictEqual((yield* live.waitFor((f) => f.seq === 1)).type, "update")
    }).pipe(Effect.scoped)
  )

  it.effect("a frame over the cap closes the socket with 1009", () =>
    Effect.gen(function* () {
      // Real time: the server stops reading the socket, so its close completes only when the
      // close grace (a Node timer on the connection, as the server closes it) cuts it.
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("big") })
      client.send({ type: "bump", by: 1, pad: "x".repeat(maxFrameBytes) })
      assert.strictEqual(yield* client.closed, SocketSession.tooBigCloseCode)
      assert.isUndefined(client.frames.find((f) => f.type === "update"))
    }).pipe(Effect.scoped)
  )

  it.effect("a burst waiting together is one modification, its answers in order", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("burst") })
      // the first event holds the socket's handler while the others arrive
      yield* slowFirst(client)
      const fresh = calls.fresh
      for (let seq = 2; seq <= 4; seq++) client.send({ type: "bump", by: seq === 3 ? 0 : 1, seq })
      yield* releaseFirst(client)
      yield* client.waitFor((f) => f.seq === 4)
      assert.deepStrictEqual(answers(client), [
        ["update", 1],
        ["update", 2],
        ["error", 3],
        ["update", 4]
      ])
      assert.deepStrictEqual(
        client.frames.filter((f) => f.type === "update").map((f) => f.n),
        [1, 2, 3]
      )
      assert.strictEqual(client.frames.find((f) => f.seq === 3)!.applied, false)
      // seq 2 to 4 in one modification: one call on fresh values
      assert.strictEqual(calls.fresh - fresh, 1)
    }).pipe(Effect.scoped)
  )

  it.effect("a handler's defect refuses its own event; the burst's others are answered as they are", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("defect") })
      // taken alone: the frames below wait together behind it (a socket holds 4 at most)
      yield* slowFirst(client)
      // one burst: a duplicate, a defect, an event applied, one over a gap
      client.send({ type: "bump", by: 1, seq: 1 })
      client.send({ type: "bump", by: 1, seq: 2, die: true })
      client.send({ type: "bump", by: 1, seq: 3 })
      client.send({ type: "bump", by: 1, seq: 5 })
      yield* releaseFirst(client)
      yield* client.waitFor((f) => f.seq === 5)
      assert.deepStrictEqual(
        client.frames.filter((f) => f.seq !== undefined),
        [
          { type: "update", n: 1, v: 1, seq: 1 },
          { type: "state", n: 1, v: 1, seq: 1, duplicate: true },
          { type: "error", message: "the event's handler failed unexpectedly", seq: 2, applied: false },
          { type: "update", n: 2, v: 2, seq: 3 },
          { type: "resend", from: 4, seq: 5 }
        ]
      )
    }).pipe(Effect.scoped)
  )

  it.effect("a burst whose write fails answers its duplicates and resends as such, its events not applied", () =>
    Effect.gen(function* () {
      const port = yield* Effect.flatMap(sharedStore({ maxValueBytes: 8192 }), serveWorker)
      const client = yield* connect(port, { client: clientId("unwritten") })
      // taken alone: the frames below wait together behind it (a socket holds 4 at most)
      yield* slowFirst(client)
      client.send({ type: "bump", by: 1, seq: 1 })
      client.send({ type: "bump", by: 1, seq: 2, noteBytes: 10_000 })
      client.send({ type: "bump", by: 1, seq: 4 })
      yield* releaseFirst(client)
      yield* client.waitFor((f) => f.seq === 4)
      const [first, duplicate, refused, resend] = client.frames.filter((f) => f.seq !== undefined)
      assert.deepStrictEqual(first, { type: "update", n: 1, v: 1, seq: 1 })
      assert.deepStrictEqual(duplicate, { type: "state", n: 1, v: 1, seq: 1, duplicate: true })
      assert.strictEqual(refused!.type, "error")
      assert.strictEqual(refused!.seq, 2)
      assert.strictEqual(refused!.applied, false)
      assert.include(refused!.message, "maxValueBytes")
      assert.deepStrictEqual(resend, { type: "resend", from: 2, seq: 4 })
    }).pipe(Effect.scoped)
  )

  it.effect("a pure handler: a burst waiting together is one modification, its answers in order", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore()
      const port = yield* serveWorker(shared, {}, pureSession)
      const client = yield* connect(port, { client: clientId("pure-burst") })
      const fresh = pureCalls.fresh
      const total = pureCalls.total
      // the first frame taken alone, waiting for the lock: the others wait together behind it
      yield* lockHeld(shared, client.token)
      yield* takenAlone(client, { type: "bump", by: 1, seq: 1 })
      for (let seq = 2; seq <= 5; seq++) client.send({ type: "bump", by: seq === 4 ? 0 : 1, seq })
      yield* releaseLock(client)
      yield* client.waitFor((f) => f.seq === 5)
      assert.deepStrictEqual(answers(client), [
        ["update", 1],
        ["update", 2],
        ["update", 3],
        ["error", 4],
        ["update", 5]
      ])
      assert.deepStrictEqual(
        client.frames.filter((f) => f.type === "update").map((f) => f.n),
        [1, 2, 3, 4]
      )
      assert.deepStrictEqual(
        client.frames.find((f) => f.seq === 4),
        {
          type: "error",
          message: "a bump of 0",
          seq: 4,
          applied: false
        }
      )
      // two modifications (the first frame's, then the burst's), each decided once: one call
      // on fresh values each, a call per event
      assert.strictEqual(pureCalls.fresh - fresh, 2)
      assert.strictEqual(pureCalls.total - total, 5)
    }).pipe(Effect.scoped)
  )

  it.effect("a pure handler's now is read once its burst has the lock, not before its wait", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore()
      const port = yield* serveWorker(shared, {}, pureSession)
      const client = yield* connect(port, { client: clientId("pure-now") })
      yield* lockHeld(shared, client.token)
      yield* takenAlone(client, { type: "bump", by: 1, seq: 1 })
      const released = (yield* Clock.currentTimeMillis) + 300
      yield* releaseLock(client)
      yield* client.waitFor((f) => f.seq === 1)
      // no earlier than what the modification it waited for could have stored
      assert.isAtLeast(pureCalls.now, released)
    }).pipe(Effect.scoped)
  )

  it.effect("a pure handler's throw refuses its own event; the burst's others are answered as they are", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore()
      const port = yield* serveWorker(shared, {}, pureSession)
      const client = yield* connect(port, { client: clientId("pure-defect") })
      yield* lockHeld(shared, client.token)
      yield* takenAlone(client, { type: "bump", by: 1, seq: 1 })
      const fresh = pureCalls.fresh
      // one burst (a socket holds 4 at most): a duplicate, an event applied, a defect, an event applied
      client.send({ type: "bump", by: 1, seq: 1 })
      client.send({ type: "bump", by: 1, seq: 2 })
      client.send({ type: "bump", by: 1, seq: 3, die: true })
      client.send({ type: "bump", by: 1, seq: 4 })
      yield* releaseLock(client)
      yield* client.waitFor((f) => f.seq === 4)
      assert.deepStrictEqual(
        client.frames.filter((f) => f.seq !== undefined),
        [
          { type: "update", n: 1, v: 1, seq: 1 },
          { type: "state", n: 1, v: 1, seq: 1, duplicate: true },
          { type: "update", n: 2, v: 2, seq: 2 },
          { type: "error", message: "the event's handler failed unexpectedly", seq: 3, applied: false },
          { type: "update", n: 3, v: 3, seq: 4 }
        ]
      )
      // the first frame's modification and the burst's (the defect's event and the one after
      // it called on what 2 left): the throw did not split the burst
      assert.strictEqual(pureCalls.fresh - fresh, 2)
      // the defect refused its event only: what the others wrote is stored
      const counter = yield* Effect.flatMap(StateManager.StateManager, (states) =>
        states.get(client.token, pureSession.options.slices.counter)
      ).pipe(Effect.provide(Worker.layerState.pipe(Layer.provide(Layer.succeedContext(shared)))))
      assert.strictEqual(counter.n, 3)
    }).pipe(Effect.scoped)
  )

  it.effect("a pure handler's burst whose write fails answers its duplicates and resends as such", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore({ maxValueBytes: 8192 })
      const port = yield* serveWorker(shared, {}, pureSession)
      const client = yield* connect(port, { client: clientId("pure-unwritten") })
      yield* lockHeld(shared, client.token)
      yield* takenAlone(client, { type: "bump", by: 1, seq: 1 })
      const fresh = pureCalls.fresh
      client.send({ type: "bump", by: 1, seq: 1 })
      client.send({ type: "bump", by: 1, seq: 2, noteBytes: 10_000 })
      client.send({ type: "bump", by: 1, seq: 4 })
      yield* releaseLock(client)
      yield* client.waitFor((f) => f.seq === 4)
      assert.deepStrictEqual(
        client.frames.filter((f) => f.seq !== undefined),
        [
          { type: "update", n: 1, v: 1, seq: 1 },
          { type: "state", n: 1, v: 1, seq: 1, duplicate: true },
          {
            type: "error",
            message: client.frames.find((f) => f.seq === 2)!.message,
            seq: 2,
            applied: false
          },
          { type: "resend", from: 2, seq: 4 }
        ]
      )
      assert.include(client.frames.find((f) => f.seq === 2)!.message, "maxValueBytes")
      // the first frame's modification, then the burst's, its write refused
      assert.strictEqual(pureCalls.fresh - fresh, 2)
    }).pipe(Effect.scoped)
  )

  it.effect("frames beyond the queue bound are answered, none dropped silently", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("queue") })
      yield* slowFirst(client)
      for (let seq = 2; seq <= 12; seq++) client.send({ type: "bump", by: 1, seq })
      client.send({ type: "bump", by: 1 })
      yield* releaseFirst(client)
      // the frame without seq: applied or refused, answered either way
      yield* client.waitFor((f) => (f.type === "update" || f.type === "error") && f.seq === undefined)
      yield* client.waitFor((f) => f.seq === 12)
      // every frame with seq answered once
      const seqs = answers(client).map(([, seq]) => seq)
      assert.deepStrictEqual(
        [...seqs].sort((a, b) => a - b),
        Array.from({ length: 12 }, (_, i) => i + 1)
      )
      // refused before their turn, their seq not counted: sent again from each
      const refused = client.frames.filter((f) => f.type === "resend" && f.from === f.seq)
      assert.isAbove(refused.length, 0)
      // and the frames after a refused one are not applied over the gap
      const updates = client.frames.filter((f) => f.type === "update" && f.seq !== undefined).map((f) => f.seq)
      assert.deepStrictEqual(
        updates,
        Array.from({ length: updates.length }, (_, i) => i + 1)
      )
    }).pipe(Effect.scoped)
  )

  it.effect("frames beyond the bytes bound are answered resend from themselves", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("bytes") })
      yield* slowFirst(client)
      // three frames of 900 bytes: the third takes the waiting ones past 2048 bytes
      const pad = "x".repeat(860)
      for (let seq = 2; seq <= 4; seq++) client.send({ type: "bump", by: 1, seq, pad })
      // the resend of the third is answered at once, before the first's wait is over
      yield* client.waitFor((f) => f.type === "resend")
      yield* releaseFirst(client)
      yield* client.waitFor((f) => f.seq === 3)
      assert.deepStrictEqual(answers(client), [
        ["resend", 4],
        ["update", 1],
        ["update", 2],
        ["update", 3]
      ])
    }).pipe(Effect.scoped)
  )

  for (const [kind, served] of [
    ["an effectful", session],
    ["a pure", pureSession]
  ] as const) {
    it.effect(
      `${kind} handler: a resend after a reconnect is answered duplicate, not applied twice; a gap asks for L+1`,
      () =>
        Effect.gen(function* () {
          const shared = yield* sharedStore()
          const port = yield* serveWorker(shared, {}, served)
          const id = clientId("resend")
          const first = yield* connect(port, { client: id })
          for (let seq = 1; seq <= 3; seq++) first.send({ type: "bump", by: 1, seq })
          yield* first.waitFor((f) => f.seq === 3)
          yield* first.close
          const again = yield* reconnect(port, { client: id, token: first.token })
          again.send({ type: "bump", by: 1, seq: 2 })
          const duplicate = yield* again.waitFor((f) => f.seq === 2)
          assert.deepStrictEqual(duplicate, { type: "state", n: 3, v: 3, seq: 2, duplicate: true })
          // out of order: 5 before 4
          again.send({ type: "bump", by: 1, seq: 5 })
          assert.deepStrictEqual(yield* again.waitFor((f) => f.seq === 5), { type: "resend", from: 4, seq: 5 })
          again.send({ type: "bump", by: 1, seq: 4 })
          again.send({ type: "bump", by: 1, seq: 5 })
          yield* again.waitFor((f) => f.seq === 5 && f.type === "update")
          const counter = yield* Effect.flatMap(StateManager.StateManager, (states) =>
            states.get(first.token, session.options.slices.counter)
          ).pipe(Effect.provide(Worker.layerState.pipe(Layer.provide(Layer.succeedContext(shared)))))
          assert.strictEqual(counter.n, 5)
        }).pipe(Effect.scoped)
    )
  }

  it.effect("a resend to another worker is answered duplicate", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore()
      const a = yield* serveWorker(shared)
      const b = yield* serveWorker(shared)
      const id = clientId("move")
      const onA = yield* connect(a, { client: id })
      onA.send({ type: "bump", by: 7, seq: 1 })
      yield* onA.waitFor((f) => f.seq === 1)
      yield* onA.close
      const onB = yield* reconnect(b, { client: id, token: onA.token })
      assert.deepStrictEqual(onB.frames.at(-1), { type: "state", n: 7, v: 1 })
      onB.send({ type: "bump", by: 7, seq: 1 })
      assert.deepStrictEqual(yield* onB.waitFor((f) => f.seq === 1), {
        type: "state",
        n: 7,
        v: 1,
        seq: 1,
        duplicate: true
      })
      onB.send({ type: "bump", by: 1, seq: 2 })
      assert.strictEqual((yield* onB.waitFor((f) => f.seq === 2)).n, 8)
    }).pipe(Effect.scoped)
  )

  it.effect("two clients on one token count apart", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const one = yield* connect(port, { client: clientId("one") })
      one.send({ type: "bump", by: 1, seq: 1 })
      yield* one.waitFor((f) => f.seq === 1)
      yield* one.close
      const two = yield* reconnect(port, { client: clientId("two"), token: one.token })
      two.send({ type: "bump", by: 1, seq: 1 })
      two.send({ type: "bump", by: 1, seq: 1 })
      yield* two.waitFor((f) => f.seq === 1 && f.duplicate === true)
      assert.deepStrictEqual(
        answers(two).map(([type]) => type),
        ["update", "state"]
      )
      assert.strictEqual(two.frames.find((f) => f.type === "update")!.n, 2)
    }).pipe(Effect.scoped)
  )

  it.effect("past 8 clients the least recent is forgotten, whatever it sends", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const ids = Array.from({ length: SocketSession.maxClients + 1 }, (_, i) => clientId(`c${i}`))
      let token: string | undefined
      for (const id of ids) {
        const client = yield* reconnect(port, token === undefined ? { client: id } : { client: id, token })
        token = client.token
        client.send({ type: "bump", by: 1, seq: 1 })
        yield* client.waitFor((f) => f.seq === 1)
        yield* client.close
      }
      const first = yield* reconnect(port, { client: ids[0]!, token: token! })
      first.send({ type: "bump", by: 1, seq: 1 })
      first.send({ type: "bump", by: 1, seq: 2 })
      yield* first.waitFor((f) => f.seq === 2)
      assert.deepStrictEqual(answers(first), [
        ["forgotten", 1],
        ["forgotten", 2]
      ])
      yield* first.close
      // the ninth is remembered still
      const last = yield* reconnect(port, { client: ids.at(-1)!, token: token! })
      last.send({ type: "bump", by: 1, seq: 2 })
      assert.deepStrictEqual(yield* last.waitFor((f) => f.seq === 2), {
        type: "update",
        n: SocketSession.maxClients + 2,
        v: SocketSession.maxClients + 2,
        seq: 2
      })
    }).pipe(Effect.scoped)
  )

  it.effect("a frame with seq but no client id is refused, not applied", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port)
      client.send({ type: "bump", by: 1, seq: 1 })
      const answer = yield* client.waitFor((f) => f.seq === 1)
      assert.strictEqual(answer.type, "error")
      assert.strictEqual(answer.applied, false)
    }).pipe(Effect.scoped)
  )

  it.effect("leaseDurability memory is refused at build", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore({ leaseDurability: "memory" })
      const exit = yield* Effect.exit(serveWorker(shared))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), "leaseDurability")
    }).pipe(Effect.scoped)
  )

  it.effect("a maxValueBytes below the seq slice's largest is refused at build", () =>
    Effect.gen(function* () {
      // 4 KiB holds any app slice of a few fields, not 8 clients and 64 dropped ids
      const below = yield* Effect.exit(Effect.flatMap(sharedStore({ maxValueBytes: 4096 }), serveWorker))
      assert.isTrue(Exit.isFailure(below))
      assert.include(String(Exit.isFailure(below) ? below.cause : ""), "maxValueBytes")
      const at = yield* Effect.exit(
        Effect.flatMap(sharedStore({ maxValueBytes: SocketSession.seqSliceMaxBytes }), serveWorker)
      )
      assert.isTrue(Exit.isSuccess(at))
    }).pipe(Effect.scoped)
  )

  it.effect("the seq slice at its largest takes seqSliceMaxBytes", () =>
    Effect.gen(function* () {
      // 8 clients and 64 dropped ids, of 64 characters each: what the bound was computed from
      const clients = Array.from({ length: SocketSession.maxClients + 64 }, (_, i) => `${i}`.padStart(64, "c"))
      let state = { clients: [], forgotten: [] } as Seq.SeqState
      for (const client of clients) state = Seq.advance(state, client, Number.MAX_SAFE_INTEGER)
      assert.strictEqual(state.forgotten.length, 64)
      const encoded = JSON.stringify(Schema.encodeSync(Seq.SeqState)(state))
      assert.strictEqual(Buffer.byteLength(encoded), SocketSession.seqSliceMaxBytes)
    })
  )

  it("a handler returning a wrong update does not compile", () => {
    SocketSession.make({
      events: Schema.Struct({ type: Schema.Literal("bump") }),
      updates: Count,
      slices: {},
      // @ts-expect-error: the update is not a Count
      handle: (_event, values) => Effect.succeed([{ n: "one" }, values] as const),
      view: () => ({ n: 0, v: 0 })
    })
  })
})
