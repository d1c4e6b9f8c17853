import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as InstanceId from "../src/InstanceId.js"

describe("InstanceId", () => {
  it.effect("each build of the layer makes a fresh id", () =>
    Effect.gen(function* () {
      const ids = yield* Effect.forEach([1, 2, 3], () =>
        InstanceId.InstanceId.pipe(Effect.provide(Layer.fresh(InstanceId.layer)))
      )
      assert.strictEqual(new Set(ids).size, 3)
      for (const id of ids) assert.match(id, /^[0-9a-f-]{36}$/)
    })
  )

  it.effect("one build shared by two consumers gives one id", () =>
    Effect.gen(function* () {
      const [a, b] = yield* Effect.all([InstanceId.InstanceId, InstanceId.InstanceId]).pipe(
        Effect.provide(InstanceId.layer)
      )
      assert.strictEqual(a, b)
    })
  )

  it.effect("layerFixed keeps the given id and refuses one outside the token charset", () =>
    Effect.gen(function* () {
      assert.strictEqual(
        yield* InstanceId.InstanceId.pipe(Effect.provide(InstanceId.layerFixed("worker-1"))),
        "worker-1"
      )
      const error = yield* Effect.flip(InstanceId.InstanceId.pipe(Effect.provide(InstanceId.layerFixed("w*"))))
      assert.strictEqual(error._tag, "InvalidInstanceId")
    })
  )
})
