/**
 * Sentinel over TLS, with a password: a primary, two replicas and three Sentinels that
 * serve TLS only (replication and the Sentinels' own links over TLS too), the data servers
 * with `requirepass`/`masterauth` and the Sentinels with `auth-pass`, under a self-signed
 * certificate.
 *
 * - A worker process configured by `LEASEHOLD_REDIS_SENTINELS=rediss://:<password>@…`,
 *   trusting the certificate only through `NODE_EXTRA_CA_CERTS` (read by Node at its start,
 *   hence a process of its own), modifies a token, goes on after a failover (the primary
 *   SIGKILLed), and the new primary holds the exact count.
 * - Without the certificate trusted, the store fails to build with `StoreUnavailable`
 *   within its connect timeout, and the password is in no log line and no error.
 *
 * Skipped when this machine's redis-server was built without TLS.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { spawnChild } from "./support/children.js"
import { capture } from "./support/logs.js"
import * as RedisSentinel from "./support/RedisSentinel.js"
import * as RedisServer from "./support/RedisServer.js"
import { sendCommand } from "./support/resp.js"
import { redisHasTls, selfSignedCertificate } from "./support/tls.js"

const tls = redisHasTls()

const secret = "s3cr3t/p@ss:w0rd"
const encoded = encodeURIComponent(secret)
const secrets = [secret, encoded, "s3cr3t"]
const leaking = (texts: ReadonlyArray<string>) => texts.filter((text) => secrets.some((s) => text.includes(s)))

/** Whether a plain-TCP PING to `port` gets no answer (the port speaks TLS only). */
const refusesPlain = (port: number) =>
  Effect.promise(() =>
    sendCommand(port, ["PING"], 1_000).then(
      () => false,
      () => true
    )
  )

const deployment = Effect.gen(function* () {
  const files = yield* selfSignedCertificate
  const sentinel = yield* RedisSentinel.start({ tls: files, password: secret })
  for (const node of [...sentinel.servers, ...sentinel.sentinels]) assert.isTrue(yield* refusesPlain(node.port))
  const url = `rediss://:${encoded}@${sentinel.addresses}`
  return { ...files, sentinel, url }
})

describe.skipIf(!tls)(
  `Sentinel over TLS with a password${tls ? "" : " (skipped: this redis-server was built without TLS)"}`,
  () => {
    it.live(
      "a worker trusting the certificate through NODE_EXTRA_CA_CERTS modifies a token before and after a failover; the new primary holds the exact count",
      () =>
        Effect.gen(function* () {
          const { cert, sentinel, url } = yield* deployment
          const child = yield* spawnChild("test/sentinel/child.ts", {
            LEASEHOLD_REDIS_SENTINELS: url,
            LEASEHOLD_REDIS_SENTINEL_NAME: sentinel.name,
            NODE_EXTRA_CA_CERTS: cert,
            LEASEHOLD_KEY_PREFIX: "tls",
            LEASEHOLD_COMMAND_TIMEOUT_MS: "2000",
            LEASEHOLD_CONNECT_TIMEOUT_MS: "5000",
            LEASEHOLD_RETRY_DELAY_INITIAL_MS: "50",
            LEASEHOLD_RETRY_DELAY_MAX_MS: "250",
            TOKEN: "tok",
            COUNT: "5"
          })
          yield* child.waitFor(/^n 5$/, 30_000)
          const before = yield* sentinel.primary
          deepStrictEqual(yield* RedisServer.getRaw(before, "tls:{tok}:s:counter"), Option.some('{"n":5}'))
          yield* sentinel.awaitReplicated

          const { old, promoted } = yield* sentinel.failover("kill")
          assert.notStrictEqual(promoted, old)
          yield* child.kill("SIGUSR2")
          yield* child.waitFor(/^n 10$/, 30_000)

          // read over TLS (trusting the certificate), authenticated, from the promoted server
          assert.strictEqual(yield* sentinel.primary, promoted)
          deepStrictEqual(yield* RedisServer.getRaw(promoted, "tls:{tok}:s:counter"), Option.some('{"n":10}'))
          deepStrictEqual(leaking(child.lines), [])
        }),
      60_000
    )

    it.live(
      "the certificate not trusted: StoreUnavailable within the connect timeout, and the password in no log line or error",
      () =>
        Effect.gen(function* () {
          const { sentinel, url } = yield* deployment
          const logs = capture()
          const connectTimeout = 2_000
          const started = performance.now()
          const error = yield* Effect.flip(
            Layer.build(
              RedisStore.layer({ sentinels: url, sentinelName: sentinel.name }).pipe(
                Layer.provide(LeaseholdConfig.layer({ connectTimeout, commandTimeout: 1_000, keyPrefix: "untrusted" }))
              )
            ).pipe(Effect.provide(logs.layer), Effect.scoped)
          )
          const elapsed = performance.now() - started
          assert.strictEqual(error._tag, "StoreUnavailable")
          // the connect timeout, and a margin for a loaded machine
          assert.isBelow(elapsed, connectTimeout + 3_000)
          const texts = [
            error.message,
            JSON.stringify(error),
            String((error as { cause?: unknown }).cause ?? ""),
            ...logs.lines.map((line) => line.message)
          ]
          deepStrictEqual(leaking(texts), [])
          // the check would see a leak: the URL holds the password
          assert.isNotEmpty(leaking([url]))
          // the deployment itself answers over TLS: the failure is the trust, not the servers
          assert.isTrue(yield* (yield* sentinel.primary).ping(1_000))
        }),
      60_000
    )
  }
)
