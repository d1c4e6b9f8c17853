/**
 * The session's delivery order and its reading of client frames, in process: a socket is
 * sent only updates newer than the last (by the app's `isNewer`), and a frame is an event
 * or the reason it is not one, never a thrown error.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { parser, updateEncoder } from "../src/internal/socket/frames.js"
import * as Registry from "../src/internal/socket/registry.js"

const Count = Schema.Struct({ n: Schema.Int, v: Schema.Int, epoch: Schema.Number })
type Count = typeof Count.Type
const isNewer = (a: Count, b: Count) => a.epoch > b.epoch || (a.epoch === b.epoch && a.v > b.v)

const maxStep = 1_000_000
const Bump = Schema.Struct({
  type: Schema.Literal("bump"),
  by: Schema.Int.check(Schema.isBetween({ minimum: -maxStep, maximum: maxStep }))
})

const sent = (queue: Queue.Queue<string>) =>
  Effect.map(Queue.takeAll(queue), (frames) => frames.map((frame) => JSON.parse(frame)))

describe("socket session frames", () => {
  it.effect("a socket gets only updates newer than the last one it was sent", () =>
    Effect.gen(function* () {
      const sockets = Registry.make(
        updateEncoder(Count) as (type: "state" | "update", update: unknown, marks: object) => string,
        isNewer as (update: unknown, than: unknown) => boolean
      )
      const connection = yield* sockets.attach("c1", "tab-1", undefined)
      yield* sockets.sendUpdate(connection, "state", { n: 0, v: 0, epoch: 0 }, {})
      for (const v of [1, 3, 2, 4, 4]) yield* sockets.deliver("tab-1", { n: v * 10, v, epoch: 100 })
      deepStrictEqual(yield* sent(connection.outgoing), [
        { type: "state", n: 0, v: 0, epoch: 0 },
        { type: "update", n: 10, v: 1, epoch: 100 },
        { type: "update", n: 30, v: 3, epoch: 100 },
        { type: "update", n: 40, v: 4, epoch: 100 }
      ])
      // The slice expired and the counter started again: a later epoch is newer at any version.
      yield* sockets.deliver("tab-1", { n: 1, v: 1, epoch: 200 })
      deepStrictEqual(yield* sent(connection.outgoing), [{ type: "update", n: 1, v: 1, epoch: 200 }])
      // Updates for a token with no socket here go nowhere; a detached socket gets nothing.
      yield* sockets.deliver("tab-2", { n: 1, v: 1, epoch: 1 })
      yield* sockets.detach(connection)
      yield* sockets.deliver("tab-1", { n: 2, v: 2, epoch: 200 })
      assert.strictEqual(connection.outgoing.state._tag, "Done")
    })
  )

  it.effect("a socket whose client leaves too much unread is closed with 1013, its frames no longer queued", () =>
    Effect.gen(function* () {
      const sockets = Registry.make(
        updateEncoder(Count) as (type: "state" | "update", update: unknown, marks: object) => string,
        undefined,
        200
      )
      let buffered = 0
      const connection = yield* sockets.attach("c1", "tab-1", "client-1", () => buffered)
      yield* sockets.send(connection, { type: "error", message: "x".repeat(40) })
      // written, not yet sent: counted with what is queued
      buffered = 30
      yield* sockets.send(connection, { type: "error", message: "y" })
      assert.isFalse(Deferred.isDoneUnsafe(connection.closed))
      for (let i = 0; i < 10; i++) yield* sockets.sendUpdate(connection, "update", { n: i, v: i, epoch: 0 }, {})
      assert.isTrue(Deferred.isDoneUnsafe(connection.closed))
      assert.deepStrictEqual(yield* Deferred.await(connection.closed), { code: 1013, reason: "over 200 bytes unread" })
      const queued = yield* Queue.takeAll(connection.outgoing)
      assert.isAtMost(
        queued.reduce((sum, frame) => sum + frame.length, 0),
        200 - buffered
      )
      assert.strictEqual(
        connection.unsent,
        queued.reduce((sum, frame) => sum + frame.length, 0)
      )
    })
  )

  it.effect("an answer that cannot be encoded says its event was applied", () =>
    Effect.gen(function* () {
      const Even = Count.check(Schema.makeFilter((count: Count) => count.n % 2 === 0 || "n must be even"))
      const sockets = Registry.make(
        updateEncoder(Even) as (type: "state" | "update", update: unknown, marks: object) => string,
        undefined
      )
      const connection = yield* sockets.attach("c1", "tab-1", "client-1")
      yield* sockets.sendUpdate(connection, "update", { n: 1, v: 1, epoch: 0 }, { seq: 1 })
      yield* sockets.sendUpdate(connection, "state", { n: 1, v: 1, epoch: 0 }, { seq: 1, duplicate: true })
      yield* sockets.sendUpdate(connection, "update", { n: 3, v: 2, epoch: 0 }, {})
      const [answer, duplicate, update] = yield* sent(connection.outgoing)
      for (const frame of [answer, duplicate]) {
        assert.strictEqual(frame.type, "error")
        assert.strictEqual(frame.seq, 1)
        // final: the event was applied, and a resend's duplicate would not encode either
        assert.strictEqual(frame.applied, true)
        assert.include(frame.message, "cannot be encoded")
      }
      assert.strictEqual(update.type, "error")
      assert.isUndefined(update.seq)
      assert.isUndefined(update.applied)
    })
  )

  it("client frames: an event, or the reason it is not one", () => {
    const parse = parser(Bump)
    const event = (text: string) => parse(text).event
    deepStrictEqual(event(JSON.stringify({ type: "bump", by: -3 })), Result.succeed({ type: "bump", by: -3 }))
    // other properties are left out; the bounds are the schema's
    deepStrictEqual(
      event(JSON.stringify({ type: "bump", by: 1_000_000, extra: [1] })),
      Result.succeed({ type: "bump", by: 1_000_000 })
    )
    deepStrictEqual(
      event(JSON.stringify({ type: "bump", by: -1_000_000 })),
      Result.succeed({ type: "bump", by: -1_000_000 })
    )
    for (const frame of [
      "not json",
      "{}",
      JSON.stringify({ type: "bump" }),
      JSON.stringify({ type: "bump", by: 1.5 }),
      JSON.stringify({ type: "bump", by: 1e7 }),
      JSON.stringify({ type: "bump", by: 1_000_001 }),
      JSON.stringify({ type: "bump", by: "1" }),
      JSON.stringify([{ type: "bump", by: 1 }]),
      "null",
      JSON.stringify({ type: "reset", by: 1 }),
      // nested too deeply for the decoder's stack: refused, not thrown
      `{"type":"bump","by":${"[".repeat(200_000)}${"]".repeat(200_000)}}`,
      `${"[".repeat(200_000)}${"]".repeat(200_000)}`
    ]) {
      const parsed = event(frame)
      assert.isTrue(Result.isFailure(parsed), frame)
      if (Result.isFailure(parsed)) assert.match(parsed.failure, /^malformed message: .+/, frame)
    }
  })
})
