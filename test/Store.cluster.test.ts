/**
 * The store conformance suite on a 3-master Redis Cluster, and what only a cluster has:
 * keys spread over the masters, sharded signals, scans and keyspace notifications on
 * every master, and a cluster that is down.
 *
 * One cluster serves the whole file (starting one takes seconds); each test has its own
 * key prefix, so the keys, channels and mailboxes of one test are its own.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { makeKeys } from "../src/internal/keys.js"
import { keySlot } from "../src/internal/redis/cluster.js"
import { parseEndpoint, toStoreError } from "../src/internal/redis/connection.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { Store } from "../src/Store.js"
import type { Backend, Fixture } from "./conformance/backend.js"
import { collectFirst, failsWith, joinWithin, within } from "./conformance/helpers.js"
import { storeSuite } from "./conformance/storeSuite.js"
import { succeedsReal, untilReal } from "./support/poll.js"
import * as RedisCluster from "./support/RedisCluster.js"
import * as RedisServer from "./support/RedisServer.js"

/**
 * Real time on a loaded machine: the suite's bounds leave a quarter of the lock expiration
 * (300 ms) either way, and a grant outlives a release, the grantee's next commands and a
 * notice's delivery by far. Short enough that the cases which wait for an expiry stay quick.
 */
const LOCK_EXPIRATION_MS = 1_200
const HANDOFF_TIMEOUT_MS = 500
const COMMAND_TIMEOUT_MS = 1_000

// --- one cluster for the file ---------------------------------------------------------

const clusters = RedisCluster.shared()
const sharedCluster = clusters.get
afterAll(clusters.close, 60_000)

// --- the fixture ----------------------------------------------------------------------

/** Commands that do not touch data: the harness's own, and the cluster client's topology reads. */
const uncounted = (name: string) =>
  name === "cmdstat_ping" || name === "cmdstat_info" || name.startsWith("cmdstat_cluster") || name === "cmdstat_scan"

const commandsProcessed = (cluster: RedisCluster.RedisCluster) =>
  Effect.forEach(cluster.nodes, (node) => node.info("commandstats")).pipe(
    Effect.map((all) => all.reduce((total, stats) => total + RedisServer.commandCalls(stats, uncounted), 0)),
    Effect.orDie
  )

/** The keys under one prefix on every master (the cluster is shared; the prefix is the test's). */
const keysUnder = (cluster: RedisCluster.RedisCluster, prefix: string) =>
  Effect.forEach(cluster.nodes, (node) =>
    Effect.gen(function* () {
      let cursor = "0"
      let count = 0
      do {
        const [next, page] = (yield* node.command("SCAN", cursor, "MATCH", `${prefix}:*`, "COUNT", 1000)) as [
          string,
          ReadonlyArray<string>
        ]
        count += page.length
        cursor = next
      } while (cursor !== "0")
      return count
    })
  ).pipe(
    Effect.map((counts) => counts.reduce((a, b) => a + b, 0)),
    Effect.orDie
  )

const blockedClients = (cluster: RedisCluster.RedisCluster) =>
  Effect.map(
    Effect.forEach(cluster.nodes, (node) => Effect.orDie(node.info("clients"))),
    (infos) => infos.reduce((sum, info) => sum + Number(info.blocked_clients), 0)
  )

const shardSubscribers = (cluster: RedisCluster.RedisCluster, channel: string) =>
  Effect.gen(function* () {
    const node = yield* cluster.nodeFor(channel)
    const reply = (yield* node.command("PUBSUB", "SHARDNUMSUB", channel)) as [string, number]
    return Number(reply[1])
  }).pipe(Effect.orDie)

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

const buildStore = (cluster: RedisCluster.RedisCluster, keyPrefix: string) =>
  Layer.build(RedisStore.layer({ url: cluster.url, cluster: true }).pipe(Layer.provide(config(keyPrefix)))).pipe(
    Effect.orDie,
    Effect.map((context) => Context.get(context, Store))
  )

