import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/testing/TestClock"
import { encodeSocketRecord } from "../src/internal/codec.js"
import { makeKeys } from "../src/internal/keys.js"
import { envelopeOf } from "../src/internal/mailbox/env.js"
import * as Untyped from "../src/internal/mailbox/untyped.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import { Mailbox, typed } from "../src/Mailbox.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { TokenManager } from "../src/TokenManager.js"
import * as Worker from "../src/Worker.js"
import { type DeliveryBackend, deliverySuite } from "./delivery/suite.js"
import { memoryWorkers, Update, update } from "./delivery/workers.js"
import { untilOnTestClock } from "./support/poll.js"

const yields = Effect.forEach(Array.from({ length: 20 }), () => Effect.yieldNow, { discard: true })

const settle = Effect.andThen(TestClock.adjust(2_000), yields)

const memory: DeliveryBackend = {
  name: "memory",
  test: (name, body) =>
    it.effect(name, () =>
      Effect.gen(function* () {
        const fx = yield* memoryWorkers()
        yield* fx.logged(body(fx, { until: untilOnTestClock }))
      })
    )
}

deliverySuite(memory)

describe("delivery while the embedded store is unavailable", () => {
  it.effect("updates sent meanwhile wait in the outbox and arrive in order once it is back", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers({ retryDelayInitial: 100, retryDelayMax: 1_000 })
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      yield* a.tokens.link("token1", "sid1")
      yield* fx.control.setAvailable(false)
      for (let i = 1; i <= 5; i++) assert.strictEqual(yield* b.mailbox.send("token1", update(i)), "buffered")
      assert.strictEqual(yield* b.mailbox.buffered, 5)
      yield* settle
      assert.strictEqual(a.received.length, 0)
      yield* fx.control.setAvailable(true)
      yield* untilOnTestClock(
        "A receives all",
        Effect.sync(() => a.received.length >= 5)
      )
      yield* settle
      deepStrictEqual(
        a.received.map(([, value]) => value.n),
        [1, 2, 3, 4, 5]
      )
      assert.strictEqual(yield* b.mailbox.buffered, 0)
      // the next one goes straight through
      assert.strictEqual(yield* b.mailbox.send("token1", update(6)), "sent")
    })
  )

  it.effect("a full outbox drops new updates, counted, with one warning", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers({ retryDelayInitial: 100, retryDelayMax: 1_000 })
      const a = yield* fx.worker()
      const b = yield* fx.worker({ outboxCapacity: 3 })
      yield* a.tokens.link("token1", "sid1")
      yield* fx.control.setAvailable(false)
      const outcomes = []
      for (let i = 1; i <= 6; i++) outcomes.push(yield* fx.logged(b.mailbox.send("token1", update(i))))
      deepStrictEqual(outcomes, ["buffered", "buffered", "buffered", "dropped", "dropped", "dropped"])
      const warnings = fx.logs.filter((line) => line.message.startsWith("mailbox: outbox full"))
      assert.strictEqual(warnings.length, 1)
      yield* fx.control.setAvailable(true)
      yield* untilOnTestClock(
        "A receives the buffered ones",
        Effect.sync(() => a.received.length >= 3)
      )
      yield* settle
      deepStrictEqual(
        a.received.map(([, value]) => value.n),
        [1, 2, 3]
      )
    })
  )

  it.effect("a buffered update whose socket has no record waits for it until the restore grace ends (5 s)", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers({ retryDelayInitial: 100, retryDelayMax: 1_000 })
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      yield* fx.control.setAvailable(false)
      assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "buffered")
      assert.strictEqual(yield* b.mailbox.send("token1", update(2)), "buffered")
      yield* fx.control.setAvailable(true)
      // no record of token1 yet: the outbox keeps asking
      for (let i = 0; i < 20; i++) yield* Effect.andThen(TestClock.adjust(100), yields)
      assert.strictEqual(yield* b.mailbox.buffered, 2)
      yield* a.tokens.link("token1", "sid1")
      // within the grace: delivered once the record is there (a reader's blocking read is 1 s)
      for (let i = 0; i < 30 && a.received.length < 2; i++) yield* Effect.andThen(TestClock.adjust(100), yields)
      deepStrictEqual(
        a.received.map(([, value]) => value.n),
        [1, 2]
      )
      // a socket that never comes back: dropped once the grace is over, not before
      yield* fx.control.setAvailable(false)
      assert.strictEqual(yield* b.mailbox.send("token2", update(3)), "buffered")
      yield* fx.control.setAvailable(true)
      for (let i = 0; i < 45; i++) yield* Effect.andThen(TestClock.adjust(100), yields)
      assert.strictEqual(yield* b.mailbox.buffered, 1)
      for (let i = 0; i < 20; i++) yield* Effect.andThen(TestClock.adjust(100), yields)
      assert.strictEqual(yield* b.mailbox.buffered, 0)
      assert.strictEqual(a.received.length, 2)
    })
  )

  it.effect("a socket on the sender's own worker gets its update without the store", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers()
      const a = yield* fx.worker()
      yield* a.tokens.link("token1", "sid1")
      yield* fx.control.setAvailable(false)
      assert.strictEqual(yield* a.mailbox.send("token1", update(1)), "delivered")
      deepStrictEqual(a.received, [["token1", update(1)]])
      yield* fx.control.setAvailable(true)
    })
  )
})

