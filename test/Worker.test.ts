import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { memoryWorkers, redisWorkers } from "./delivery/workers.js"
import { Counter } from "./state/workers.js"
import * as Monitor from "./support/monitor.js"
import * as Server from "./support/RedisServer.js"

describe("Worker", () => {
  it.effect("two builds of the layer are two workers with distinct instance ids", () =>
    Effect.gen(function* () {
      const fx = yield* memoryWorkers()
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      assert.notStrictEqual(a.id, b.id)
      assert.strictEqual(a.tokens.instanceId, a.id)
      yield* a.tokens.link("token1", "sid1")
      // independent: B has no local socket, A's record is visible to it through the store
      assert.isTrue((yield* b.tokens.local("token1"))._tag === "None")
      assert.strictEqual((yield* b.tokens.owner("token1"))._tag, "Some")
    })
  )

  it.live(
    "closing a worker stops its loops, then flushes its leases, then removes its records",
    () =>
      Effect.gen(function* () {
        const server = yield* Server.start()
        const fx = yield* redisWorkers(server.url, { oplock: true, leaseDurability: "memory" })
        const a = yield* fx.worker()
        yield* a.tokens.link("sock1", "sid1")
        // Under a lease with acknowledge-from-memory, the value is written only by the flush.
        for (let i = 0; i < 3; i++) yield* a.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
        assert.isNull(yield* server.command("GET", "leasehold:{t}:s:counter"))
        const m = yield* Monitor.monitor(server)
        yield* a.close
        // everything the server ran before the marker, so whatever the close sent
        const end = yield* Monitor.barrier(server, m)
        const seen = m.commands.slice(0, end).map((command) => command.args)
        const index = (match: (args: ReadonlyArray<string>) => boolean) => seen.findIndex(match)
        const flushed = index((args) => args[0] === "set" && args[1] === "leasehold:{t}:s:counter")
        const removed = index((args) => args[0] === "del" && args[1] === "leasehold:{sock1}:socket")
        assert.isAtLeast(flushed, 0, "the lease was flushed")
        assert.isAtLeast(removed, 0, "the record was removed")
        assert.isBelow(flushed, removed)
        const reads = seen.flatMap((args, i) => (args[0] === "xread" ? [i] : []))
        const lastRead = reads.length === 0 ? -1 : reads[reads.length - 1]!
        assert.isBelow(lastRead, flushed, "no mailbox read after the loops were stopped")
        assert.strictEqual(yield* server.command("GET", "leasehold:{t}:s:counter"), JSON.stringify({ n: 3 }))
        assert.strictEqual(yield* server.command("EXISTS", "leasehold:{sock1}:socket"), 0)
      }),
    20_000
  )
})