const putRaw = (cluster: RedisCluster.RedisCluster, ...args: ReadonlyArray<string | number>) =>
  Effect.orDie(
    Effect.flatMap(cluster.nodeFor(String(args[1])), (node: RedisServer.RedisServer) => node.command(...args))
  )

const redisCluster: Backend = {
  name: "redis-cluster",
  canHang: true,
  test: (name, body) =>
    it.live(
      name,
      () =>
        Effect.gen(function* () {
          const cluster = yield* sharedCluster
          const keyPrefix = `cl${++testCount}`
          const store = yield* buildStore(cluster, keyPrefix)
          const fixture: Fixture = {
            store,
            keys: makeKeys(keyPrefix),
            lockExpirationMs: LOCK_EXPIRATION_MS,
            handoffTimeoutMs: HANDOFF_TIMEOUT_MS,
            commandTimeoutMs: COMMAND_TIMEOUT_MS,
            exactTime: false,
            advance: (ms) => Effect.sleep(ms),
            awaitBlockedRead: untilReal(
              "a blocked client on a node",
              Effect.map(blockedClients(cluster), (n) => n > 0),
              { within: 5_000 }
            ),
            putRaw: (key, value) => putRaw(cluster, "SET", key, value),
            putRawExpiring: (key, value, ttlMs) => putRaw(cluster, "SET", key, value, "PX", ttlMs),
            expireRaw: (key, ttlMs) => Effect.asVoid(putRaw(cluster, "PEXPIRE", key, ttlMs)),
            keyCount: keysUnder(cluster, keyPrefix),
            commandsProcessed: Option.some(commandsProcessed(cluster)),
            channelSubscribers: Option.some((channel) => shardSubscribers(cluster, channel)),
            quiet: {
              _tag: "Publish",
              publish: (channel, message) => Effect.asVoid(putRaw(cluster, "SPUBLISH", channel, message))
            },
            outage: {
              begin: cluster.kill,
              // idempotent: the suite also runs it as a finalizer
              end: cluster.restart
            },
            hang: Option.some({ begin: cluster.pause, end: cluster.resume }),
            dropSubscriptions: Effect.orDie(cluster.clientKill("pubsub"))
          }
          yield* body(fixture)
        }),
      60_000
    )
}

describe("Store conformance: RedisStore on a Redis Cluster", () => {
  storeSuite(redisCluster)
})

// --- what only a cluster has ----------------------------------------------------------

const tokens = (n: number) => Array.from({ length: n }, (_, i) => `tok-${i}`)

/** The ports of the nodes that hold each key. */
const portsOf = (cluster: RedisCluster.RedisCluster, keys: ReadonlyArray<string>) =>
  Effect.forEach(keys, (key) => Effect.map(Effect.orDie(cluster.nodeFor(key)), (node) => node.port))

const flagsOf = (node: RedisServer.RedisServer) =>
  Effect.map(
    Effect.orDie(node.command("CONFIG", "GET", "notify-keyspace-events")),
    (reply) => (reply as [string, string])[1]
  )

