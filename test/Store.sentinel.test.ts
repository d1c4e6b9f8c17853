/**
 * The store conformance suite on a primary with two replicas behind three Sentinels, the
 * Sentinel configuration, and what only Sentinel has: a failover, by SIGKILL and by
 * SIGSTOP of the primary, that every connection of the store follows.
 *
 * One deployment serves the whole file (starting one takes seconds); each test has its own
 * key prefix, so the keys, channels and mailboxes of one test are its own.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { makeKeys } from "../src/internal/keys.js"
import { connectionOptions, endConnection, openConnection } from "../src/internal/redis/connection.js"
import { parseSentinels } from "../src/internal/redis/sentinel.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { MailboxStart, Store } from "../src/Store.js"
import type { Backend, Fixture } from "./conformance/backend.js"
import { collectFirst, failsWith, joinWithin, within } from "./conformance/helpers.js"
import { storeSuite } from "./conformance/storeSuite.js"
import { succeedsReal, untilReal } from "./support/poll.js"
import * as RedisSentinel from "./support/RedisSentinel.js"
import * as RedisServer from "./support/RedisServer.js"

/**
 * Real time on a loaded machine: the suite's bounds leave a quarter of the lock expiration
 * (300 ms) either way, and a grant outlives a release, the grantee's next commands and a
 * notice's delivery by far. Short enough that the cases which wait for an expiry stay quick.
 */
const LOCK_EXPIRATION_MS = 1_200
const HANDOFF_TIMEOUT_MS = 500
const COMMAND_TIMEOUT_MS = 1_000

const deployments = RedisSentinel.shared()
const sharedDeployment = deployments.get
afterAll(deployments.close, 60_000)

/**
 * Commands that do not touch data: the harness's own, and what the Sentinels (PING, INFO,
 * their hello messages) and the replicas (REPLCONF ACK) send the primary all along.
 */
const uncounted = (name: string) =>
  ["cmdstat_ping", "cmdstat_info", "cmdstat_publish", "cmdstat_replconf", "cmdstat_subscribe", "cmdstat_scan"].includes(
    name
  ) || name.startsWith("cmdstat_client")

const onPrimary = <A>(
  sentinel: RedisSentinel.RedisSentinel,
  f: (server: RedisServer.RedisServer) => Effect.Effect<A, unknown>
) => Effect.orDie(Effect.flatMap(sentinel.primary, f))

const keysUnder = (server: RedisServer.RedisServer, prefix: string) =>
  Effect.gen(function* () {
    let cursor = "0"
    let count = 0
    do {
      const [next, page] = (yield* server.command("SCAN", cursor, "MATCH", `${prefix}:*`, "COUNT", 1000)) as [
        string,
        ReadonlyArray<string>
      ]
      count += page.length
      cursor = next
    } while (cursor !== "0")
    return count
  })

/** Cut the store's subscriber connections only: the Sentinels' own subscriptions on the primary stay. */
const cutSubscribers = (server: RedisServer.RedisServer) =>
  Effect.gen(function* () {
    const list = String(yield* server.command("CLIENT", "LIST", "TYPE", "pubsub"))
    const ids = list
      .split("\n")
      .filter((line) => line.includes("name=leasehold:subscriber"))
      .map((line) => /(?:^|\s)id=(\d+)/.exec(line)?.[1])
      .filter((id): id is string => id !== undefined)
    for (const id of ids) yield* server.command("CLIENT", "KILL", "ID", id)
    return ids.length
  })

let testCount = 0

const config = (keyPrefix: string, input: LeaseholdConfig.Input = {}) =>
  LeaseholdConfig.layer({
    keyPrefix,
    lockExpiration: LOCK_EXPIRATION_MS,
    handoffTimeout: HANDOFF_TIMEOUT_MS,
    lockWarningThreshold: 100,
    commandTimeout: COMMAND_TIMEOUT_MS,
    connectTimeout: COMMAND_TIMEOUT_MS * 5,
    ...input
  })

