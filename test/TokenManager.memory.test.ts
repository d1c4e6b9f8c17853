import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as TestClock from "effect/testing/TestClock"
import * as Logs from "./support/logs.js"
import { untilOnTestClock, untilReal } from "./support/poll.js"
import { settle } from "./support/testClock.js"
import { recordingTracer } from "./support/tracer.js"
import { memoryCluster } from "./tokens/cluster.js"
import { type TokenBackend, tokenSuite } from "./tokens/suite.js"

const memory: TokenBackend = {
  name: "memory",
  test: (name, input, options, body) =>
    it.effect(name, () =>
      Effect.gen(function* () {
        const cluster = yield* memoryCluster(input, options)
        yield* body(cluster, {
          advance: (ms) => Effect.andThen(TestClock.adjust(ms), settle),
          until: untilOnTestClock
        }).pipe(Effect.provide(Logs.into(cluster.logs)))
      })
    )
}

tokenSuite(memory)

const presenceOperations = new Set(["refreshPresence", "presenceMessages", "sendPresence", "isPresent"])

describe("TokenManager (memory): the restore", () => {
  it.effect("after a resubscription: one batched claim for every record, no read of an unchanged one", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const a = yield* cluster.worker()
      for (const token of ["tab-1", "tab-2", "tab-3"]) yield* a.tokens.link(token, `c-${token}`)
      yield* cluster.remove("tab-2")
      yield* untilReal("tab-2 claimed again", Effect.map(cluster.record("tab-2"), Option.isSome), { within: 5_000 })
      const before = yield* cluster.operations
      yield* cluster.dropSubscriptions
      yield* untilReal(
        "the restore ran",
        Effect.andThen(
          settle,
          Effect.map(cluster.operations, (n) => n > before)
        ),
        { within: 5_000 }
      )
      yield* settle
      // One batched claim per restore (the reconnection's new epoch may bring a second one),
      // and no read of the records that were unchanged.
      // (the presence loop's own refreshes run meanwhile)
      const calls = (yield* cluster.calls).slice(before).filter((name) => !presenceOperations.has(name))
      assert.isTrue(calls.length >= 1 && calls.length <= 2, calls.join())
      assert.isTrue(
        calls.every((name) => name === "claimSockets"),
        calls.join()
      )
      for (const token of ["tab-1", "tab-2", "tab-3"]) {
        deepStrictEqual(yield* cluster.record(token), Option.some({ instanceId: a.id, connectionId: `c-${token}` }))
      }
    })
  )
})

describe("TokenManager (memory): a disconnect racing the sockets loop", () => {
  it.effect("a socket that disconnects while its record is being claimed again leaves no record behind", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const held = yield* Deferred.make<void>()
      let holding = false
      const cluster = yield* memoryCluster(
        {},
        {
          // Hold the loop's next claim of one record until the test opens the gate.
          before: (operation) =>
            operation === "claimSocket" && holding
              ? Effect.andThen(Deferred.succeed(held, undefined), Deferred.await(gate))
              : Effect.void
        }
      )
      const a = yield* cluster.worker()
      yield* a.tokens.link("tab-1", "c1")
      yield* a.tokens.link("tab-2", "c2")
      holding = true
      yield* cluster.remove("tab-1")
      yield* Deferred.await(held)
      holding = false
      // the socket goes while the claim is in flight; the record is not there to delete yet
      yield* a.tokens.disconnect("tab-1", "c1")
      yield* Deferred.succeed(gate, undefined)
      // A restore queues behind the held re-claim (they run one at a time): once it has
      // called the store, the re-claim is over.
      const before = (yield* cluster.calls).length
      yield* cluster.dropSubscriptions
      yield* untilReal(
        "the restore after the re-claim",
        Effect.andThen(
          settle,
          Effect.map(cluster.calls, (calls) => calls.slice(before).includes("claimSockets"))
        ),
        { within: 5_000 }
      )
      deepStrictEqual(yield* cluster.record("tab-1"), Option.none())
      deepStrictEqual(yield* cluster.record("tab-2"), Option.some({ instanceId: a.id, connectionId: "c2" }))
      deepStrictEqual(yield* a.tokens.local("tab-1"), Option.none())
      deepStrictEqual(yield* a.tokens.owner("tab-1"), Option.none())
    })
  )
})

describe("TokenManager (memory): leasehold's spans", () => {
  it.effect("link, owner, disconnect and disconnectAll each make their span under an installed tracer", () =>
    Effect.gen(function* () {
      const cluster = yield* memoryCluster()
      const a = yield* cluster.worker()
      const { tracer, names } = yield* recordingTracer
      const linked = yield* Effect.withTracer(a.tokens.link("tab-1", "c-1"), tracer)
      assert.strictEqual(linked.token, "tab-1")
      deepStrictEqual(names, ["TokenManager.link"])
      // from the store: another worker's view
      const b = yield* cluster.worker()
      const owner = yield* Effect.withTracer(b.tokens.owner("tab-1"), tracer)
      deepStrictEqual(
        Option.map(owner, (record) => record.instanceId),
        Option.some(a.id)
      )
      yield* Effect.withTracer(a.tokens.disconnect("tab-1", "c-1"), tracer)
      yield* a.tokens.link("tab-2", "c-2")
      yield* Effect.withTracer(a.tokens.disconnectAll, tracer)
      deepStrictEqual(names, [
        "TokenManager.link",
        "TokenManager.owner",
        "TokenManager.disconnect",
        "TokenManager.disconnectAll"
      ])
      deepStrictEqual(yield* cluster.record("tab-2"), Option.none())
    })
  )
})