describe("RedisStore on a Redis Cluster", () => {
  it.live("the store's slot function agrees with CLUSTER KEYSLOT", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const samples = [
        "leasehold:{tok}:lock",
        "leasehold:{tok}:signal",
        "leasehold:mailbox:inst-1",
        "plain",
        "{}:empty-tag",
        "{a}{b}",
        "x{}{y}",
        "{user1000}.following",
        "ünïcödé:{τόκεν}",
        "a".repeat(300)
      ]
      for (const key of samples) {
        const expected = yield* Effect.orDie(cluster.nodes[0]!.command("CLUSTER", "KEYSLOT", key))
        assert.strictEqual(keySlot(key), expected, key)
      }
    })
  )

  it.live("each token's keys live on one master, and the tokens spread over every master", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const keyPrefix = `cl${++testCount}`
      const keys = makeKeys(keyPrefix)
      const store = yield* buildStore(cluster, keyPrefix)
      for (const token of tokens(30)) {
        const acquired = yield* store.tryAcquire(token, `lock-${token}`, ["a"])
        assert.strictEqual(acquired._tag, "Acquired")
        yield* store.commitAndRelease(token, `lock-${token}`, [["a", token]])
        // a worker takes the lock by the queue's steps, and another queues behind it
        yield* store.acquireQueued(token, "inst-a:1", [], { instanceId: "inst-a" })
        yield* store.acquireQueued(token, "inst-b:1", [], { instanceId: "inst-b" })
        const ports = yield* portsOf(cluster, [
          keys.lock(token),
          keys.fence(token),
          keys.slice(token, "a"),
          keys.queue(token),
          keys.queueDeadlines(token)
        ])
        assert.strictEqual(new Set(ports).size, 1, `the keys of ${token} on ${ports.join(", ")}`)
        deepStrictEqual(yield* store.readSlices(token, ["a"]), [Option.some(token)])
      }
      const perNode = yield* Effect.forEach(cluster.nodes, (node) =>
        Effect.map(
          Effect.orDie(node.command("SCAN", "0", "MATCH", `${keyPrefix}:*`, "COUNT", 10_000)),
          (reply) => (reply as [string, ReadonlyArray<string>])[1].length
        )
      )
      assert.isTrue(
        perNode.every((n) => n > 0),
        `keys per master: ${perNode.join(", ")}`
      )
    })
  )

  it.live("signals use sharded pub/sub on the token's master", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const keyPrefix = `cl${++testCount}`
      const keys = makeKeys(keyPrefix)
      const store = yield* buildStore(cluster, keyPrefix)
      const signals = yield* store.subscribe("tok")
      const channel = keys.signal("tok")
      const owner = yield* Effect.orDie(cluster.nodeFor(channel))
      assert.strictEqual(yield* shardSubscribers(cluster, channel), 1)
      for (const node of cluster.nodes) {
        const [, plain] = (yield* Effect.orDie(node.command("PUBSUB", "NUMSUB", channel))) as [string, number]
        assert.strictEqual(plain, 0, `plain subscribers on ${node.port}`)
      }
      yield* store.tryAcquire("tok", "lock-1", [])
      yield* store.release("tok", "lock-1")
      const received = yield* collectFirst(signals, 1)
      const [first] = yield* joinWithin("the released signal", 5_000, received)
      deepStrictEqual(first, { _tag: "Released", lockId: "lock-1" })
      const stats = yield* Effect.orDie(owner.info("commandstats"))
      assert.isTrue(Number(/calls=(\d+)/.exec(stats.cmdstat_ssubscribe ?? "")?.[1] ?? 0) >= 1)
    })
  )

  it.live("a subscriber connection cut on one master fails only what it carried", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const keyPrefix = `cl${++testCount}`
      const keys = makeKeys(keyPrefix)
      const store = yield* buildStore(cluster, keyPrefix)
      // two tokens whose channels live on different masters
      const byNode = new Map<number, string>()
      for (const token of tokens(40)) {
        const node = yield* Effect.orDie(cluster.nodeFor(keys.signal(token)))
        if (!byNode.has(node.port)) byNode.set(node.port, token)
      }
      const [[cutPort, cutToken], [, keptToken]] = [...byNode.entries()] as [[number, string], [number, string]]
      const cut = yield* collectFirst(yield* store.subscribe(cutToken), 1)
      const kept = yield* collectFirst(yield* store.subscribe(keptToken), 1)
      const events = yield* collectFirst(yield* store.socketEvents, 1)
      const node = cluster.nodes.find((candidate) => candidate.port === cutPort)!
      assert.isTrue((yield* Effect.orDie(node.clientKill("pubsub"))) >= 1)
      const failed = yield* Fiber.await(cut)
      assert.isTrue(Exit.isFailure(failed))
      assert.isTrue(Exit.isFailure(yield* Fiber.await(events)), "the socket-event stream spans every master")
      yield* store.tryAcquire(keptToken, "lock-1", [])
      yield* store.release(keptToken, "lock-1")
      deepStrictEqual(yield* joinWithin("the kept subscription's signal", 5_000, kept), [
        { _tag: "Released", lockId: "lock-1" }
      ])
      // the cut master's subscriber reconnects, and a new subscription there works
      const again = yield* succeedsReal("a new subscription on the cut master", store.subscribe(cutToken), {
        within: 5_000
      })
      const next = yield* collectFirst(again, 1)
      yield* store.tryAcquire(cutToken, "lock-2", [])
      yield* store.release(cutToken, "lock-2")
      deepStrictEqual(yield* joinWithin("the new subscription's signal", 5_000, next), [
        { _tag: "Released", lockId: "lock-2" }
      ])
    })
  )

  it.live("scanSockets and socketEvents cover every master", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const keyPrefix = `cl${++testCount}`
      const keys = makeKeys(keyPrefix)
      const store = yield* buildStore(cluster, keyPrefix)
      const setting = yield* store.enableSocketEvents
      assert.strictEqual(setting._tag, "Enabled")
      for (const node of cluster.nodes) {
        const flags = yield* flagsOf(node)
        for (const flag of ["K", "g", "$", "x", "e"]) assert.include(flags, flag, `${flag} on ${node.port}`)
      }
      const events = yield* store.socketEvents
      const all = tokens(24)
      const heard = yield* collectFirst(events, all.length)
      const claims = yield* store.claimSockets(
        all.map((token) => [token, { instanceId: "inst-a", connectionId: token }])
      )
      assert.isTrue(claims.every((claim) => claim._tag === "Success" && claim.success._tag === "Claimed"))
      const ports = new Set(yield* portsOf(cluster, all.map(keys.socket)))
      assert.strictEqual(ports.size, cluster.nodes.length, "the records are on every master")
      const seen = yield* joinWithin("an event of every record", 10_000, heard)
      deepStrictEqual(new Set(seen.map((event) => event.token)), new Set(all))
      const scanned = yield* Stream.runCollect(store.scanSockets)
      deepStrictEqual(new Set(scanned.map(([token]) => token)), new Set(all))
    })
  )

  it.live("a blocking mailbox read waits on the mailbox's master and returns on an append", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const keyPrefix = `cl${++testCount}`
      const keys = makeKeys(keyPrefix)
      const store = yield* buildStore(cluster, keyPrefix)
      for (const instance of ["inst-a", "inst-b", "inst-c", "inst-d"]) {
        const owner = yield* Effect.orDie(cluster.nodeFor(keys.mailbox(instance)))
        const reader = yield* Effect.forkChild(store.mailboxRead(instance, "0-0", { count: 10, blockMs: 5_000 }))
        yield* untilReal(
          `${instance}'s read blocked on its master`,
          Effect.map(Effect.orDie(owner.info("clients")), (info) => Number(info.blocked_clients) === 1),
          { within: 5_000 }
        )
        const id = yield* store.mailboxAppend(instance, "hello", { maxLen: 100, ttlMs: 60_000 })
        deepStrictEqual(yield* joinWithin("the blocked read", 5_000, reader), [{ id, payload: "hello" }])
      }
    })
  )

  it.live(
    "a cluster that is down answers StoreUnavailable, on every master, and works again once it recovers",
    () =>
      Effect.gen(function* () {
        const cluster = yield* sharedCluster
        const keyPrefix = `cl${++testCount}`
        const keys = makeKeys(keyPrefix)
        const store = yield* buildStore(cluster, keyPrefix)
        const victim = yield* Effect.orDie(cluster.nodeFor(keys.lock("tok-0")))
        const survivor = cluster.nodes.find((node) => node !== victim)!
        let survivorToken = "tok-0"
        for (const token of tokens(40)) {
          const node = yield* Effect.orDie(cluster.nodeFor(keys.lock(token)))
          if (node === survivor) {
            survivorToken = token
            break
          }
        }
        yield* Effect.addFinalizer(() => cluster.restart)
        yield* victim.kill
        // A master the others cannot reach for the node timeout fails the whole cluster.
        yield* untilReal(
          "the survivors to see the cluster down",
          Effect.map(Effect.orDie(survivor.command("CLUSTER", "INFO")), (info) =>
            String(info).includes("cluster_state:fail")
          ),
          { within: 20_000 }
        )
        const onVictim = yield* failsWith(store.tryAcquire("tok-0", "lock-1", []), "StoreUnavailable")
        assert.include(onVictim.message, "tryAcquire")
        // CLUSTERDOWN from the survivor, or a closed connection when the client's retry
        // picked the dead node: unavailable either way, never refused.
        const down = yield* failsWith(store.tryAcquire(survivorToken, "lock-1", []), "StoreUnavailable")
        assert.include(down.message, "tryAcquire")
        yield* cluster.restart
        const acquired = yield* succeedsReal("a grant after the recovery", store.tryAcquire("tok-0", "lock-2", []), {
          within: 20_000
        })
        assert.strictEqual(acquired._tag, "Acquired")
      }),
    90_000
  )
})

