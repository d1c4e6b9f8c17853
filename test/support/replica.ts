/**
 * A primary with a replica, for the tests of `minReplicasAck` and of the acknowledged
 * connection: a replica started and linked, and the wait until it has every write.
 */
import { assert } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { Redis } from "ioredis"
import { untilReal } from "./poll.js"
import * as RedisServer from "./RedisServer.js"

/**
 * Wait until the replica has acknowledged everything the primary has written: a write and a
 * `WAIT` on one connection (a `WAIT` waits for the writes of its own connection, and this
 * one's write comes after every write before it). The primary asks the replica for its
 * offset at once, where a replica left alone reports it once a second; one just synced is
 * sent nothing until its first report.
 */
export const caughtUp = (primary: RedisServer.RedisServer) =>
  Effect.acquireUseRelease(
    Effect.sync(() => new Redis({ host: "127.0.0.1", port: primary.port, maxRetriesPerRequest: 0 })),
    (connection) =>
      Effect.gen(function* () {
        const replies = yield* Effect.promise(() =>
          connection.pipeline().set("harness:ack-probe", "1").del("harness:ack-probe").wait(1, 10_000).exec()
        )
        const [error, acknowledged] = replies?.[2] ?? [new Error("no reply"), 0]
        assert.isNull(error)
        assert.strictEqual(acknowledged, 1, "the replica did not catch up within 10 s")
      }),
    (connection) => Effect.sync(() => connection.disconnect())
  )

/** A replica of `primary` (with `extraArgs`), once linked to it. */
export const startReplica = (primary: RedisServer.RedisServer, extraArgs: ReadonlyArray<string> = []) =>
  Effect.gen(function* () {
    const replica = yield* RedisServer.start({
      extraArgs: ["--replicaof", "127.0.0.1", String(primary.port), ...extraArgs]
    })
    yield* untilReal(
      "the replica linked to the primary",
      Effect.map(Effect.orDie(replica.info("replication")), (info) => info.master_link_status === "up"),
      { within: 20_000 }
    )
    return replica
  })

/** A primary and a replica linked to it, which has acknowledged a first write. */
export const replicated = Effect.gen(function* () {
  const primary = yield* RedisServer.start()
  const replica = yield* startReplica(primary)
  yield* caughtUp(primary)
  return { primary, replica }
})