const buildStore = (sentinel: RedisSentinel.RedisSentinel, keyPrefix: string) =>
  Layer.build(
    RedisStore.layer({ sentinels: sentinel.addresses, sentinelName: sentinel.name }).pipe(
      Layer.provide(config(keyPrefix))
    )
  ).pipe(
    Effect.orDie,
    Effect.map((context) => Context.get(context, Store))
  )

const sentinelBackend: Backend = {
  name: "redis",
  canHang: true,
  test: (name, body) =>
    it.live(
      name,
      () =>
        Effect.gen(function* () {
          const sentinel = yield* sharedDeployment
          const keyPrefix = `sn${++testCount}`
          const store = yield* buildStore(sentinel, keyPrefix)
          const primary = (f: (server: RedisServer.RedisServer) => Effect.Effect<unknown, unknown>) =>
            Effect.asVoid(onPrimary(sentinel, f))
          const fixture: Fixture = {
            store,
            keys: makeKeys(keyPrefix),
            lockExpirationMs: LOCK_EXPIRATION_MS,
            handoffTimeoutMs: HANDOFF_TIMEOUT_MS,
            commandTimeoutMs: COMMAND_TIMEOUT_MS,
            exactTime: false,
            advance: (ms) => Effect.sleep(ms),
            awaitBlockedRead: untilReal(
              "a blocked client on the primary",
              onPrimary(sentinel, (server) =>
                Effect.map(server.info("clients"), (info) => Number(info.blocked_clients) > 0)
              ),
              { within: 5_000 }
            ),
            putRaw: (key, value) => primary((server) => server.command("SET", key, value)),
            putRawExpiring: (key, value, ttlMs) => primary((server) => server.command("SET", key, value, "PX", ttlMs)),
            expireRaw: (key, ttlMs) => primary((server) => server.command("PEXPIRE", key, ttlMs)),
            keyCount: onPrimary(sentinel, (server) => keysUnder(server, keyPrefix)),
            commandsProcessed: Option.some(
              onPrimary(sentinel, (server) =>
                Effect.map(server.info("commandstats"), (stats) => RedisServer.commandCalls(stats, uncounted))
              )
            ),
            channelSubscribers: Option.some((channel) => onPrimary(sentinel, (server) => server.numsub(channel))),
            quiet: {
              _tag: "Publish",
              publish: (channel, message) => primary((server) => server.command("PUBLISH", channel, message))
            },
            outage: {
              begin: sentinel.killAll,
              // idempotent: the suite also runs it as a finalizer
              end: sentinel.restartAll
            },
            hang: Option.some({ begin: sentinel.pauseAll, end: sentinel.resumeAll }),
            dropSubscriptions: onPrimary(sentinel, cutSubscribers)
          }
          yield* body(fixture)
        }),
      60_000
    )
}

describe("Store conformance: RedisStore behind Sentinel", () => {
  storeSuite(sentinelBackend)
})

// --- failovers ------------------------------------------------------------------------

/** The names of the store's connections (`leasehold:<role>`) open on a server. */
const storeConnections = (server: RedisServer.RedisServer) =>
  Effect.map(Effect.orDie(server.command("CLIENT", "LIST")), (list) =>
    String(list)
      .split("\n")
      .flatMap((line) => /(?:^|\s)name=(leasehold:\w+)/.exec(line)?.[1] ?? [])
      .sort()
  )

