/**
 * The socket session's pure handler over a real redis-server, served in this process: a
 * burst decided in one step on the values this worker's last grant left is decided again
 * when the store refuses that step; what the refused run made of its events is never an
 * answer.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as RedisStore from "leasehold/RedisStore"
import { Store } from "leasehold/Store"
import { makeKeys } from "../src/internal/keys.js"
import { answers, connect, pureSession, serveWorker } from "./session/support.js"
import * as Logs from "./support/logs.js"
import * as RedisServer from "./support/RedisServer.js"

/** A Redis store for the workers of a test, the oplock off: a modification may be made in one step. */
const sharedStore = (server: RedisServer.RedisServer) =>
  Effect.gen(function* () {
    const settings = LeaseholdConfig.layer({ oplock: false, retryJitter: false, commandTimeout: "2 seconds" })
    const context = yield* Layer.build(RedisStore.layerAt({ url: server.url }).pipe(Layer.provideMerge(settings)))
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