describe("RedisStore cluster errors", () => {
  const endpoint = parseEndpoint("redis://:s3cret-pw@127.0.0.1:7000")!
  const reply = (message: string) => Object.assign(new Error(message), { name: "ReplyError" })

  it("CLUSTERDOWN, TRYAGAIN, MOVED and ASK replies are StoreUnavailable, other error replies StoreRefused", () => {
    for (const message of [
      "CLUSTERDOWN The cluster is down",
      "TRYAGAIN Multiple keys request during rehashing of slot",
      "MOVED 3999 127.0.0.1:7001",
      "ASK 3999 127.0.0.1:7001"
    ]) {
      assert.strictEqual(toStoreError(endpoint, "op")(reply(message))._tag, "StoreUnavailable", message)
    }
    assert.strictEqual(toStoreError(endpoint, "op")(reply("ERR unknown command"))._tag, "StoreRefused")
  })

  it("a redirection storm is StoreUnavailable naming the last reply", () => {
    const error = toStoreError(
      endpoint,
      "op"
    )(new Error("Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down"))
    assert.strictEqual(error._tag, "StoreUnavailable")
    assert.include(error.message, "CLUSTERDOWN")
    assert.notInclude(error.message, "s3cret-pw")
  })
})

describe("RedisStore cluster configuration", () => {
  const fromEnv = (env: Record<string, string>) =>
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))

  it.live("LEASEHOLD_REDIS_CLUSTER makes the URL a list of seed nodes", () =>
    Effect.gen(function* () {
      const cluster = yield* sharedCluster
      const store = yield* Layer.build(
        RedisStore.layerFromSettings.pipe(Layer.provide(LeaseholdConfig.layerFromEnv))
      ).pipe(
        fromEnv({
          LEASEHOLD_REDIS_URL: cluster.url,
          LEASEHOLD_REDIS_CLUSTER: "true",
          LEASEHOLD_KEY_PREFIX: `cl${++testCount}`
        }),
        Effect.orDie,
        Effect.map((context) => Context.get(context, Store))
      )
      // a token on every master works: the client follows the slot table
      for (const token of tokens(12)) yield* store.claimSocket(token, { instanceId: "inst-a", connectionId: "c" })
      assert.strictEqual((yield* Stream.runCollect(store.scanSockets)).length, 12)
    })
  )

  it.effect("a seed list with a database other than 0 is refused without echoing the URL", () =>
    Effect.gen(function* () {
      const error = yield* failsWith(
        Layer.build(
          RedisStore.layer({ url: "redis://:s3cret-pw@127.0.0.1:1,127.0.0.1:2/3", cluster: true }).pipe(
            Layer.provide(LeaseholdConfig.layer({}))
          )
        ).pipe(Effect.scoped),
        "InvalidConfig"
      )
      assert.notInclude(error.message, "s3cret-pw")
      assert.include(error.message, "url = <redacted>")
    })
  )

  it.live("an unreachable cluster fails with StoreUnavailable, and its password appears nowhere", () =>
    Effect.gen(function* () {
      const ports = [yield* Effect.promise(RedisServer.freePort), yield* Effect.promise(RedisServer.freePort)]
      const error = yield* failsWith(
        Layer.build(
          RedisStore.layer({
            url: `redis://user:s3cret-pw@127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}`,
            cluster: true
          }).pipe(Layer.provide(LeaseholdConfig.layer({ connectTimeout: 500, commandTimeout: 500 })))
        ).pipe(Effect.scoped),
        "StoreUnavailable"
      )
      assert.notInclude(JSON.stringify(error), "s3cret-pw")
      assert.notInclude(error.message, "s3cret-pw")
      assert.include(error.message, `127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}`)
    })
  )
})