describe("RedisStore through a failover", () => {
  it.live(
    "a primary killed: a replica is promoted, the store is ready again in a new epoch, and every connection is on the new primary",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* sharedDeployment
        const keyPrefix = `sn${++testCount}`
        const store = yield* buildStore(sentinel, keyPrefix)
        yield* store.tryAcquire("tok", "lock-1", ["a"])
        yield* store.commitAndRelease("tok", "lock-1", [["a", "kept"]])
        yield* sentinel.awaitReplicated
        const signals = yield* Effect.forkChild(Stream.runDrain(yield* store.subscribe("tok")))
        const read = yield* Effect.forkChild(store.mailboxRead("inst-b", MailboxStart, { count: 10, blockMs: 30_000 }))
        yield* untilReal(
          "the read blocked on the primary",
          onPrimary(sentinel, (server) =>
            Effect.map(server.info("clients"), (info) => Number(info.blocked_clients) > 0)
          ),
          { within: 5_000 }
        )
        const before = yield* store.status
        assert.isTrue(before.ready)

        const { old, promoted } = yield* sentinel.failover("kill")
        yield* Effect.addFinalizer(() => sentinel.rejoin(old))
        // what the old primary carried fails, as on any lost connection
        assert.strictEqual(
          (yield* within("the subscription to fail", 10_000, Effect.flip(Fiber.join(signals))))._tag,
          "StoreUnavailable"
        )
        assert.strictEqual(
          (yield* within("the blocked read to fail", 10_000, Effect.flip(Fiber.join(read))))._tag,
          "StoreUnavailable"
        )
        yield* untilReal(
          "ready again, in a new epoch",
          Effect.map(store.status, (status) => status.ready && status.epoch > before.epoch),
          { within: 15_000 }
        )
        deepStrictEqual(yield* store.readSlices("tok", ["a"]), [Option.some("kept")])
        const grant = yield* succeedsReal("a grant on the new primary", store.tryAcquire("tok", "lock-2", ["a"]), {
          within: 5_000
        })
        assert.strictEqual(grant._tag, "Acquired")
        // the fence goes on from the replicated one
        assert.strictEqual(grant._tag === "Acquired" ? grant.fence : 0, 2)
        // signals, keyspace events and blocking reads on the new primary
        const again = yield* collectFirst(yield* store.subscribe("tok"), 1)
        yield* store.release("tok", "lock-2")
        deepStrictEqual(yield* joinWithin("a signal after the failover", 5_000, again), [
          { _tag: "Released", lockId: "lock-2" }
        ])
        assert.strictEqual((yield* store.enableSocketEvents)._tag, "Enabled")
        const events = yield* collectFirst(yield* store.socketEvents, 1)
        yield* store.claimSocket("tok", { instanceId: "inst-a", connectionId: "c" })
        deepStrictEqual(yield* joinWithin("a socket event after the failover", 5_000, events), [
          { token: "tok", event: "set" }
        ])
        const reader = yield* Effect.forkChild(
          store.mailboxRead("inst-b", MailboxStart, { count: 10, blockMs: 10_000 })
        )
        yield* untilReal(
          "a read blocked on the new primary",
          Effect.map(Effect.orDie(promoted.info("clients")), (info) => Number(info.blocked_clients) > 0),
          { within: 5_000 }
        )
        const id = yield* store.mailboxAppend("inst-b", "after", { maxLen: 100, ttlMs: 60_000 })
        deepStrictEqual(yield* joinWithin("the blocked read", 5_000, reader), [{ id, payload: "after" }])
        deepStrictEqual(yield* storeConnections(promoted), [
          "leasehold:blocking",
          "leasehold:command",
          "leasehold:subscriber"
        ])
      }),
    90_000
  )

  it.live(
    "a primary frozen: commands time out, the store follows the promotion while the old primary is still frozen, and keeps off it once it thaws as a replica",
    () =>
      Effect.gen(function* () {
        const sentinel = yield* sharedDeployment
        const keyPrefix = `sn${++testCount}`
        const store = yield* buildStore(sentinel, keyPrefix)
        yield* store.tryAcquire("tok", "lock-1", ["a"])
        yield* store.commitAndRelease("tok", "lock-1", [["a", "kept"]])
        yield* sentinel.awaitReplicated
        const before = yield* store.status

        const frozen = yield* sentinel.primary
        yield* frozen.pause
        yield* Effect.addFinalizer(() => frozen.resume)
        const stalled = yield* failsWith(store.readSlices("tok", ["a"]), "StoreUnavailable")
        assert.include(stalled.message, "readSlices")
        const { old, promoted } = yield* sentinel.failover("pause")
        assert.strictEqual(old, frozen)
        // the Sentinels announce the promotion: the connections to the frozen server drop
        // (nothing else would end them: it still holds their sockets)
        yield* untilReal(
          "ready again, in a new epoch, while the old primary is frozen",
          Effect.map(store.status, (status) => status.ready && status.epoch > before.epoch),
          { within: 15_000 }
        )
        deepStrictEqual(yield* succeedsReal("a read", store.readSlices("tok", ["a"]), { within: 5_000 }), [
          Option.some("kept")
        ])
        assert.strictEqual((yield* store.tryAcquire("tok", "lock-2", []))._tag, "Acquired")
        assert.strictEqual(Option.isSome(yield* old.pid), true)

        yield* sentinel.rejoin(old)
        deepStrictEqual(yield* storeConnections(old), [])
        // a grant and a commit go to the new primary, never to the old one (a replica now)
        assert.strictEqual((yield* store.tryAcquire("tok", "lock-3", []))._tag, "Acquired")
        yield* store.commitAndRelease("tok", "lock-3", [["a", "after"]])
        yield* sentinel.awaitReplicated
        deepStrictEqual(yield* RedisServer.getRaw(old, `${keyPrefix}:{tok}:s:a`), Option.some("after"))
        assert.include(yield* storeConnections(promoted), "leasehold:command")
      }),
    90_000
  )
})

