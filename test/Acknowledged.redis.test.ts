/**
 * The acknowledged connection on a real primary with a real replica: a step whose reply its
 * reader cannot judge fails alone, with its defect, and the steps after it are sent and
 * acknowledged as before (the batch's defect does not end the connection's batches).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { make } from "../src/internal/redis/acknowledged.js"
import { parseEndpoint } from "../src/internal/redis/connection.js"
import * as Health from "../src/internal/redis/health.js"
import { replicated } from "./support/replica.js"

describe("acknowledged steps", () => {
  it.live(
    "a reply its reader throws on fails its own step with the defect; the next steps are acknowledged",
    () =>
      Effect.gen(function* () {
        const { primary, replica } = yield* replicated
        const endpoint = parseEndpoint(primary.url)!
        const health = yield* Health.make(endpoint)
        const acknowledged = yield* make(
          endpoint,
          { commandTimeoutMs: 2_000, connectTimeoutMs: 2_000, replicas: 1, timeoutMs: 5_000 },
          health
        )
        const thrown = yield* acknowledged
          .run(
            "broken",
            (connection) => connection.set("a", "1"),
            () => {
              throw new Error("a reader that cannot judge its reply")
            }
          )
          .pipe(Effect.timeout("5 seconds"), Effect.exit)
        assert.isTrue(Exit.isFailure(thrown) && Cause.hasDies(thrown.cause), `the broken step: ${String(thrown)}`)
        const next = yield* acknowledged
          .run(
            "set",
            (connection) => connection.set("b", "2"),
            () => true
          )
          .pipe(Effect.timeout("5 seconds"))
        assert.strictEqual(next, "OK")
        assert.strictEqual(yield* Effect.orDie(replica.command("GET", "b")), "2")
      }),
    60_000
  )
})
