/**
 * A tab of a SIGKILLed worker reconnects to a worker while the store refuses writes (a
 * server out of memory): on a real redis-server and on a Redis Cluster, where
 * `maxmemory` makes every write fail with an error reply.
 */
import { assert } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import { untilReal } from "../support/poll.js"
import type { TokenCluster } from "./cluster.js"

/**
 * The dead worker's record stays (it has no presence); the link is refused
 * (`RecordNotStored`) while `refuseWrites(true)`, once `probeWrite` (a plain write in
 * tab-1's slot) is refused too; once writes are accepted again and a resubscription
 * restores, the record is judged, taken over within `withinMs`, and no socket is reported
 * lost.
 */
export const deadRecordTakenOverAfterRefusedLink = (
  cluster: TokenCluster,
  refuseWrites: (refused: boolean) => Effect.Effect<void>,
  probeWrite: Effect.Effect<unknown, unknown>,
  withinMs: number
) =>
  Effect.gen(function* () {
    const b = yield* cluster.worker()
    const lost = yield* Effect.forkChild(Stream.runCollect(Stream.take(b.tokens.lost, 1)))
    yield* cluster.overwrite("tab-1", { instanceId: "dead-worker", connectionId: "c-dead" })
    yield* refuseWrites(true)
    yield* untilReal("writes refused", Effect.map(Effect.result(probeWrite), Result.isFailure), { within: withinMs })
    const refused = yield* Effect.flip(b.tokens.link("tab-1", "cb"))
    assert.strictEqual(refused._tag, "RecordNotStored")
    yield* refuseWrites(false)
    // a resubscription restores: the record found is the dead worker's
    yield* cluster.dropSubscriptions
    yield* untilReal(
      "the dead worker's record taken over",
      Effect.map(cluster.record("tab-1"), (record) => Option.isSome(record) && record.value.instanceId === b.id),
      { within: withinMs }
    )
    deepStrictEqual(yield* cluster.record("tab-1"), Option.some({ instanceId: b.id, connectionId: "cb" }))
    deepStrictEqual(yield* b.tokens.local("tab-1"), Option.some("cb"))
    assert.isFalse(yield* b.tokens.isLost("tab-1"))
    assert.isTrue(
      Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(lost.pollUnsafe()))),
      "no socket reported lost"
    )
  })

/** `CONFIG SET maxmemory`: 1 byte refuses every write, 0 lifts the limit. */
export const maxmemory = (refused: boolean) => ["CONFIG", "SET", "maxmemory", refused ? "1" : "0"] as const

/** A plain write in tab-1's slot, for `probeWrite`. */
export const probe = ["SET", "probe:{tab-1}", "x"] as const
