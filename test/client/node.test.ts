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
import { type WebSocket, WebSocketServer } from "ws"
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

/** A WebSocket server on a free port whose every socket is served by `serve`, frame by frame. */
const scripted = (serve: (ws: WebSocket) => void) =>
  Effect.acquireRelease(
    Effect.callback<WebSocketServer>((resume) => {
      const wss: WebSocketServer = new WebSocketServer({ host: "127.0.0.1", port: 0 }, () =>
        resume(Effect.succeed(wss))
      )
      wss.on("connection", serve)
    }),
    (wss) =>
      Effect.callback<void>((resume) => {
        for (const ws of wss.clients) ws.terminate()
        wss.close(() => resume(Effect.void))
      })
  ).pipe(
    Effect.map((wss) => {
      const address = wss.address()
      return { port: typeof address === "object" && address !== null ? address.port : 0 }
    })
  )

describe("leasehold/client on Node", () => {
  it.live("a server that accepts then closes is retried later and later: hello alone resets nothing", () =>
    Effect.gen(function* () {
      const server = yield* scripted((ws) => {
        ws.send(JSON.stringify({ type: "hello", token: "tab-1", instanceId: "i", maxFrameBytes: 1024 }))
        ws.close(1011)
      })
      const attempts: Array<number> = []
      const session = yield* Effect.acquireRelease(
        Effect.sync(() =>
          connect<Bump, Count>({
            url: `ws://127.0.0.1:${server.port}/ws`,
            backoff: { base: 5, cap: 1000 },
            onStatus: (status) => {
              if (status.state === "connecting") attempts.push(status.attempt)
            }
          })
        ),
        (session) => Effect.sync(() => session.close())
      )
      yield* Effect.promise(
        () =>
          new Promise<void>((resolve) => {
            const poll = setInterval(() => {
              if (attempts.length < 4) return
              clearInterval(poll)
              resolve()
            }, 5)
          })
      )
      session.close()
      assert.deepStrictEqual(attempts.slice(0, 4), [0, 1, 2, 3])
    }).pipe(Effect.scoped)
  )

  it.live("an overtaken answer settles its event without rolling the tab back", () =>
    Effect.gen(function* () {
      // a newer update goes before the answers it overtook
      const server = yield* scripted((ws) => {
        ws.send(JSON.stringify({ type: "hello", token: "tab-1", instanceId: "i", maxFrameBytes: 1024 }))
        ws.send(JSON.stringify({ type: "state", n: 0 }))
        ws.on("message", (data) => {
          const { seq } = JSON.parse(String(data)) as { readonly seq: number }
          ws.send(JSON.stringify({ type: "update", n: 5 }))
          const answer = seq === 1 ? { type: "update", n: 1 } : { type: "state", n: 2, duplicate: true }
          ws.send(JSON.stringify({ ...answer, seq, overtaken: true }))
        })
      })
      const seen: Array<string> = []
      const session = yield* Effect.acquireRelease(
        Effect.sync(() =>
          connect<Bump, Count>({
            url: `ws://127.0.0.1:${server.port}/ws`,
            onState: (state) => seen.push(`state ${state.n}`),
            onUpdate: (update) => seen.push(`update ${update.n}`)
          })
        ),
        (session) => Effect.sync(() => session.close())
      )
      const first = yield* Effect.promise(() => session.send({ type: "bump", by: 1 }))
      const second = yield* Effect.promise(() => session.send({ type: "bump", by: 1 }))
      assert.deepStrictEqual([first.update.n, first.overtaken], [1, true])
      assert.deepStrictEqual([second.update.n, second.overtaken, second.duplicate], [2, true, true])
      assert.deepStrictEqual(seen, ["state 0", "update 5", "update 5"])
    }).pipe(Effect.scoped)
  )

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
