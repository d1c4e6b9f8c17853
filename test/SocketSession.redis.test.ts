/**
 * The socket session's pure handler over a real redis-server, served in this process: a
 * burst decided in one step on the values this worker's last grant left is decided again
 * when the store refuses that step; what the refused run made of its events is never an
 * answer. A burst that read the writes of a group commit that then fails answers its
 * duplicates and frames over a gap of unknown outcome: those writes may never be stored.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as RedisStore from "leasehold/RedisStore"
import type * as StateManager from "leasehold/StateManager"
import { Store } from "leasehold/Store"
import { makeKeys } from "../src/internal/keys.js"
import { answers, Counter, connect, pureSession, serveWorker, serveWorkerWith, session } from "./session/support.js"
import * as Logs from "./support/logs.js"
import * as RedisServer from "./support/RedisServer.js"

/** A Redis store for the workers of a test, the oplock off (a modification may be made in one step) unless `input` says. */
const sharedStore = (server: RedisServer.RedisServer, input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const settings = LeaseholdConfig.layer({ oplock: false, retryJitter: false, commandTimeout: "2 seconds", ...input })
    const context = yield* Layer.build(RedisStore.layer({ url: server.url }).pipe(Layer.provideMerge(settings)))
    return Context.pick(Store, LeaseholdConfig.LeaseholdConfig)(context)
  })

/** The last answer with `seq`. */
const failed = (client: { readonly frames: ReadonlyArray<{ readonly [key: string]: any }> }) =>
  client.frames.filter((f) => f.seq !== undefined).at(-1)!

const clientId = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`

describe("SocketSession on Redis, a pure handler", () => {
  it.live("a step refused, then a failure before the burst is decided again: every frame answered unknown", () =>
    Effect.gen(function* () {
      const logs: Array<Logs.LogLine> = []
      const server = yield* RedisServer.start()
      const port = yield* serveWorker(yield* sharedStore(server), {}, pureSession).pipe(Effect.provide(Logs.into(logs)))
      const client = yield* connect(port, { client: clientId("refused") })
      client.send({ type: "bump", by: 1, seq: 1 })
      yield* client.waitFor((f) => f.seq === 1)
      client.send({ type: "bump", by: 1, seq: 2 })
      yield* client.waitFor((f) => f.seq === 2)
      // Another grant of the token since (its fence moved on, to something no grant can
      // increment) and another state: this worker's step on what its last grant left (seq 2
      // applied, n = 2) is refused, and its attempt at the lock then fails, before the burst
      // is decided on what is stored.
      const keys = makeKeys("leasehold")
      yield* Effect.orDie(server.command("SET", keys.fence(client.token), "moved"))
      yield* Effect.orDie(server.command("SET", keys.slice(client.token, "counter"), '{"n":100,"v":100}'))
      // one burst: a duplicate, and an event whose handler throws
      client.send({ type: "bump", by: 1, seq: 2 })
      client.send({ type: "bump", by: 1, seq: 3, die: true })
      yield* client.waitFor((f) => f.seq === 3)
      assert.deepStrictEqual(client.frames.filter((f) => f.seq !== undefined).slice(2), [
        // not the refused run's duplicate of n = 2, nor its refusal of 3: nothing is known
        { type: "error", message: failed(client).message, seq: 2, applied: "unknown" },
        { type: "error", message: failed(client).message, seq: 3, applied: "unknown" }
      ])
      assert.deepStrictEqual(answers(client).slice(0, 2), [
        ["update", 1],
        ["update", 2]
      ])
      // nor is the refused run's defect logged: that run did not count
      assert.deepStrictEqual(
        logs.filter((line) => line.message.includes("handler died")),
        []
      )
    }).pipe(Effect.scoped)
  )
})

/**
 * A modification of the token through the worker's `StateManager` that writes nothing and
 * keeps its turn `ms`: the modifications queued behind it are served together once it ends.
 * Done once its turn has begun.
 */
const turnHeld = (states: StateManager.StateManager.Service, token: string, ms: number) =>
  Effect.gen(function* () {
    const entered = yield* Deferred.make<void>()
    yield* Effect.forkScoped(
      states.modifyEffect(token, Counter, (counter) =>
        Effect.andThen(Deferred.succeed(entered, undefined), Effect.as(Effect.sleep(ms), [null, counter] as const))
      )
    )
    yield* Deferred.await(entered)
  })

describe("SocketSession on Redis, a lease's group commit lost", () => {
  for (const [name, served] of [
    ["an effectful handler", session],
    ["a pure handler", pureSession]
  ] as const) {
    it.live(`${name}: a duplicate and a gap read from writes never stored are answered unknown`, () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const shared = yield* sharedStore(server, { oplock: true, leaseDurability: "batch", retryDelayInitial: 50 })
        const { port, states } = yield* serveWorkerWith(shared, {}, served)
        const keys = makeKeys("leasehold")
        const id = clientId("lost")
        const old = yield* connect(port, { client: id })
        const token = old.token
        old.send({ type: "bump", by: 1, seq: 1 })
        yield* old.waitFor((f) => f.seq === 1)
        // the worker's lease busy: seq 2 waits behind a turn, then a second turn waits behind it
        yield* turnHeld(states, token, 300)
        old.send({ type: "bump", by: 1, seq: 2 })
        yield* old.flush
        yield* Effect.sleep("50 millis")
        // seq 2 served from memory, its group commit owed until the queue is empty
        yield* turnHeld(states, token, 500)
        // the same page reconnects (its old socket closed) and sends seq 2 again, and seq 4
        const page = yield* connect(port, { token, client: id })
        page.send({ type: "bump", by: 1, seq: 2 })
        page.send({ type: "bump", by: 1, seq: 4 })
        yield* page.flush
        // the lock taken from under the lease: the group commit of seq 2 fails
        yield* Effect.orDie(server.command("SET", keys.lock(token), "another-holder"))
        yield* page.waitFor((f) => f.seq === 4)
        const answered = page.frames.filter((f) => f.seq !== undefined)
        const message = answered[0]?.message
        // not `duplicate` (seq 2 was never stored: the page would not send it again), nor
        // `resend` from 3 (the page would skip seq 2): of unknown outcome, sent again as they were
        assert.deepStrictEqual(answered, [
          { type: "error", message, seq: 2, applied: "unknown" },
          { type: "error", message, seq: 4, applied: "unknown" }
        ])
        const stored = yield* Effect.orDie(server.command("GET", keys.slice(token, "counter")))
        assert.deepStrictEqual(JSON.parse(String(stored)), { n: 1, v: 1 })
        // sent again once the lock is free, seq 2 is applied
        yield* Effect.orDie(server.command("DEL", keys.lock(token)))
        page.send({ type: "bump", by: 1, seq: 2 })
        const applied = yield* page.waitFor((f) => f.type === "update" && f.seq === 2)
        assert.deepStrictEqual(applied, { type: "update", n: 2, v: 2, seq: 2 })
      }).pipe(Effect.scoped)
    )
  }
})