describe("a forward the store cut short", () => {
  it.effect("an entry whose owner lookup lost its reply is read again and forwarded, not dropped as a copy", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers({ retryDelayInitial: 50, retryDelayMax: 200 })
      const a = yield* fx.worker()
      const c = yield* fx.worker()
      yield* c.tokens.link("token1", "sid1")
      // a sender appended to a's mailbox on a record it read before token1 moved to c
      const envelope = Schema.encodeSync(envelopeOf(Update))
      yield* fx.control.loseReplies("readSocket", 1)
      yield* fx.store.mailboxAppend(
        a.id,
        envelope({ token: "token1", update: update(1), forwarded: false, from: "sender-1", seq: 7 }),
        { maxLen: 100, ttlMs: 60_000 }
      )
      // a's look-up of the owner fails; its reader reads the entry again after its retry delay
      yield* untilOnTestClock(
        "c receives the update",
        Effect.sync(() => c.received.length >= 1)
      )
      yield* TestClock.adjust(1_000)
      deepStrictEqual(c.received, [["token1", update(1)]])
      deepStrictEqual(a.received, [])
    })
  )
})

describe("delivery after a take-over", () => {
  it.effect("updates still in the mailbox of the worker that lost a token are dropped, not passed on", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers({ presenceExpiration: 600 })
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      const keys = makeKeys("leasehold")
      yield* a.tokens.link("token1", "sid1")
      yield* a.tokens.link("token2", "sid2")
      // As while a was paused: its presence expired and b took token1's record over.
      yield* fx.control.setRaw(keys.presence(a.id), "", 0)
      yield* fx.control.setRaw(keys.socket("token1"), encodeSocketRecord({ instanceId: b.id, connectionId: "sid-b" }))
      yield* b.tokens.link("token1", "sid-b")
      yield* TestClock.adjust(600)
      yield* untilOnTestClock("a found token1 taken over", a.tokens.isLost("token1"))
      // updates a sender appended to a's mailbox on a lookup made before the take-over
      const envelope = Schema.encodeSync(envelopeOf(Update))
      for (const [token, n] of [
        ["token1", 1],
        ["token2", 2]
      ] as const) {
        yield* fx.store.mailboxAppend(a.id, envelope({ token, update: update(n), forwarded: false }), {
          maxLen: 100,
          ttlMs: 60_000
        })
      }
      yield* untilOnTestClock(
        "a delivers token2's update",
        Effect.sync(() => a.received.length >= 1)
      )
      yield* settle
      deepStrictEqual(
        a.received.map(([token, value]) => [token, value.n]),
        [["token2", 2]]
      )
      deepStrictEqual(b.received, [])
    })
  )
})

describe("the app's deliver runs with the mailbox's services", () => {
  class Label extends Context.Service<Label, string>()("test/Label") {}

  it.effect("its own over the caller's, and the caller's back once it ends, delivered or failed", () =>
    Effect.gen(function* () {
      const seen: Array<string> = []
      const worker = yield* Layer.build(
        Worker.layer({
          schema: Update,
          deliver: (_token, value) =>
            Effect.flatMap(Label, (label) => {
              seen.push(label)
              return value.n < 0 ? Effect.die("refused") : Effect.void
            })
        }).pipe(
          Layer.provideMerge(MemoryStore.layer),
          Layer.provideMerge(LeaseholdConfig.layer({})),
          Layer.provide(Layer.succeed(Label, "mailbox"))
        )
      )
      const mailbox = Untyped.sender(Context.get(worker, Mailbox))
      yield* Context.get(worker, TokenManager).link("token1", "sid1")
      const asCaller = Effect.gen(function* () {
        assert.strictEqual(yield* mailbox.send("token1", update(1)), "delivered")
        assert.strictEqual(yield* Label, "caller")
        // a delivery that fails is counted as dropped; the caller's context is back all the same
        assert.strictEqual(yield* mailbox.send("token1", update(-1)), "delivered")
        assert.strictEqual(yield* Label, "caller")
      }).pipe(Effect.provideService(Label, "caller"))
      yield* asCaller
      // from a fiber without the service at all
      assert.strictEqual(yield* mailbox.send("token1", update(2)), "delivered")
      deepStrictEqual(seen, ["mailbox", "mailbox", "mailbox"])
    })
  )
})

describe("Mailbox.typed: a send typed by the worker's schema", () => {
  const Updates = typed(Update)

  it.effect("delivers an update of the schema's type, with the worker's Mailbox from the environment", () =>
    Effect.gen(function* () {
      const received: Array<[string, Update]> = []
      const worker = yield* Layer.build(
        Worker.layer({
          schema: Update,
          deliver: (token, value) => Effect.sync(() => received.push([token, value]))
        }).pipe(Layer.provideMerge(MemoryStore.layer), Layer.provideMerge(LeaseholdConfig.layer({})))
      )
      yield* Context.get(worker, TokenManager).link("token1", "sid1")
      const outcome = yield* Updates.send("token1", update(1)).pipe(Effect.provide(worker))
      assert.strictEqual(outcome, "delivered")
      const send = yield* Updates.sender.pipe(Effect.provide(worker))
      assert.strictEqual(yield* send("token1", update(2)), "delivered")
      deepStrictEqual(
        received.map(([token, value]) => [token, value.n, value.at.getTime()]),
        [
          ["token1", 1, update(1).at.getTime()],
          ["token1", 2, update(2).at.getTime()]
        ]
      )
    })
  )

  it("refuses, at compile time, an update of another shape", () => {
    // checked by `npm run typecheck` (test/ is part of it): each line must fail to compile
    const wrongShape = () =>
      // @ts-expect-error: `n` is a number in the schema
      Updates.send("token1", { n: "one", at: new Date(0), tags: [] })
    const missingField = () =>
      // @ts-expect-error: the schema's `tags` is missing
      Updates.send("token1", { n: 1, at: new Date(0) })
    assert.isFunction(wrongShape)
    assert.isFunction(missingField)
  })
})
