/**
 * Calls between workers as a mailbox's reader sees them (`internal/mailbox/calls.ts`), over
 * the embedded store: a call is served once (a copy, or a call a process before this one
 * under the same instance id had read, is not served again), its reply lands in the caller's
 * mailbox, and a reply reaches only the process that sent the call; on a real server, the
 * cursor that says which calls were served lives as long as the mailbox.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { type Answer, type Calls, call, make, type Reading, receive } from "../src/internal/mailbox/calls.js"
import { MailboxStart } from "../src/internal/storeModel.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { Store } from "../src/Store.js"
import { redisWorkers } from "./delivery/workers.js"
import * as RedisServer from "./support/RedisServer.js"

const append = { maxLen: 1000, ttlMs: 60_000 }

/** A store, and a reader's view of what it served (its `seen` as the mailbox's reader keeps it). */
const setup = Effect.gen(function* () {
  const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provide(LeaseholdConfig.layer({}))))
  const store = Context.get(context, Store)
  const served = new Map<string, Set<number>>()
  const seen: Reading["seen"] = {
    has: (from, seq) => served.get(from)?.has(seq) === true,
    add: (from, seq) => {
      const set = served.get(from) ?? new Set()
      set.add(seq)
      served.set(from, set)
    }
  }
  return { store, seen }
})

const callEntry = (id: number, nonce: string, token = "tab-1") =>
  JSON.stringify({ call: { id, from: "caller", nonce, token, request: { by: 1 } } })

/** A serving worker's calls, counting what it serves, answering `Done`. */
const serving = (calls: Calls, count: { n: number }) => {
  calls.serve = () =>
    Effect.sync((): Answer => {
      count.n++
      return { _tag: "Done", value: { n: count.n }, delivery: "delivered" }
    })
}

describe("calls between workers", () => {
  it.live("a call is served once: not its copy, nor one a process before this one had read", () =>
    Effect.gen(function* () {
      const { store, seen } = yield* setup
      const calls = yield* make
      const count = { n: 0 }
      serving(calls, count)
      // the process before this one under the same id read up to entry 100-0
      const reading: Reading = { store, append, seen, servedUpTo: "100-0" }
      yield* receive(calls, reading, "99-5", callEntry(1, "old"))
      yield* receive(calls, reading, "100-0", callEntry(2, "old"))
      yield* receive(calls, reading, "100-1", callEntry(3, "old"))
      // its copy (an append retried), at another entry
      yield* receive(calls, reading, "100-2", callEntry(3, "old"))
      // the same number from another process of the caller: another call
      yield* receive(calls, reading, "100-3", callEntry(3, "new"))
      yield* Effect.yieldNow
      yield* Effect.sleep(20)
      assert.strictEqual(count.n, 2)
      // each reply in the caller's mailbox, with the caller's process and number
      const replies = (yield* store.mailboxRead("caller", MailboxStart, { count: 10 })).map((e) =>
        JSON.parse(e.payload)
      )
      assert.deepStrictEqual(
        replies.map((r) => [r.reply.id, r.reply.nonce, r.reply.answer.value.n]),
        [
          [3, "old", 1],
          [3, "new", 2]
        ]
      )
    }).pipe(Effect.scoped)
  )

  it.live("a reply completes the call of this process only; a call without a session is answered not applied", () =>
    Effect.gen(function* () {
      const { store, seen } = yield* setup
      const caller = yield* make
      const server = yield* make
      // the socket of tab-1 is on worker "server": the call goes to its mailbox
      yield* store.claimSocket("tab-1", { instanceId: "server", connectionId: "c-1" })
      const sending = { store, instanceId: "caller", append }
      const waiting = yield* Effect.forkChild(call(caller, sending, "tab-1", { by: 1 }, Duration.seconds(10)))
      const [sent] = yield* untilRead(store, "server")
      const request = JSON.parse(sent!.payload).call
      assert.deepStrictEqual([request.from, request.nonce, request.token], ["caller", caller.nonce, "tab-1"])
      // a reply to a call of another process under the caller's id is not this one's
      yield* receive(
        caller,
        { store, append, seen, servedUpTo: MailboxStart },
        "1-0",
        JSON.stringify({
          reply: { id: request.id, nonce: "another", answer: { _tag: "Done", value: 7, delivery: "sent" } }
        })
      )
      assert.isUndefined(waiting.pollUnsafe())
      // served by a worker without a session: answered, not applied
      yield* receive(server, { store, append, seen, servedUpTo: MailboxStart }, sent!.id, sent!.payload)
      const [reply] = yield* untilRead(store, "caller")
      yield* receive(caller, { store, append, seen, servedUpTo: MailboxStart }, reply!.id, reply!.payload)
      const called = yield* Fiber.join(waiting)
      assert.isTrue(Option.isSome(called))
      const { answer } = Option.getOrThrow(called)
      assert.deepStrictEqual(answer, {
        _tag: "Failed",
        message: "the worker holding the socket serves no socket session",
        code: "NoSession",
        refused: false,
        applied: false
      })
      assert.strictEqual(caller.pending.size, 0)
      // a token without a socket: nothing sent
      assert.isTrue(Option.isNone(yield* call(caller, sending, "tab-2", { by: 1 }, Duration.seconds(10))))
    }).pipe(Effect.scoped)
  )
})

/** The entries of `instanceId`'s mailbox, once there is one. */
const untilRead = (store: Store["Service"], instanceId: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 500; i++) {
      const entries = yield* store.mailboxRead(instanceId, MailboxStart, { count: 10 })
      if (entries.length > 0) return entries
      yield* Effect.sleep(10)
    }
    return yield* Effect.die(`no entry in ${instanceId}'s mailbox within 5 s`)
  })

describe("a mailbox's cursor", () => {
  it.live(
    "lives as long as the mailbox: a reader that reads nothing for longer than the expiration keeps it",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        // the mailbox (and its cursor) expire 3 s after they were last refreshed
        const { worker, store } = yield* redisWorkers(server.url, {
          tokenExpiration: "3 seconds",
          lockExpiration: "2 seconds"
        })
        const a = yield* worker()
        // one entry read: the cursor is stored, then nothing more for twice the expiration
        yield* store.mailboxAppend(a.id, "not an update", { maxLen: 100, ttlMs: 3_000 })
        const cursorKey = `leasehold:cursor:${a.id}`
        for (let i = 0; i < 100 && (yield* server.command("EXISTS", cursorKey)) !== 1; i++) yield* Effect.sleep(50)
        yield* Effect.sleep(6_000)
        assert.strictEqual(yield* server.command("EXISTS", cursorKey), 1)
        assert.isAbove(Number(yield* server.command("PTTL", cursorKey)), 0)
      }).pipe(Effect.scoped),
    30_000
  )
})
