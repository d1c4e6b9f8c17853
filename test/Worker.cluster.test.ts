/**
 * The state manager's behaviour suite and the delivery suite (the end-to-end routing of
 * updates to the worker holding the socket) on a 3-master Redis Cluster. In both, each
 * worker has its own RedisStore, with its own connections, as separate processes would;
 * one cluster serves the whole file and each test has its own key prefix.
 *
 * The fault cases of `Mailbox.redis.test.ts` and `Signals.test.ts` (a killed or paused
 * single server, a proxy cut) are not repeated here: `Store.cluster.test.ts` covers a
 * killed and a paused cluster at the store level.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import type * as Inspect from "../src/Inspect.js"
import type * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import { type DeliveryBackend, deliverySuite } from "./delivery/suite.js"
import { redisWorkers, update } from "./delivery/workers.js"
import { type StateBackend, stateSuite } from "./state/suite.js"
import { Counter, redisClusterWorkers } from "./state/workers.js"
import { leasehold } from "./support/cli.js"
import * as Logs from "./support/logs.js"
import * as Monitor from "./support/monitor.js"
import { untilReal } from "./support/poll.js"
import * as RedisCluster from "./support/RedisCluster.js"
import * as RedisServer from "./support/RedisServer.js"

const clusters = RedisCluster.shared()
afterAll(clusters.close, 60_000)

let testCount = 0

/** Workers on the shared cluster, each with a RedisStore of its own. */
const workersOn = (cluster: RedisCluster.RedisCluster, input: LeaseholdConfig.Input) =>
  redisClusterWorkers(
    cluster.url,
    (key) => Effect.flatMap(Effect.orDie(cluster.nodeFor(key)), (node) => RedisServer.getRaw(node, key)),
    (key) => Effect.orDie(cluster.nodeFor(key)),
    input
  )

const state: StateBackend = {
  name: "redis-cluster",
  test: (name, input, body) =>
    it.live(
      name,
      () =>
        Effect.gen(function* () {
          const cluster = yield* clusters.get
          const workers = yield* workersOn(cluster, {
            commandTimeout: 1_000,
            keyPrefix: `state${++testCount}`,
            ...input
          })
          yield* body(workers, {
            advance: (ms) => Effect.sleep(ms),
            quiet: (token) => Effect.flatMap(Effect.orDie(cluster.nodeFor(workers.keys.lock(token))), Monitor.quiet),
            until: (label, check) => untilReal(label, check, { within: 10_000 })
          }).pipe(Effect.provide(Logs.into(workers.logs)))
        }),
      60_000
    )
}

stateSuite(state)

const delivery: DeliveryBackend = {
  name: "redis-cluster",
  test: (name, body) =>
    it.live(
      name,
      () =>
        Effect.gen(function* () {
          const cluster = yield* clusters.get
          const fx = yield* redisWorkers(cluster.url, { redisCluster: true, keyPrefix: `delivery${++testCount}` })
          yield* body(fx, {
            until: (label, check) => untilReal(label, check, { within: 10_000 })
          })
        }),
      60_000
    )
}

deliverySuite(delivery)

describe("a modification in one step on a Redis Cluster", () => {
  it.live(
    "on the values of the worker's last grant; refused once another worker's store moved them on, decided again",
    () =>
      Effect.gen(function* () {
        const cluster = yield* clusters.get
        const input = { commandTimeout: 1_000, keyPrefix: `step${++testCount}` }
        const workers = yield* workersOn(cluster, input)
        const a = yield* workers.worker()
        const b = yield* workers.worker()
        const seen: Array<number> = []
        const add = (s: { readonly n: number }) => {
          seen.push(s.n)
          return [s.n, { n: s.n + 1 }] as const
        }
        yield* a.states.modify("t", Counter, add)
        yield* a.states.modify("t", Counter, add)
        yield* b.states.modify("t", Counter, add)
        seen.length = 0
        assert.strictEqual(yield* a.states.modify("t", Counter, add), 3)
        // on what a's last grant left (2), refused; then on what b wrote (3)
        deepStrictEqual(seen, [2, 3])
        for (let run = 0; run < 6; run++) {
          const w = run % 2 === 0 ? a : b
          for (let i = 0; i < 5; i++) yield* w.states.modify("t", Counter, (s) => [null, { n: s.n + 1 }])
        }
        assert.strictEqual(yield* workers.stored("t"), 34)
      }),
    60_000
  )
})

describe("inspect on a Redis Cluster", () => {
  it.live(
    "reports a token from its master and an instance's mailbox from its own",
    () =>
      Effect.gen(function* () {
        const cluster = yield* clusters.get
        const keyPrefix = `inspect${++testCount}`
        const fx = yield* redisWorkers(cluster.url, { redisCluster: true, keyPrefix })
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* a.tokens.link("tab-1", "sid-1")
        yield* a.states.modify("tab-1", Counter, (s) => [null, { n: s.n + 1 }])
        for (let i = 1; i <= 2; i++) yield* b.mailbox.send("tab-1", update(i))
        yield* untilReal(
          "A receives both updates",
          Effect.sync(() => a.received.length === 2),
          { within: 10_000 }
        )

        const token = yield* leasehold([
          "inspect",
          "token",
          "tab-1",
          "--url",
          cluster.url,
          "--cluster",
          "--prefix",
          keyPrefix,
          "--json"
        ])
        assert.strictEqual(token.code, 0, token.stderr)
        const parsed = JSON.parse(token.stdout) as ReturnType<typeof Inspect.tokenJson>
        assert.isNull(parsed.lock)
        deepStrictEqual(
          parsed.slices.map((slice) => [slice.name, slice.bytes]),
          [["counter", JSON.stringify({ n: 1 }).length]]
        )
        assert.deepInclude(parsed.socket ?? {}, { instance_id: a.id, connection_id: "sid-1" })

        const instance = yield* leasehold(["inspect", "instance", a.id, "--json"], {
          LEASEHOLD_REDIS_URL: cluster.url,
          LEASEHOLD_REDIS_CLUSTER: "true",
          LEASEHOLD_KEY_PREFIX: keyPrefix
        })
        assert.strictEqual(instance.code, 0, instance.stderr)
        const mailbox = JSON.parse(instance.stdout) as ReturnType<typeof Inspect.instanceJson>
        assert.strictEqual(mailbox.mailbox_length, 2)
      }),
    90_000
  )
})
