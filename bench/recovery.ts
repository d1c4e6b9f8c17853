/**
 * How soon signals flow again after Redis returns from an outage.
 *
 * For each outage length, one worker (RedisStore + Signals, production retry settings:
 * 1 s doubling to 30 s, jitter on) listens on a token; the server is stopped for the
 * outage, then started again on the same port, and a separate client publishes a
 * `granted` notice about the token on the worker's notice channel every 5 ms. `resume_ms`
 * is the time from the server accepting connections again to the first notice the worker
 * delivers.
 *
 *   npm run bench:recovery -- --json            one JSON array of {"outage_s", "resume_ms"}
 *   npm run bench:recovery -- --outages 2,5     other outage lengths (seconds)
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as References from "effect/References"
import * as Stream from "effect/Stream"
import { Redis } from "ioredis"
import * as Health from "../src/Health.js"
import * as InstanceId from "../src/InstanceId.js"
import { makeKeys } from "../src/internal/keys.js"
import * as Signals from "../src/internal/signals.js"
import * as Supervisor from "../src/internal/supervisor.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import * as RedisServer from "../test/support/RedisServer.js"
import { flag, json } from "./args.js"

const outages = (flag("outages") ?? "5,20,60").split(",").map(Number)

/** The worker's id, fixed: the publisher writes on that worker's notice channel. */
const WORKER_ID = "bench-worker"

const measure = (outageS: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const worker = Signals.layer.pipe(
        Layer.provideMerge(Supervisor.layer),
        Layer.provideMerge(
          Layer.mergeAll(RedisStore.layer({ url: server.url }), Health.layer, InstanceId.layerFixed(WORKER_ID))
        ),
        Layer.provideMerge(LeaseholdConfig.layer({ retryJitter: true }))
      )
      const context = yield* Layer.build(worker)
      const signals = Context.get(context, Signals.Signals)
      const stream = yield* signals.subscribe("bench")
      let firstSignalAt: number | undefined
      yield* stream.pipe(
        Stream.runForEach((event) =>
          event._tag === "Granted" && firstSignalAt === undefined
            ? Effect.map(Clock.currentTimeMillis, (now) => {
                firstSignalAt = now
              })
            : Effect.void
        ),
        Effect.forkScoped
      )
      yield* server.stop
      yield* Effect.sleep(`${outageS} seconds`)
      firstSignalAt = undefined
      yield* server.restart
      const backAt = yield* Clock.currentTimeMillis
      const publisher = new Redis(server.port, "127.0.0.1", { maxRetriesPerRequest: 1 })
      publisher.on("error", () => undefined)
      yield* Effect.addFinalizer(() => Effect.sync(() => publisher.disconnect()))
      // the wire form of the notice the store publishes when it hands the lock to the worker
      const channel = makeKeys("leasehold").workerNotices(WORKER_ID)
      while (firstSignalAt === undefined) {
        yield* Effect.promise(() => publisher.publish(channel, "granted:bench").catch(() => 0))
        yield* Effect.sleep(5)
        if ((yield* Clock.currentTimeMillis) - backAt > 120_000) break
      }
      return { outage_s: outageS, resume_ms: firstSignalAt === undefined ? null : firstSignalAt - backAt }
    })
  )

const program = Effect.gen(function* () {
  const rows = []
  for (const outage of outages) {
    const row = yield* measure(outage)
    rows.push(row)
    if (!json)
      console.log(`outage ${String(row.outage_s).padStart(3)} s  ->  first notice ${row.resume_ms} ms after restart`)
  }
  if (json) console.log(JSON.stringify(rows))
})

// runMain keeps the process alive while the program awaits sockets and child processes.
NodeRuntime.runMain(program.pipe(Effect.provideService(References.MinimumLogLevel, "None")))
