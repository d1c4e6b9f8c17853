import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as RedisStore from "../src/RedisStore.js"

const fromEnv = (env: Record<string, string>) =>
  LeaseholdConfig.LeaseholdConfig.pipe(
    Effect.provide(LeaseholdConfig.layerFromEnv),
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
  )

const millis = (d: Duration.Duration) => Duration.toMillis(d)

describe("LeaseholdConfig", () => {
  it.effect("defaults match the documented values", () =>
    Effect.gen(function* () {
      const s = yield* fromEnv({})
      assert.isTrue(Option.isNone(s.redisUrl))
      assert.strictEqual(s.redisCluster, false)
      assert.strictEqual(s.keyPrefix, "leasehold")
      assert.strictEqual(millis(s.lockExpiration), 10_000)
      assert.strictEqual(millis(s.lockWarningThreshold), 1_000)
      assert.strictEqual(millis(s.tokenExpiration), 3_600_000)
      assert.strictEqual(s.oplock, false)
      assert.strictEqual(millis(s.leaseHoldTime), 5_000)
      assert.strictEqual(millis(s.leaseQuantum), 2)
      assert.strictEqual(s.leaseDurability, "batch")
      assert.strictEqual(millis(s.leaseCommitWindow), 0)
      assert.strictEqual(millis(s.retryDelayInitial), 1_000)
      assert.strictEqual(millis(s.retryDelayMax), 30_000)
      assert.strictEqual(s.mailboxMaxLen, 10_000)
      assert.strictEqual(s.maxValueBytes, 1_048_576)
      assert.isTrue(Option.isNone(s.dataDir))
      assert.strictEqual(millis(s.dataFlushInterval), 250)
    })
  )

  it.effect("reads every knob from its environment name", () =>
    Effect.gen(function* () {
      const s = yield* fromEnv({
        LEASEHOLD_REDIS_URL: "redis://:hunter2@127.0.0.1:6390/0",
        LEASEHOLD_REDIS_CLUSTER: "true",
        LEASEHOLD_KEY_PREFIX: "app:1",
        LEASEHOLD_LOCK_EXPIRATION_MS: "4000",
        LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "300",
        LEASEHOLD_TOKEN_EXPIRATION_S: "60",
        LEASEHOLD_OPLOCK: "true",
        LEASEHOLD_LEASE_HOLD_TIME_MS: "1500",
        LEASEHOLD_LEASE_QUANTUM_MS: "0",
        LEASEHOLD_LEASE_DURABILITY: "memory",
        LEASEHOLD_LEASE_COMMIT_WINDOW_MS: "3",
        LEASEHOLD_RETRY_DELAY_INITIAL_MS: "500",
        LEASEHOLD_RETRY_DELAY_MAX_MS: "8000",
        LEASEHOLD_MAILBOX_MAXLEN: "50",
        LEASEHOLD_DATA_DIR: "/tmp/lh",
        LEASEHOLD_DATA_FLUSH_INTERVAL_MS: "40",
        LEASEHOLD_COMMAND_TIMEOUT_MS: "700",
        LEASEHOLD_CONNECT_TIMEOUT_MS: "900",
        LEASEHOLD_MAX_VALUE_BYTES: "2048"
      })
      assert.strictEqual(Redacted.value(Option.getOrThrow(s.redisUrl)), "redis://:hunter2@127.0.0.1:6390/0")
      assert.isFalse(String(Option.getOrThrow(s.redisUrl)).includes("hunter2"))
      assert.strictEqual(s.redisCluster, true)
      assert.strictEqual(s.keyPrefix, "app:1")
      assert.strictEqual(millis(s.lockExpiration), 4000)
      assert.strictEqual(millis(s.lockWarningThreshold), 300)
      assert.strictEqual(millis(s.tokenExpiration), 60_000)
      assert.strictEqual(s.oplock, true)
      assert.strictEqual(millis(s.leaseHoldTime), 1500)
      assert.strictEqual(millis(s.leaseQuantum), 0)
      assert.strictEqual(s.leaseDurability, "memory")
      assert.strictEqual(millis(s.leaseCommitWindow), 3)
      assert.strictEqual(millis(s.retryDelayInitial), 500)
      assert.strictEqual(millis(s.retryDelayMax), 8000)
      assert.strictEqual(s.mailboxMaxLen, 50)
      assert.strictEqual(s.maxValueBytes, 2048)
      deepStrictEqual(s.dataDir, Option.some("/tmp/lh"))
      assert.strictEqual(millis(s.dataFlushInterval), 40)
      assert.strictEqual(millis(s.commandTimeout), 700)
      assert.strictEqual(millis(s.connectTimeout), 900)
    })
  )

  it.effect("the lease hold time defaults to half the lock expiration", () =>
    Effect.gen(function* () {
      const s = yield* fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "3000" })
      assert.strictEqual(millis(s.leaseHoldTime), 1500)
    })
  )

  it.effect("a warning threshold not below the lock expiration names both variables and their values", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "2000", LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "2000" })
      )
      assert.strictEqual(error._tag, "InvalidConfig")
      if (error._tag !== "InvalidConfig") return
      assert.strictEqual(error.knob, "LEASEHOLD_LOCK_WARNING_THRESHOLD_MS")
      assert.strictEqual(error.value, "2000")
      deepStrictEqual(error.other, { knob: "LEASEHOLD_LOCK_EXPIRATION_MS", value: "2000" })
      assert.strictEqual(
        error.message,
        "invalid configuration: LEASEHOLD_LOCK_WARNING_THRESHOLD_MS=2000 must be less than LEASEHOLD_LOCK_EXPIRATION_MS (LEASEHOLD_LOCK_EXPIRATION_MS=2000)"
      )
    })
  )

  it.effect("the hand-off timeout: 1 s, half a short lock expiration, or as set", () =>
    Effect.gen(function* () {
      assert.strictEqual(millis((yield* fromEnv({})).handoffTimeout), 1_000)
      assert.strictEqual(
        millis(
          (yield* fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "600", LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "100" }))
            .handoffTimeout
        ),
        300
      )
      assert.strictEqual(millis((yield* fromEnv({ LEASEHOLD_HANDOFF_TIMEOUT_MS: "250" })).handoffTimeout), 250)
      const error = yield* Effect.flip(
        fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "2000", LEASEHOLD_HANDOFF_TIMEOUT_MS: "2000" })
      )
      assert.strictEqual(error._tag, "InvalidConfig")
      if (error._tag !== "InvalidConfig") return
      assert.strictEqual(error.knob, "LEASEHOLD_HANDOFF_TIMEOUT_MS")
      deepStrictEqual(error.other, { knob: "LEASEHOLD_LOCK_EXPIRATION_MS", value: "2000" })
      const zero = LeaseholdConfig.resolve({ handoffTimeout: 0 })
      assert.isTrue(Result.isFailure(zero) && zero.failure.knob === "handoffTimeout")
    })
  )

  it.effect("the presence expiration: 3 s, or as set; at least 30 ms and below the token expiration", () =>
    Effect.gen(function* () {
      assert.strictEqual(millis((yield* fromEnv({})).presenceExpiration), 3_000)
      assert.strictEqual(millis((yield* fromEnv({ LEASEHOLD_PRESENCE_EXPIRATION_MS: "400" })).presenceExpiration), 400)
      const error = yield* Effect.flip(
        fromEnv({ LEASEHOLD_TOKEN_EXPIRATION_S: "20", LEASEHOLD_PRESENCE_EXPIRATION_MS: "20000" })
      )
      assert.strictEqual(error._tag, "InvalidConfig")
      if (error._tag !== "InvalidConfig") return
      assert.strictEqual(error.knob, "LEASEHOLD_PRESENCE_EXPIRATION_MS")
      deepStrictEqual(error.other, { knob: "LEASEHOLD_TOKEN_EXPIRATION_S", value: "20" })
      for (const tooShort of [0, 29]) {
        const refused = LeaseholdConfig.resolve({ presenceExpiration: tooShort })
        assert.isTrue(Result.isFailure(refused) && refused.failure.knob === "presenceExpiration", String(tooShort))
      }
    })
  )

  it("a lease hold time not below the lock expiration is refused", () => {
    const result = LeaseholdConfig.resolve({ lockExpiration: 1000, leaseHoldTime: 1200, lockWarningThreshold: 100 })
    assert.isTrue(Result.isFailure(result))
    if (Result.isFailure(result)) {
      assert.strictEqual(result.failure.knob, "leaseHoldTime")
      assert.strictEqual(result.failure.value, "1200ms")
      deepStrictEqual(result.failure.other, { knob: "lockExpiration", value: "1000ms" })
    }
  })

  it("the token expiration must exceed the lock expiration", () => {
    const result = LeaseholdConfig.resolve({ lockExpiration: 5_000, tokenExpiration: 5_000 })
    assert.isTrue(Result.isFailure(result))
    if (Result.isFailure(result)) {
      assert.strictEqual(result.failure.knob, "tokenExpiration")
      assert.strictEqual(result.failure.value, "5000ms")
      deepStrictEqual(result.failure.other, { knob: "lockExpiration", value: "5000ms" })
    }
  })

  it("durations must be positive; the lease quantum may be zero", () => {
    for (const knob of ["lockExpiration", "tokenExpiration", "retryDelayMax", "commandTimeout"] as const) {
      const result = LeaseholdConfig.resolve({ [knob]: 0 })
      assert.isTrue(Result.isFailure(result), knob)
      if (Result.isFailure(result)) assert.strictEqual(result.failure.knob, knob)
    }
    const negative = LeaseholdConfig.resolve({ lockWarningThreshold: -5 })
    assert.isTrue(Result.isFailure(negative))
    assert.isTrue(Result.isSuccess(LeaseholdConfig.resolve({ leaseQuantum: 0 })))
    const quantum = LeaseholdConfig.resolve({ leaseQuantum: -1 })
    assert.isTrue(Result.isFailure(quantum) && quantum.failure.knob === "leaseQuantum")
    const window = LeaseholdConfig.resolve({ leaseCommitWindow: -1 })
    assert.isTrue(Result.isFailure(window) && window.failure.knob === "leaseCommitWindow")
    const wide = LeaseholdConfig.resolve({ leaseCommitWindow: 10_000 })
    assert.isTrue(Result.isFailure(wide) && wide.failure.knob === "leaseCommitWindow")
    assert.isTrue(Result.isSuccess(LeaseholdConfig.resolve({ dataFlushInterval: 0 })))
    const flush = LeaseholdConfig.resolve({ dataFlushInterval: -1 })
    assert.isTrue(Result.isFailure(flush) && flush.failure.knob === "dataFlushInterval")
  })

  it("counts must be positive integers", () => {
    for (const knob of ["mailboxMaxLen", "maxValueBytes"] as const) {
      for (const value of [0, -1, 1.5]) {
        const result = LeaseholdConfig.resolve({ [knob]: value })
        assert.isTrue(Result.isFailure(result) && result.failure.knob === knob, `${knob} = ${value}`)
      }
      assert.isTrue(Result.isSuccess(LeaseholdConfig.resolve({ [knob]: 1 })))
    }
  })

  it("an empty data directory is refused: it would mean the working directory", () => {
    for (const dataDir of ["", "  "]) {
      const result = LeaseholdConfig.resolve({ dataDir: Option.some(dataDir) })
      assert.isTrue(Result.isFailure(result) && result.failure.knob === "dataDir", JSON.stringify(dataDir))
    }
    assert.isTrue(Result.isSuccess(LeaseholdConfig.resolve({ dataDir: Option.some("state") })))
  })

  it("a key prefix with glob or hash-tag characters is refused", () => {
    for (const keyPrefix of ["a*", "a{b}", "", "a b"]) {
      const result = LeaseholdConfig.resolve({ keyPrefix })
      assert.isTrue(Result.isFailure(result) && result.failure.knob === "keyPrefix", keyPrefix)
    }
  })

  it.effect(
    "replica acknowledgement: off by default; a count of replicas and a timeout below the lock expiration",
    () =>
      Effect.gen(function* () {
        const defaults = yield* fromEnv({})
        assert.strictEqual(defaults.minReplicasAck, 0)
        assert.strictEqual(millis(defaults.replicaAckTimeout), 1_000)
        const set = yield* fromEnv({ LEASEHOLD_MIN_REPLICAS_ACK: "2", LEASEHOLD_REPLICA_ACK_TIMEOUT_MS: "250" })
        assert.strictEqual(set.minReplicasAck, 2)
        assert.strictEqual(millis(set.replicaAckTimeout), 250)
        // a short lock: half of it, as the hand-off timeout
        assert.strictEqual(
          millis(
            (yield* fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "600", LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "100" }))
              .replicaAckTimeout
          ),
          300
        )

        // not a whole number: a ConfigError that names the variable
        for (const value of ["two", "1.5"]) {
          const error = yield* Effect.flip(fromEnv({ LEASEHOLD_MIN_REPLICAS_ACK: value }))
          assert.notStrictEqual(error._tag, "InvalidConfig", value)
          assert.include(String(error), "LEASEHOLD_MIN_REPLICAS_ACK", value)
        }
        const negative = yield* Effect.flip(fromEnv({ LEASEHOLD_MIN_REPLICAS_ACK: "-1" }))
        assert.strictEqual(negative._tag, "InvalidConfig")
        assert.strictEqual(
          negative.message,
          "invalid configuration: LEASEHOLD_MIN_REPLICAS_ACK=-1 must be a whole number of replicas, 0 or more"
        )
        const long = yield* Effect.flip(
          fromEnv({
            LEASEHOLD_MIN_REPLICAS_ACK: "1",
            LEASEHOLD_REPLICA_ACK_TIMEOUT_MS: "10000",
            LEASEHOLD_LOCK_EXPIRATION_MS: "10000"
          })
        )
        assert.strictEqual(
          long.message,
          "invalid configuration: LEASEHOLD_REPLICA_ACK_TIMEOUT_MS=10000 must be less than LEASEHOLD_LOCK_EXPIRATION_MS (LEASEHOLD_LOCK_EXPIRATION_MS=10000)"
        )
        // without acknowledgement the timeout is not used, and not checked against the lock
        assert.isTrue(
          Result.isSuccess(
            LeaseholdConfig.resolve({ lockExpiration: 500, lockWarningThreshold: 100, replicaAckTimeout: 800 })
          )
        )
        for (const replicaAckTimeout of [0, -5]) {
          const result = LeaseholdConfig.resolve({ minReplicasAck: 1, replicaAckTimeout })
          assert.isTrue(
            Result.isFailure(result) && result.failure.knob === "replicaAckTimeout",
            String(replicaAckTimeout)
          )
        }
        const onCluster = LeaseholdConfig.resolve({ minReplicasAck: 1, redisCluster: true })
        assert.isTrue(Result.isFailure(onCluster))
        if (Result.isFailure(onCluster)) {
          assert.strictEqual(
            onCluster.failure.message,
            "invalid configuration: minReplicasAck = 1 is not supported on a Redis Cluster (redisCluster = true)"
          )
        }
      })
  )

  it.effect("minReplicasAck is refused where nothing could acknowledge: the embedded store, a Redis Cluster", () =>
    Effect.gen(function* () {
      const memory = yield* Effect.flip(
        Layer.build(MemoryStore.layer.pipe(Layer.provide(LeaseholdConfig.layer({ minReplicasAck: 1 })))).pipe(
          Effect.scoped
        )
      )
      assert.strictEqual(
        memory.message,
        "invalid configuration: minReplicasAck = 1 needs a Redis store with replicas; the embedded store has none"
      )
      // refused before any connection is opened (nothing listens on this port)
      const cluster = yield* Effect.flip(
        Layer.build(
          RedisStore.layer({ url: "redis://127.0.0.1:1", cluster: true }).pipe(
            Layer.provide(LeaseholdConfig.layer({ minReplicasAck: 2 }))
          )
        ).pipe(Effect.scoped)
      )
      assert.strictEqual(cluster._tag, "InvalidConfig")
      if (cluster._tag === "InvalidConfig") assert.strictEqual(cluster.knob, "minReplicasAck")
    })
  )

  it.effect("a malformed number in the environment is a ConfigError", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "soon" }))
      assert.notStrictEqual(error._tag, "InvalidConfig")
    })
  )

  it.effect("layerConfig reads a Config: a whole one, or one per knob; its errors name the options", () =>
    Effect.gen(function* () {
      const env = ConfigProvider.fromEnv({ env: { LEASEHOLD_LOCK_EXPIRATION_MS: "9000", APP_LOCK_MS: "3000" } })
      const read = <E>(layer: Layer.Layer<LeaseholdConfig.LeaseholdConfig, E>) =>
        LeaseholdConfig.LeaseholdConfig.pipe(
          Effect.provide(layer),
          Effect.provideService(ConfigProvider.ConfigProvider, env)
        )
      // the app's own variable, one knob
      const own = yield* read(LeaseholdConfig.layerConfig({ lockExpiration: Config.Number("APP_LOCK_MS") }))
      assert.strictEqual(millis(own.lockExpiration), 3000)
      // leasehold's variables, with a value given in code over them
      const over = yield* read(
        LeaseholdConfig.layerConfig(
          Config.map(LeaseholdConfig.config, (input) => ({ ...input, lockExpiration: Duration.seconds(3) }))
        )
      )
      assert.strictEqual(millis(over.lockExpiration), 3000)
      const error = yield* Effect.flip(
        read(
          LeaseholdConfig.layerConfig({
            lockExpiration: Config.Number("APP_LOCK_MS"),
            lockWarningThreshold: Config.succeed(5000)
          })
        )
      )
      assert.strictEqual(error._tag, "InvalidConfig")
      if (error._tag === "InvalidConfig") {
        assert.strictEqual(
          error.message,
          "invalid configuration: lockWarningThreshold = 5000ms must be less than lockExpiration (lockExpiration = 3000ms)"
        )
      }
    })
  )

  it.effect("layer validates the settings given in code when it is built, naming the options", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Layer.build(LeaseholdConfig.layer({ lockExpiration: 100, lockWarningThreshold: 500 })).pipe(Effect.scoped)
      )
      assert.strictEqual(error.knob, "lockWarningThreshold")
      assert.strictEqual(
        error.message,
        "invalid configuration: lockWarningThreshold = 500ms must be less than lockExpiration (lockExpiration = 100ms)"
      )
      const defaults = yield* LeaseholdConfig.LeaseholdConfig.pipe(Effect.provide(LeaseholdConfig.layer({})))
      assert.strictEqual(millis(defaults.lockExpiration), 10_000)
    })
  )

  it.effect("the environment's presence expiration: 3 s, or half a short token expiration, as from code", () =>
    Effect.gen(function* () {
      // a token expiration of 3 s: presence 1.5 s, not the 3 s that would equal it
      const short = yield* fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "2000", LEASEHOLD_TOKEN_EXPIRATION_S: "3" })
      assert.strictEqual(millis(short.presenceExpiration), 1500)
      const fromCode = LeaseholdConfig.resolve({ lockExpiration: 2000, tokenExpiration: "3 seconds" })
      assert.isTrue(Result.isSuccess(fromCode) && millis(fromCode.success.presenceExpiration) === 1500)
      assert.strictEqual(millis((yield* fromEnv({ LEASEHOLD_TOKEN_EXPIRATION_S: "60" })).presenceExpiration), 3000)
      // set, it is as set, and still checked against the token expiration
      const error = yield* Effect.flip(
        fromEnv({
          LEASEHOLD_LOCK_EXPIRATION_MS: "2000",
          LEASEHOLD_TOKEN_EXPIRATION_S: "3",
          LEASEHOLD_PRESENCE_EXPIRATION_MS: "3000"
        })
      )
      assert.strictEqual(
        error.message,
        "invalid configuration: LEASEHOLD_PRESENCE_EXPIRATION_MS=3000 must be less than LEASEHOLD_TOKEN_EXPIRATION_S (LEASEHOLD_TOKEN_EXPIRATION_S=3)"
      )
    })
  )

  it.effect("an error from the environment names a variable left unset with the default it took", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "500" }))
      assert.strictEqual(
        error.message,
        "invalid configuration: LEASEHOLD_LOCK_WARNING_THRESHOLD_MS=(unset: 1000) must be less than LEASEHOLD_LOCK_EXPIRATION_MS (LEASEHOLD_LOCK_EXPIRATION_MS=500)"
      )
      const name = yield* Effect.flip(fromEnv({ LEASEHOLD_REDIS_SENTINEL_NAME: "mymaster" }))
      assert.strictEqual(
        name.message,
        "invalid configuration: LEASEHOLD_REDIS_SENTINEL_NAME=mymaster is set without LEASEHOLD_REDIS_SENTINELS"
      )
    })
  )

  it.effect("an error from the environment shows a Redis URL without its password", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        fromEnv({
          LEASEHOLD_REDIS_URL: "redis://app:hunter2@127.0.0.1:6390/0",
          LEASEHOLD_REDIS_SENTINELS: "redis://:s3cret@10.0.0.1:26379,10.0.0.2:26379",
          LEASEHOLD_REDIS_SENTINEL_NAME: "mymaster"
        })
      )
      assert.strictEqual(
        error.message,
        "invalid configuration: LEASEHOLD_REDIS_URL=redis://app:<redacted>@127.0.0.1:6390/0 must be unset with LEASEHOLD_REDIS_SENTINELS (credentials, TLS and the database go in the Sentinel URL) (LEASEHOLD_REDIS_SENTINELS=redis://:<redacted>@10.0.0.1:26379,10.0.0.2:26379)"
      )
      assert.notInclude(error.message, "hunter2")
      assert.notInclude(error.message, "s3cret")
    })
  )

  it.effect("a URL that does not parse (a password with a /, a , or an @) shows none of its password", () =>
    Effect.gen(function* () {
      const refused = (env: Record<string, string>) =>
        Effect.flip(
          Layer.build(RedisStore.layerFromSettings.pipe(Layer.provide(LeaseholdConfig.layerFromEnv))).pipe(
            Effect.scoped,
            Effect.provideService(
              ConfigProvider.ConfigProvider,
              ConfigProvider.fromEnv({ env: { LEASEHOLD_CONNECT_TIMEOUT_MS: "300", ...env } })
            )
          )
        )
      // each password's pieces between its separators are what must not show
      const pieces = ["zq7", "xv9", "qu3ry"]
      const cases: ReadonlyArray<Record<string, string>> = [
        { LEASEHOLD_REDIS_URL: "redis://user:zq7/xv9@127.0.0.1:1" },
        { LEASEHOLD_REDIS_URL: "redis://user:zq7,xv9@127.0.0.1:1" },
        { LEASEHOLD_REDIS_URL: "redis://user:zq7@xv9@" },
        { LEASEHOLD_REDIS_URL: "redis://user:zq7@xv9@/0?password=qu3ry" },
        { LEASEHOLD_REDIS_SENTINELS: "redis://:zq7/xv9@127.0.0.1:1", LEASEHOLD_REDIS_SENTINEL_NAME: "mymaster" },
        { LEASEHOLD_REDIS_SENTINELS: "redis://:zq7,xv9@127.0.0.1:1", LEASEHOLD_REDIS_SENTINEL_NAME: "mymaster" }
      ]
      for (const env of cases) {
        // refused as it is, or (one that parses) not reached: either way, no password shown
        const error = yield* refused(env)
        assert.oneOf(error._tag, ["InvalidConfig", "StoreUnavailable"])
        for (const piece of pieces) assert.notInclude(error.message, piece, JSON.stringify(env))
      }
      assert.strictEqual(
        (yield* refused({ LEASEHOLD_REDIS_URL: "redis://user:zq7/xv9@127.0.0.1:1" })).message,
        "invalid configuration: LEASEHOLD_REDIS_URL=<redacted> must be a redis:// or rediss:// URL with a host"
      )
    })
  )

  it.effect("a store built on settings from the environment names the variables in its InvalidConfig", () =>
    Effect.gen(function* () {
      const build = <A, E>(store: Layer.Layer<A, E, LeaseholdConfig.LeaseholdConfig>, env: Record<string, string>) =>
        Effect.flip(
          Layer.build(store.pipe(Layer.provide(LeaseholdConfig.layerFromEnv))).pipe(
            Effect.scoped,
            Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
          )
        )
      const unset = yield* build(RedisStore.layerFromSettings, {})
      assert.strictEqual(
        unset.message,
        "invalid configuration: LEASEHOLD_REDIS_URL=(unset) must be set to use the Redis store"
      )
      const memory = yield* build(MemoryStore.layer, { LEASEHOLD_MIN_REPLICAS_ACK: "1" })
      assert.strictEqual(
        memory.message,
        "invalid configuration: LEASEHOLD_MIN_REPLICAS_ACK=1 needs a Redis store with replicas; the embedded store has none"
      )
      const cluster = yield* build(MemoryStore.layer, { LEASEHOLD_REDIS_CLUSTER: "true" })
      assert.strictEqual(
        cluster.message,
        "invalid configuration: LEASEHOLD_REDIS_CLUSTER=true is set without LEASEHOLD_REDIS_URL; the embedded store is no Cluster"
      )
      // from code, the options as given
      const fromCode = yield* Effect.flip(
        Layer.build(RedisStore.layerFromSettings.pipe(Layer.provide(LeaseholdConfig.layer({})))).pipe(Effect.scoped)
      )
      assert.strictEqual(
        fromCode.message,
        "invalid configuration: redisUrl = (unset) must be set to use the Redis store"
      )
      // layer(options): its options by their names; what it takes from the settings, in their terms
      const at = <A, E>(store: Layer.Layer<A, E, LeaseholdConfig.LeaseholdConfig>, env?: Record<string, string>) =>
        Effect.flip(
          Layer.build(
            store.pipe(Layer.provide(env === undefined ? LeaseholdConfig.layer({}) : LeaseholdConfig.layerFromEnv))
          ).pipe(
            Effect.scoped,
            Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: env ?? {} }))
          )
        )
      assert.strictEqual(
        (yield* at(RedisStore.layer({ url: "redis://" }))).message,
        "invalid configuration: url = <redacted> must be a redis:// or rediss:// URL with a host"
      )
      assert.strictEqual(
        (yield* at(RedisStore.layer({ sentinels: "not a list", sentinelName: "m" }))).message,
        "invalid configuration: sentinels = <redacted> must be host:port[,host:port...] or a redis:// or rediss:// URL listing them, with an optional database number"
      )
      assert.strictEqual(
        (yield* at(RedisStore.layer({ sentinels: "127.0.0.1:1" }))).message,
        "invalid configuration: redisSentinelName = (unset) must name the master the Sentinels monitor"
      )
      assert.strictEqual(
        (yield* at(RedisStore.layer({ sentinels: "127.0.0.1:1" }), {})).message,
        "invalid configuration: LEASEHOLD_REDIS_SENTINEL_NAME=(unset) must name the master the Sentinels monitor"
      )
    })
  )

  it.effect("an empty LEASEHOLD_DATA_DIR keeps nothing on disk, whether the provider keeps empty strings or not", () =>
    Effect.gen(function* () {
      for (const preserveEmptyStrings of [false, true]) {
        const settings = yield* LeaseholdConfig.LeaseholdConfig.pipe(
          Effect.provide(LeaseholdConfig.layerFromEnv),
          Effect.provideService(
            ConfigProvider.ConfigProvider,
            ConfigProvider.fromEnv({
              env: { LEASEHOLD_DATA_DIR: "", LEASEHOLD_LOCK_EXPIRATION_MS: "" },
              preserveEmptyStrings
            })
          )
        )
        assert.isTrue(Option.isNone(settings.dataDir), String(preserveEmptyStrings))
        // and an empty number is unset too, not 0
        assert.strictEqual(millis(settings.lockExpiration), 10_000, String(preserveEmptyStrings))
      }
      // from code, an empty path is still refused: it would be the working directory
      const empty = LeaseholdConfig.resolve({ dataDir: Option.some("") })
      assert.isTrue(Result.isFailure(empty) && empty.failure.knob === "dataDir")
    })
  )
})
