import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
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
    Effect.provide(LeaseholdConfig.layer),
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

  it.effect("a warning threshold not below the lock expiration names both knobs and values", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        fromEnv({ LEASEHOLD_LOCK_EXPIRATION_MS: "2000", LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "2000" })
      )
      assert.strictEqual(error._tag, "InvalidConfig")
      if (error._tag !== "InvalidConfig") return
      assert.strictEqual(error.knob, "lockWarningThreshold")
      assert.strictEqual(error.value, "2000ms")
      deepStrictEqual(error.other, { knob: "lockExpiration", value: "2000ms" })
      assert.include(error.message, "lockWarningThreshold = 2000ms")
      assert.include(error.message, "lockExpiration = 2000ms")
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
      assert.strictEqual(error.knob, "handoffTimeout")
      deepStrictEqual(error.other, { knob: "lockExpiration", value: "2000ms" })
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
      assert.strictEqual(error.knob, "presenceExpiration")
      deepStrictEqual(error.other, { knob: "tokenExpiration", value: "20000ms" })
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
          "invalid configuration: minReplicasAck = -1 must be a whole number of replicas, 0 or more"
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
          "invalid configuration: replicaAckTimeout = 10000ms must be less than lockExpiration (lockExpiration = 10000ms)"
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
        Layer.build(MemoryStore.layer.pipe(Layer.provide(LeaseholdConfig.layerWith({ minReplicasAck: 1 })))).pipe(
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
            Layer.provide(LeaseholdConfig.layerWith({ minReplicasAck: 2 }))
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

  it.effect("values given in code override the environment", () =>
    Effect.gen(function* () {
      const s = yield* LeaseholdConfig.LeaseholdConfig.pipe(
        Effect.provide(LeaseholdConfig.layerConfig({ lockExpiration: Duration.seconds(3) })),
        Effect.provideService(
          ConfigProvider.ConfigProvider,
          ConfigProvider.fromEnv({ env: { LEASEHOLD_LOCK_EXPIRATION_MS: "9000" } })
        )
      )
      assert.strictEqual(millis(s.lockExpiration), 3000)
    })
  )

  it.effect("layerWith validates when the layer is built", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Layer.build(LeaseholdConfig.layerWith({ lockExpiration: 100, lockWarningThreshold: 500 })).pipe(Effect.scoped)
      )
      assert.strictEqual(error.knob, "lockWarningThreshold")
    })
  )
})
