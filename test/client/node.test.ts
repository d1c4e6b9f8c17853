/**
 * The browser client outside a browser: on Node's own WebSocket, with no `sessionStorage`
 * (the token kept in memory) and an absolute address, against the socket session served in
 * this process.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { connect, type SendError, type Status } from "leasehold/client"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import { Store } from "leasehold/Store"
import { serve } from "../fixtures/client/app.js"

interface Bump {
  readonly type: "bump"
  readonly by: number
}
interface Count {
  readonly n: number
}

const sharedStore = Effect.gen(function* () {
  const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(LeaseholdConfig.layer({}))))
  return Context.pick(Store, LeaseholdConfig.LeaseholdConfig)(context)
})

describe("leasehold/client on Node", () => {
  it.live("sends before the socket opens wait, then are answered in order; close fails what is left", () =>
    Effect.gen(function* () {
      const port = yield* serve(yield* sharedStore)
      const statuses: Array<Status["state"]> = []
      const tokens: Array<string> = []
      const states: Array<number> = []
      const session = yield* Effect.acquireRelease(
        Effect.sync(() =>
          connect<Bump, Count>({
            url: `ws://127.0.0.1:${port}/ws`,
            onStatus: (status) => statuses.push(status.state),
            onToken: (token) => tokens.push(token),
            onState: (state) => states.push(state.n)
          })
        ),
        (session) => Effect.sync(() => session.close())
      )
      assert.isUndefined(session.token)
      assert.match(session.clientId, /^[A-Za-z0-9_-]{22}$/)
      const answers = yield* Effect.promise(() =>
        Promise.all([1, 2, 3].map((by) => session.send({ type: "bump", by })))
      )
      assert.deepStrictEqual(
        answers.map((answer) => answer.update.n),
        [1, 3, 6]
      )
      assert.isFalse(answers.some((answer) => answer.duplicate))
      assert.deepStrictEqual(statuses, ["connecting", "open"])
      assert.deepStrictEqual(states, [0])
      assert.strictEqual(tokens.length, 1)
      assert.strictEqual(session.token, tokens[0])
      assert.strictEqual(session.pending, 0)

      const late = session.send({ type: "bump", by: 1 })
      session.close()
      const error = yield* Effect.promise(() =>
        late.then(
          () => undefined,
          (error: SendError) => error
        )
      )
      assert.strictEqual(error?.reason, "closed")
      assert.deepStrictEqual(statuses, ["connecting", "open", "closed"])
      const after = yield* Effect.promise(() =>
        session.send({ type: "bump", by: 1 }).then(
          () => undefined,
          (error: SendError) => error
        )
      )
      assert.deepStrictEqual([after?.reason, after?.applied], ["closed", false])
    }).pipe(Effect.scoped)
  )
})
