/**
 * The store conformance suite on a 3-master Redis Cluster, and what only a cluster has:
 * keys spread over the masters, sharded signals, scans and keyspace notifications on
 * every master, and a cluster that is down.
 *
 * One cluster serves the whole file (starting one takes seconds); each test has its own
 * key prefix, so the keys, channels and mailboxes of one test are its own.
 */
import { afterAll, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import { makeKeys } from "../src/internal/keys.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import { Store } from "../src/Store.js"
import type { Backend, Fixture } from "./conformance/backend.js"
import { eventuallyTrue } from "./conformance/helpers.js"
import { storeSuite } from "./conformance/storeSuite.js"
import * as RedisCluster from "./support/RedisCluster.js"
import type * as RedisServer from "./support/RedisServer.js"

const LOCK_EXPIRATION_MS = 300
const COMMAND_TIMEOUT_MS = 1_000

// --- one cluster for the file ---------------------------------------------------------

const clusterScope = Effect.runSync(Scope.make())
let started: Promise<RedisCluster.RedisCluster> | undefined

/** The file's cluster, started by the first test that needs it; ready (`cluster_state:ok`) on return. */
export const sharedCluster: Effect.Effect<RedisCluster.RedisCluster> = Effect.promise(() => {
  started ??= Effect.runPromise(Scope.extend(RedisCluster.start(), clusterScope))
  return started
}).pipe(Effect.tap((cluster) => cluster.awaitOk))

afterAll(() => Effect.runPromise(Scope.close(clusterScope, Exit.void)), 60_000)

// --- the fixture ----------------------------------------------------------------------

/** Commands that do not touch data: the harness's own, and the cluster client's topology reads. */
const uncounted = (name: string) =>
  name === "cmdstat_ping" || name === "cmdstat_info" || name.startsWith("cmdstat_cluster") || name === "cmdstat_scan"

const commandsProcessed = (cluster: RedisCluster.RedisCluster) =>
  Effect.forEach(cluster.nodes, (node) => node.info("commandstats")).pipe(
    Effect.map((all) => {
      let total = 0
      for (const stats of all) {
        for (const [name, value] of Object.entries(stats)) {
          if (!name.startsWith("cmdstat_") || uncounted(name)) continue
          total += Number(/(?:^|,)calls=(\d+)/.exec(value)?.[1] ?? 0)
        }
      }
      return total
    }),
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
  LeaseholdConfig.layerWith({
    keyPrefix,
    lockExpiration: LOCK_EXPIRATION_MS,
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
    it.scopedLive(
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
            commandTimeoutMs: COMMAND_TIMEOUT_MS,
            exactTime: false,
            advance: (ms) => Effect.sleep(ms),
            settle: Effect.sleep(100),
            awaitBlockedRead: eventuallyTrue(
              "a blocked client on a node",
              5_000,
              Effect.map(blockedClients(cluster), (n) => n > 0)
            ),
            putRaw: (key, value) => putRaw(cluster, "SET", key, value),
            putRawExpiring: (key, value, ttlMs) => putRaw(cluster, "SET", key, value, "PX", ttlMs),
            keyCount: keysUnder(cluster, keyPrefix),
            commandsProcessed: Option.some(commandsProcessed(cluster)),
            channelSubscribers: Option.some((channel) => shardSubscribers(cluster, channel)),
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
