/**
 * Delivery behaviour shared by both stores: routing to the socket's owner (TM13), typed
 * payloads (TM14), order, undecodable and stale entries, bad input, and the outbox.
 */
import { assert, describe } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Mailbox from "../../src/Mailbox.js"
import type { Store } from "../../src/Store.js"
import type * as TokenManager from "../../src/TokenManager.js"
import { failsWith } from "../conformance/helpers.js"
import type { LogLine } from "../support/logs.js"
import { type DeliveryWorker, handled, mailboxEntries, type Update, update, type WorkerOptions } from "./workers.js"

export interface Fixture {
  readonly store: Store.Service
  readonly logs: ReadonlyArray<LogLine>
  readonly worker: (options?: WorkerOptions) => Effect.Effect<DeliveryWorker, never, Scope.Scope>
}

export interface Tools {
  /** Wait (driving the TestClock where there is one) until `check` holds. */
  readonly until: (label: string, check: Effect.Effect<boolean>) => Effect.Effect<void>
}

export interface DeliveryBackend {
  readonly name: string
  readonly test: (name: string, body: (fx: Fixture, tools: Tools) => Effect.Effect<void, unknown, Scope.Scope>) => void
}

const ns = (values: ReadonlyArray<readonly [string, Update]>) => values.map(([, value]) => value.n)

const dropped = (reason: string) =>
  Effect.map(Metric.value(Metric.withAttributes(Mailbox.dropped, { reason: reason })), (state) => state.count)

const linked = (worker: DeliveryWorker, token: string, connection: string) =>
  Effect.map(worker.tokens.link(token, connection), (result: TokenManager.Linked) => {
    assert.strictEqual(result.token, token)
    return result
  })

/**
 * Every entry appended to these workers' mailboxes so far has been handled (`handled`):
 * what a worker is going to deliver of them, it has. A forwarding worker first.
 */
const settled = (fx: Fixture, { until }: Tools, ...workers: ReadonlyArray<DeliveryWorker>) =>
  handled(fx.store, until, workers)

