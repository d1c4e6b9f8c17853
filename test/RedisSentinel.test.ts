/**
 * The Sentinel harness itself: a failover by SIGKILL and one by SIGSTOP promote a replica
 * that has what was replicated, and the old primary comes back as a replica.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as RedisSentinel from "./support/RedisSentinel.js"
import * as RedisServer from "./support/RedisServer.js"

describe("RedisSentinel harness", () => {
  it.scopedLive(
    "a killed primary and a frozen one are replaced by a replica holding the replicated writes; each comes back as a replica",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* RedisSentinel.start()
        const first = yield* sentinel.primary
        assert.strictEqual((yield* sentinel.replicas).length, 2)
        yield* Effect.orDie(first.command("SET", "k", "1"))
        yield* sentinel.awaitReplicated

        const killed = yield* sentinel.failover("kill")
        assert.strictEqual(killed.old, first)
        assert.notStrictEqual(killed.promoted, first)
        assert.strictEqual(yield* sentinel.primary, killed.promoted)
        assert.deepStrictEqual(yield* RedisServer.getRaw(killed.promoted, "k"), Option.some("1"))
        yield* sentinel.rejoin(killed.old)
        const info = yield* Effect.orDie(first.info("replication"))
        assert.strictEqual(info.role, "slave")
        assert.strictEqual(Number(info.master_port), killed.promoted.port)

        yield* Effect.orDie(killed.promoted.command("SET", "k", "2"))
        yield* sentinel.awaitReplicated
        const paused = yield* sentinel.failover("pause")
        assert.strictEqual(paused.old, killed.promoted)
        assert.deepStrictEqual(yield* RedisServer.getRaw(paused.promoted, "k"), Option.some("2"))
        yield* sentinel.rejoin(paused.old)
        assert.strictEqual((yield* Effect.orDie(paused.old.info("replication"))).role, "slave")
      }),
    120_000
  )
})