describe("Sentinel connections", () => {
  it.live("a connection that ends without the store closing it connects again; one the store closes stays closed", () =>
    Effect.gen(function* () {
      const sentinel = yield* sharedDeployment
      const parsed = parseSentinels(sentinel.addresses, sentinel.name)!
      const endpoint = { ...parsed.endpoint, sentinel: parsed.target }
      const options = connectionOptions("command", { commandTimeoutMs: 1_000, connectTimeoutMs: 5_000 })
      const connection = yield* Effect.acquireRelease(
        Effect.sync(() => openConnection(endpoint, options, () => undefined)),
        (c) => Effect.sync(() => endConnection(c))
      )
      yield* untilReal(
        "ready",
        Effect.sync(() => connection.status === "ready"),
        { within: 10_000 }
      )
      // what ioredis does when a promotion's announcement cuts a connection that is asking
      // the Sentinels for the primary: it ends it
      let ends = 0
      connection.on("end", () => ends++)
      connection.disconnect()
      yield* untilReal(
        "ended, then ready again",
        Effect.sync(() => ends === 1 && connection.status === "ready"),
        { within: 10_000 }
      )
      assert.strictEqual(yield* Effect.promise(() => connection.ping()), "PONG")
      endConnection(connection)
      yield* Effect.sleep(1_000)
      assert.strictEqual(connection.status, "end")
    })
  )
})

// --- configuration --------------------------------------------------------------------

