/**
 * The example's delivery order and its client frames, in process.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import { parseClientMessage } from "../../examples/counter/Protocol.js"
import { layer, Sockets } from "../../examples/counter/Sockets.js"

const sent = (queue: Queue.Queue<string>) =>
  Effect.map(Queue.takeAll(queue), (frames) => frames.map((frame) => JSON.parse(frame)))

describe("counter sockets", () => {
  it.effect("a socket gets only updates newer than the last one it was sent", () =>
    Effect.gen(function* () {
      const sockets = yield* Sockets
      const connection = yield* sockets.attach("c1", "tab-1")
      yield* sockets.sendCount(connection, "state", { n: 0, v: 0, epoch: 0 })
      for (const v of [1, 3, 2, 4, 4]) yield* sockets.deliver("tab-1", { n: v * 10, v, epoch: 100 })
      deepStrictEqual(yield* sent(connection.outgoing), [
        { type: "state", n: 0, v: 0 },
        { type: "update", n: 10, v: 1 },
        { type: "update", n: 30, v: 3 },
        { type: "update", n: 40, v: 4 }
      ])
      // The slice expired and the counter started again: a later epoch is newer at any version.
      yield* sockets.deliver("tab-1", { n: 1, v: 1, epoch: 200 })
      deepStrictEqual(yield* sent(connection.outgoing), [{ type: "update", n: 1, v: 1 }])
      // Updates for a token with no socket here go nowhere; a detached socket gets nothing.
      yield* sockets.deliver("tab-2", { n: 1, v: 1, epoch: 1 })
      yield* sockets.detach(connection)
      yield* sockets.deliver("tab-1", { n: 2, v: 2, epoch: 200 })
      assert.strictEqual(connection.outgoing.state._tag, "Done")
    }).pipe(Effect.provide(layer))
  )

  it("client frames: a bump, or the reason it is not one", () => {
    deepStrictEqual(
      parseClientMessage(JSON.stringify({ type: "bump", by: -3 })),
      Result.succeed({ type: "bump", by: -3 })
    )
    // other properties are left out; the bounds are the step's
    deepStrictEqual(
      parseClientMessage(JSON.stringify({ type: "bump", by: 1_000_000, extra: [1] })),
      Result.succeed({ type: "bump", by: 1_000_000 })
    )
    deepStrictEqual(
      parseClientMessage(JSON.stringify({ type: "bump", by: -1_000_000 })),
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
      const parsed = parseClientMessage(frame)
      assert.isTrue(Result.isFailure(parsed), frame)
      if (Result.isFailure(parsed)) assert.match(parsed.failure, /^malformed message: .+/, frame)
    }
  })
})