describe("RedisStore when a master leaves the cluster", () => {
  it.live(
    "its slots move to another master: signals follow them, keys stay readable, and the store is ready again",
    () =>
      Effect.gen(function* () {
        const cluster = yield* RedisCluster.start()
        const keyPrefix = `cl${++testCount}`
        const keys = makeKeys(keyPrefix)
        const store = yield* buildStore(cluster, keyPrefix)
        const [into, leaving] = [cluster.nodes[0]!, cluster.nodes[2]!]
        let token = ""
        for (const candidate of tokens(40)) {
          const node = yield* Effect.orDie(cluster.nodeFor(keys.signal(candidate)))
          if (node.port === leaving.port) {
            token = candidate
            break
          }
        }
        yield* store.tryAcquire(token, "lock-1", ["a"])
        yield* store.commitAndRelease(token, "lock-1", [["a", "kept"]])
        yield* store.enableSocketEvents
        const watch = yield* Effect.forkChild(Stream.runDrain(yield* store.socketEvents))
        const before = yield* Effect.forkChild(Stream.runDrain(yield* store.subscribe(token)))
        const epoch = (yield* store.status).epoch

        // The slots move; the emptied master still runs. What publishes to the token now
        // goes to its new master: the old subscription fails, so that its owner subscribes again.
        yield* cluster.moveSlots(leaving, into)
        const lost = yield* within("the old subscription to fail", 15_000, Effect.flip(Fiber.join(before)))
        assert.strictEqual(lost._tag, "StoreUnavailable")
        const moved = yield* succeedsReal("subscribing on the new master", store.subscribe(token), { within: 15_000 })
        const first = yield* collectFirst(moved, 1)
        yield* store.tryAcquire(token, "lock-moved", [])
        yield* store.release(token, "lock-moved")
        deepStrictEqual(yield* joinWithin("a signal after the move", 5_000, first), [
          { _tag: "Released", lockId: "lock-moved" }
        ])

        // then the master leaves the cluster and stops
        yield* cluster.removeMaster(leaving, into)
        const watchLost = yield* within("the socket watch to fail", 15_000, Effect.flip(Fiber.join(watch)))
        assert.strictEqual(watchLost._tag, "StoreUnavailable")
        yield* untilReal(
          "the store ready, in a new epoch",
          Effect.map(store.status, (status) => status.ready && status.epoch > epoch),
          { within: 15_000 }
        )
        // a new subscription lives on the token's new master and hears what is published
        const signals = yield* succeedsReal("subscribing again", store.subscribe(token), { within: 15_000 })
        const received = yield* collectFirst(signals, 1)
        assert.strictEqual(yield* shardSubscribers(cluster, keys.signal(token)), 1)
        yield* store.tryAcquire(token, "lock-2", [])
        yield* store.release(token, "lock-2")
        deepStrictEqual(yield* joinWithin("the released signal", 5_000, received), [
          { _tag: "Released", lockId: "lock-2" }
        ])
        deepStrictEqual(yield* store.readSlices(token, ["a"]), [Option.some("kept")])
        // the socket watch covers the two masters left
        yield* succeedsReal("watching socket records again", store.socketEvents, { within: 15_000 })
      }),
    120_000
  )
})
