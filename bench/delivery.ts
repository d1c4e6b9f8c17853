/**
 * Cross-worker delivery: how fast an update reaches the worker holding the socket, and
 * what happens to updates sent while Redis is down.
 *
 * Two workers (each a full `Worker.layer` with its own Redis connections, production
 * retry settings: 1 s doubling to 30 s, jitter on) on one redis-server started for the
 * run. Worker A holds the socket of one token; worker B sends it updates.
 *
 * - Latency: B sends `--count` updates one after another; each carries the time it was
 *   sent, and A records the time it was delivered. p50 / p99 of the difference.
 * - Outages: B sends an update every 50 ms; the server is stopped for the outage (its data
 *   is lost: there is no persistence) and started again on the same port; B keeps sending
 *   for 3 s more. `resume_ms` is the time from the restart to the first update delivered
 *   after it; `sent` counts the updates B sent from the stop on, `delivered` those of them
 *   that reached A (each counted once; `duplicates` counts any delivered twice).
 *
 *   npm run bench:delivery -- --json             one JSON object
 *   npm run bench:delivery -- --outages 2,5      other outage lengths (seconds)
 *
 * Output: {"p50_ms", "p99_ms", "outages": [{"outage_s", "resume_ms", "sent", "delivered", "duplicates"}]}
 */
import { performance } from "node:perf_hooks"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as Untyped from "../src/internal/mailbox/untyped.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as Mailbox from "../src/Mailbox.js"
import * as RedisStore from "../src/RedisStore.js"
import * as TokenManager from "../src/TokenManager.js"
import * as Worker from "../src/Worker.js"
import * as RedisServer from "../test/support/RedisServer.js"
import { flag, json, percentile } from "./args.js"

const count = Number(flag("count") ?? "2000")
const outages = (flag("outages") ?? "5,20,60").split(",").map(Number)

const Probe = Schema.Struct({ seq: Schema.Number, sentAt: Schema.Number })
type Probe = typeof Probe.Type

const round = (ms: number) => Math.round(ms * 1000) / 1000

/** Two workers, A receiving into `onDeliver`, on the server at `url`. */
const workers = (url: string, onDeliver: (probe: Probe) => void) =>
  Effect.gen(function* () {
    const config = LeaseholdConfig.layer({ retryJitter: true })
    const worker = (deliver: (probe: Probe) => void) =>
      Layer.build(
        Worker.layer({ schema: Probe, deliver: (_token, probe) => Effect.sync(() => deliver(probe)) }).pipe(
          Layer.provide(RedisStore.layer({ url })),
          Layer.provide(config)
        )
      )
    const a = yield* worker(onDeliver)
    const b = yield* worker(() => undefined)
    const linked = yield* Context.get(a, TokenManager.TokenManager).link("bench", "socket-1")
    return { a, b, token: linked.token, sender: Untyped.sender(Context.get(b, Mailbox.Mailbox)) }
  })

const latency = Effect.scoped(
  Effect.gen(function* () {
    const server = yield* RedisServer.start()
    const waiting = new Map<number, (ms: number) => void>()
    const { sender, token } = yield* workers(server.url, (probe) => {
      waiting.get(probe.seq)?.(performance.now() - probe.sentAt)
      waiting.delete(probe.seq)
    })
    const samples: Array<number> = []
    for (let seq = 0; seq < count + 100; seq++) {
      const arrived = new Promise<number>((resolve) => waiting.set(seq, resolve))
      yield* sender.send(token, { seq, sentAt: performance.now() })
      const ms = yield* Effect.promise(() => arrived)
      // The first hundred warm the connections and the JIT.
      if (seq >= 100) samples.push(ms)
    }
    samples.sort((x, y) => x - y)
    return { p50_ms: round(percentile(samples, 50)), p99_ms: round(percentile(samples, 99)) }
  })
)

const outage = (outageS: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const seen = new Map<number, number>()
      let restartedAt: number | undefined
      let firstAfterRestart: number | undefined
      const { sender, token } = yield* workers(server.url, (probe) => {
        seen.set(probe.seq, (seen.get(probe.seq) ?? 0) + 1)
        if (restartedAt !== undefined && firstAfterRestart === undefined) firstAfterRestart = performance.now()
      })
      let seq = 0
      let sending = true
      let firstCounted: number | undefined
      const sendLoop = Effect.gen(function* () {
        while (sending) {
          yield* sender.send(token, { seq, sentAt: performance.now() }).pipe(Effect.ignore)
          seq++
          yield* Effect.sleep(50)
        }
      })
      yield* Effect.forkScoped(sendLoop)
      yield* Effect.sleep("1 second")
      firstCounted = seq
      yield* server.stop
      yield* Effect.sleep(`${outageS} seconds`)
      yield* server.restart
      restartedAt = performance.now()
      yield* Effect.sleep("3 seconds")
      sending = false
      const lastSent = seq
      // Let everything in flight arrive (the outbox drains, A reads).
      const deadline = performance.now() + 30_000
      while (performance.now() < deadline) {
        let missing = 0
        for (let s = firstCounted; s < lastSent; s++) if (!seen.has(s)) missing++
        if (missing === 0) break
        yield* Effect.sleep(100)
      }
      let delivered = 0
      let duplicates = 0
      for (let s = firstCounted; s < lastSent; s++) {
        const times = seen.get(s) ?? 0
        if (times > 0) delivered++
        if (times > 1) duplicates += times - 1
      }
      return {
        outage_s: outageS,
        resume_ms: Option.getOrNull(
          Option.map(Option.fromNullishOr(firstAfterRestart), (at) => Math.round(at - restartedAt!))
        ),
        sent: lastSent - firstCounted,
        delivered,
        duplicates
      }
    })
  )

const program = Effect.gen(function* () {
  const { p50_ms, p99_ms } = yield* latency
  if (!json) console.log(`cross-worker delivery: p50 ${p50_ms} ms, p99 ${p99_ms} ms (${count} updates)`)
  const rows = []
  for (const seconds of outages) {
    const row = yield* outage(seconds)
    rows.push(row)
    if (!json)
      console.log(
        `outage ${String(seconds).padStart(3)} s: first delivery ${row.resume_ms} ms after restart, ` +
          `${row.delivered}/${row.sent} delivered, ${row.duplicates} duplicates`
      )
  }
  if (json) console.log(JSON.stringify({ p50_ms, p99_ms, outages: rows }))
})

// runMain keeps the process alive while the program awaits sockets and child processes.
NodeRuntime.runMain(program.pipe(Effect.provideService(References.MinimumLogLevel, "None")))
