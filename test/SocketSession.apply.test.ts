/**
 * `SocketSession.apply` over the embedded store, two workers served in this process: an
 * event applied from outside the sockets is applied where the token's socket is (here, or
 * by the worker holding it, asked through the mailboxes), its update reaches that socket,
 * and a refusal or a bad token is told as such, with nothing written.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import * as SocketSession from "leasehold/SocketSession"
import type * as SocketSessionError from "leasehold/SocketSessionError"
import * as StateManager from "leasehold/StateManager"
import { Store } from "leasehold/Store"
import { Counter, calls, connect, pureCalls, pureSession, serveWorkerWith, session } from "./session/support.js"

/** The embedded store shared by the two workers of a test, the oplock on as in production. */
const sharedStore = Effect.gen(function* () {
  const settings = LeaseholdConfig.layer({ oplock: true, leaseDurability: "batch", lockExpiration: "2 seconds" })
  const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(settings)))
  return Context.pick(Store, LeaseholdConfig.LeaseholdConfig)(context)
})

const clientId = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`

for (const [name, served, counted] of [
  ["an effectful handler", session, calls],
  ["a pure handler", pureSession, pureCalls]
] as const) {
  describe(`SocketSession.apply, ${name}`, () => {
    it.live(
      "applied by the worker holding the socket, its update sent to it; here when the socket is here or nowhere",
      () =>
        Effect.gen(function* () {
          const shared = yield* sharedStore
          const a = yield* serveWorkerWith(shared, {}, served)
          const b = yield* serveWorkerWith(shared, {}, served)
          const tab = yield* connect(a.port, { client: clientId("apply") })
          const token = tab.token
          const onA = <A, E>(effect: Effect.Effect<A, E, SocketSession.Sockets>) =>
            Effect.provideContext(effect, a.context)
          const onB = <A, E>(effect: Effect.Effect<A, E, SocketSession.Sockets>) =>
            Effect.provideContext(effect, b.context)

          // through B, which has no socket of the token: applied by A, whose socket gets the update
          const before = counted.total
          const viaB = yield* onB(SocketSession.apply(served, token, { type: "bump", by: 2 }))
          assert.deepStrictEqual(viaB, { update: { n: 2, v: 1 }, delivery: "sent" })
          assert.strictEqual(counted.total - before, 1)
          yield* tab.waitFor((f) => f.type === "update" && f.n === 2)
          // through A itself: applied here, delivered here
          const viaA = yield* onA(SocketSession.apply(served, token, { type: "bump", by: 3 }))
          assert.deepStrictEqual(viaA, { update: { n: 5, v: 2 }, delivery: "delivered" })
          yield* tab.waitFor((f) => f.type === "update" && f.n === 5)
          // the tab's own events go on from there
          tab.send({ type: "bump", by: 1, seq: 1 })
          const own = yield* tab.waitFor((f) => f.seq === 1)
          assert.deepStrictEqual(own, { type: "update", n: 6, v: 3, seq: 1 })

          // a token without a socket: applied here, its update sent nowhere
          const alone = yield* onB(SocketSession.apply(served, "no-socket-here", { type: "bump", by: 1 }))
          assert.deepStrictEqual(alone, { update: { n: 1, v: 1 }, delivery: "no-owner" })
          const states = Context.get(b.context, StateManager.StateManager)
          assert.deepStrictEqual(yield* states.get(token, Counter), { n: 6, v: 3 })
          assert.deepStrictEqual(yield* states.get("no-socket-here", Counter), { n: 1, v: 1 })
        }).pipe(Effect.scoped)
    )

    it.live("a refusal, through the socket's worker or here, is EventRefused with its tag; nothing written", () =>
      Effect.gen(function* () {
        const shared = yield* sharedStore
        const a = yield* serveWorkerWith(shared, {}, served)
        const b = yield* serveWorkerWith(shared, {}, served)
        const tab = yield* connect(a.port, { client: clientId("refused") })
        const onB = <A, E>(effect: Effect.Effect<A, E, SocketSession.Sockets>) =>
          Effect.provideContext(effect, b.context)
        yield* onB(SocketSession.apply(served, tab.token, { type: "bump", by: 1 }))
        for (const token of [tab.token, "no-socket-refused"]) {
          const refused = yield* Effect.flip(onB(SocketSession.apply(served, token, { type: "bump", by: 0 })))
          assert.strictEqual(refused._tag, "EventRefused")
          assert.strictEqual((refused as SocketSessionError.EventRefused).code, "Refused")
          assert.strictEqual(refused.message, `event for token ${token} refused: a bump of 0`)
        }
        // a handler's defect: refused, its message not told
        const died = yield* Effect.flip(onB(SocketSession.apply(served, tab.token, { type: "bump", by: 1, die: true })))
        assert.strictEqual(died._tag, "EventRefused")
        assert.strictEqual((died as SocketSessionError.EventRefused).code, "Defect")
        const states = Context.get(b.context, StateManager.StateManager)
        assert.deepStrictEqual(yield* states.get(tab.token, Counter), { n: 1, v: 1 })
        assert.deepStrictEqual(yield* states.get("no-socket-refused", Counter), { n: 0, v: 0 })
        // a bad token: refused before anything is sent
        const bad = yield* Effect.flip(onB(SocketSession.apply(served, "a*b", { type: "bump", by: 1 })))
        assert.strictEqual(bad._tag, "InvalidToken")
      }).pipe(Effect.scoped)
    )
  })
}