describe("RedisStore Sentinel configuration", () => {
  const fromEnv = (env: Record<string, string>) =>
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
  const buildFromEnv = (env: Record<string, string>) =>
    Layer.build(RedisStore.layerFromSettings.pipe(Layer.provide(LeaseholdConfig.layerFromEnv))).pipe(fromEnv(env))

  it.live("LEASEHOLD_REDIS_SENTINELS and LEASEHOLD_REDIS_SENTINEL_NAME find the primary", () =>
    Effect.gen(function* () {
      const sentinel = yield* sharedDeployment
      const keyPrefix = `sn${++testCount}`
      const store = yield* buildFromEnv({
        LEASEHOLD_REDIS_SENTINELS: sentinel.addresses,
        LEASEHOLD_REDIS_SENTINEL_NAME: sentinel.name,
        LEASEHOLD_KEY_PREFIX: keyPrefix
      }).pipe(
        Effect.orDie,
        Effect.map((context) => Context.get(context, Store))
      )
      yield* store.claimSocket("tok", { instanceId: "inst-a", connectionId: "c" })
      const primary = yield* sentinel.primary
      assert.isTrue(Option.isSome(yield* RedisServer.getRaw(primary, `${keyPrefix}:{tok}:socket`)))
    })
  )

  it.effect(
    "a malformed Sentinel list, a missing master name, or a URL beside them is InvalidConfig naming the variable, never echoing a password",
    () =>
      Effect.gen(function* () {
        for (const [env, knob] of [
          [
            { LEASEHOLD_REDIS_SENTINELS: "redis://:s3cret-pw@127.0.0.1", LEASEHOLD_REDIS_SENTINEL_NAME: "m" },
            "LEASEHOLD_REDIS_SENTINELS"
          ],
          [
            { LEASEHOLD_REDIS_SENTINELS: "redis://:s3cret-pw@127.0.0.1:99999", LEASEHOLD_REDIS_SENTINEL_NAME: "m" },
            "LEASEHOLD_REDIS_SENTINELS"
          ],
          [
            { LEASEHOLD_REDIS_SENTINELS: "127.0.0.1:1/x", LEASEHOLD_REDIS_SENTINEL_NAME: "m" },
            "LEASEHOLD_REDIS_SENTINELS"
          ],
          [{ LEASEHOLD_REDIS_SENTINELS: " ", LEASEHOLD_REDIS_SENTINEL_NAME: "m" }, "LEASEHOLD_REDIS_SENTINELS"],
          [{ LEASEHOLD_REDIS_SENTINELS: "redis://:s3cret-pw@127.0.0.1:1" }, "LEASEHOLD_REDIS_SENTINEL_NAME"],
          [
            { LEASEHOLD_REDIS_SENTINELS: "127.0.0.1:1", LEASEHOLD_REDIS_SENTINEL_NAME: "my master" },
            "LEASEHOLD_REDIS_SENTINEL_NAME"
          ],
          [{ LEASEHOLD_REDIS_SENTINEL_NAME: "m" }, "LEASEHOLD_REDIS_SENTINEL_NAME"],
          [
            {
              LEASEHOLD_REDIS_SENTINELS: "127.0.0.1:1",
              LEASEHOLD_REDIS_SENTINEL_NAME: "m",
              LEASEHOLD_REDIS_URL: "redis://:s3cret-pw@127.0.0.1:2"
            },
            "LEASEHOLD_REDIS_URL"
          ],
          [
            {
              LEASEHOLD_REDIS_SENTINELS: "127.0.0.1:1",
              LEASEHOLD_REDIS_SENTINEL_NAME: "m",
              LEASEHOLD_REDIS_CLUSTER: "true"
            },
            "LEASEHOLD_REDIS_CLUSTER"
          ]
        ] as const) {
          const error = yield* failsWith(Effect.scoped(buildFromEnv(env)), "InvalidConfig")
          assert.strictEqual(error.knob, knob, JSON.stringify(env))
          assert.notInclude(error.message, "s3cret-pw")
        }
      })
  )

  it.live(
    "unreachable Sentinels fail the build with StoreUnavailable within the connect timeout, without the password",
    () =>
      Effect.gen(function* () {
        const ports = [yield* Effect.promise(RedisServer.freePort), yield* Effect.promise(RedisServer.freePort)]
        const started = performance.now()
        const error = yield* failsWith(
          Layer.build(
            RedisStore.layer({
              sentinels: `redis://user:s3cret-pw@127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}`,
              sentinelName: "leasehold"
            }).pipe(Layer.provide(LeaseholdConfig.layer({ connectTimeout: 500, commandTimeout: 500 })))
          ).pipe(Effect.scoped),
          "StoreUnavailable"
        )
        assert.isBelow(performance.now() - started, 3_000)
        assert.notInclude(JSON.stringify(error), "s3cret-pw")
        assert.notInclude(error.message, "s3cret-pw")
        assert.include(error.message, `127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}`)
      })
  )
})