export const deliverySuite = (backend: DeliveryBackend) =>
  describe(`delivery (${backend.name})`, () => {
    backend.test("TM13: an update reaches the worker holding the socket, and only it", (fx, tools) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        yield* linked(b, "token2", "sid2")
        const { until } = tools
        // 1. from B to A's socket
        assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "sent")
        yield* until(
          "A receives",
          Effect.sync(() => a.received.length === 1)
        )
        deepStrictEqual(a.received, [["token1", update(1)]])
        // 2. from B to its own socket: delivered at once
        assert.strictEqual(yield* b.mailbox.send("token2", update(2)), "delivered")
        deepStrictEqual(b.received, [["token2", update(2)]])
        // 3. A's socket is gone: dropped, delivered nowhere
        yield* a.tokens.disconnect("token1", "sid1")
        const noOwnerBefore = yield* dropped("no-owner")
        assert.strictEqual(yield* b.mailbox.send("token1", update(3)), "no-owner")
        yield* settled(fx, tools, a, b)
        assert.strictEqual(a.received.length, 1)
        assert.strictEqual(b.received.length, 1)
        assert.strictEqual((yield* dropped("no-owner")) - noOwnerBefore, 1)
        // 4. the socket reconnects on B
        yield* linked(b, "token1", "sid1")
        assert.strictEqual(yield* b.mailbox.send("token1", update(4)), "delivered")
        deepStrictEqual(ns(b.received), [2, 4])
        // 5. and back on A
        yield* b.tokens.disconnect("token1", "sid1")
        yield* linked(a, "token1", "sid1")
        assert.strictEqual(yield* b.mailbox.send("token1", update(5)), "sent")
        yield* until(
          "A receives again",
          Effect.sync(() => a.received.length === 2)
        )
        deepStrictEqual(ns(a.received), [1, 5])
        deepStrictEqual(ns(b.received), [2, 4])
      })
    )

    backend.test("TM14: a structured update arrives with its types", (fx, { until }) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        const value = update(7, { route: { path: "/rooms/7", query: { tab: "chat", page: "2" } } })
        yield* b.mailbox.send("token1", value)
        yield* until(
          "A receives",
          Effect.sync(() => a.received.length === 1)
        )
        const [, got] = a.received[0]!
        assert.instanceOf(got.at, Date)
        assert.strictEqual(got.at.getTime(), value.at.getTime())
        deepStrictEqual(got, value)
      })
    )

    backend.test("updates from one sender arrive in order, once each", (fx, tools) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        for (let i = 1; i <= 50; i++) assert.strictEqual(yield* b.mailbox.send("token1", update(i)), "sent")
        yield* tools.until(
          "A receives 50",
          Effect.sync(() => a.received.length >= 50)
        )
        yield* settled(fx, tools, a)
        deepStrictEqual(
          ns(a.received),
          Array.from({ length: 50 }, (_, i) => i + 1)
        )
      })
    )

    backend.test("an entry that does not decode is skipped and counted; the next one is delivered", (fx, { until }) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        const before = yield* dropped("undecodable")
        const append = { maxLen: 100, ttlMs: 60_000 }
        // not JSON; a newer schema's shape; a token that is not valid
        yield* fx.store.mailboxAppend(a.id, "{not json", append)
        yield* fx.store.mailboxAppend(a.id, JSON.stringify({ token: "token1", update: { n: "seven" } }), append)
        yield* fx.store.mailboxAppend(
          a.id,
          JSON.stringify({ token: "to*ken", update: { n: 1, at: "x", tags: [] } }),
          append
        )
        yield* b.mailbox.send("token1", update(8))
        yield* until(
          "A receives",
          Effect.sync(() => a.received.length === 1)
        )
        deepStrictEqual(ns(a.received), [8])
        assert.strictEqual((yield* dropped("undecodable")) - before, 3)
        assert.isTrue(yield* a.health.healthy)
      })
    )

    backend.test("a copy of an update (an append retried after a lost reply) is delivered once", (fx, tools) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        const before = yield* dropped("duplicate")
        const entry = (n: number, seq: number) =>
          JSON.stringify({
            token: "token1",
            update: { n, at: update(n).at.toISOString(), tags: [`t${n}`] },
            from: "sender-1",
            seq
          })
        const append = { maxLen: 100, ttlMs: 60_000 }
        yield* fx.store.mailboxAppend(a.id, entry(1, 0), append)
        yield* fx.store.mailboxAppend(a.id, entry(1, 0), append)
        yield* fx.store.mailboxAppend(a.id, entry(2, 1), append)
        // the same number from another sender is another update
        yield* fx.store.mailboxAppend(a.id, entry(3, 0).replace("sender-1", "sender-2"), append)
        yield* tools.until(
          "A receives",
          Effect.sync(() => a.received.length >= 3)
        )
        yield* settled(fx, tools, a)
        deepStrictEqual(ns(a.received), [1, 2, 3])
        assert.strictEqual((yield* dropped("duplicate")) - before, 1)
      })
    )

    backend.test("an entry for a socket that moved is forwarded once to its new owner", (fx, tools) =>
      Effect.gen(function* () {
        const { until } = tools
        const a = yield* fx.worker()
        const c = yield* fx.worker()
        yield* linked(c, "token1", "sid1")
        const encode = (n: number, forwarded: boolean) =>
          JSON.stringify({ token: "token1", update: { n, at: update(n).at.toISOString(), tags: [`t${n}`] }, forwarded })
        const append = { maxLen: 100, ttlMs: 60_000 }
        const notOwner = yield* dropped("not-owner")
        // A reads an update for token1, which C holds now: forwarded to C.
        yield* fx.store.mailboxAppend(a.id, encode(1, false), append)
        yield* until(
          "C receives",
          Effect.sync(() => c.received.length === 1)
        )
        deepStrictEqual(c.received, [["token1", update(1)]])
        // An update that was forwarded already is not passed on again.
        yield* fx.store.mailboxAppend(a.id, encode(2, true), append)
        yield* until(
          "dropped",
          Effect.map(dropped("not-owner"), (n) => n - notOwner === 1)
        )
        // A first: what it would forward, it has appended to C's mailbox before it is done
        yield* settled(fx, tools, a, c)
        assert.strictEqual(c.received.length, 1)
        assert.strictEqual(a.received.length, 0)
      })
    )

    backend.test("bad input fails with a typed error and sends nothing", (fx, tools) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        yield* failsWith(b.mailbox.send("token*", update(1)), "InvalidToken")
        const invalid = yield* failsWith(b.mailbox.send("token1", { n: "one" }), "InvalidUpdate")
        assert.strictEqual(invalid.token, "token1")
        yield* settled(fx, tools, a)
        deepStrictEqual(yield* mailboxEntries(fx.store, a), [])
        assert.strictEqual(a.received.length, 0)
      })
    )

    backend.test(
      "an update for a socket of this worker is checked by the schema too: InvalidUpdate, nothing delivered",
      (fx, tools) =>
        Effect.gen(function* () {
          const a = yield* fx.worker()
          yield* linked(a, "token1", "sid1")
          const invalid = yield* failsWith(a.mailbox.send("token1", { n: "one" }), "InvalidUpdate")
          assert.strictEqual(invalid.token, "token1")
          yield* settled(fx, tools, a)
          assert.strictEqual(a.received.length, 0)
          // a valid one is delivered here, with no envelope and no append
          assert.strictEqual(yield* a.mailbox.send("token1", update(1)), "delivered")
          assert.strictEqual(a.received.length, 1)
          deepStrictEqual(yield* mailboxEntries(fx.store, a), [])
        })
    )

    backend.test("closing a worker removes its records and keeps the others'", (fx) =>
      Effect.gen(function* () {
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* linked(a, "token1", "sid1")
        yield* linked(b, "token2", "sid2")
        yield* a.close
        const left = yield* Stream.runCollect(b.tokens.tokens)
        deepStrictEqual(
          [...left].map(([token, record]) => [token, record.instanceId]),
          [["token2", b.id]]
        )
        assert.strictEqual(yield* b.mailbox.send("token1", update(1)), "no-owner")
      })
    )
  })
