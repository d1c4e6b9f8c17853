/**
 * A hostile or unusual Redis: scripts flushed, no memory left, commands renamed away, a
 * restart that lost every key, a password and TLS. Each case runs real workers against a
 * real redis-server started for it.
 */
import * as net from "node:net"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Inspect from "../src/Inspect.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as RedisStore from "../src/RedisStore.js"
import * as StateManager from "../src/StateManager.js"
import { Store } from "../src/Store.js"
import { within } from "./conformance/helpers.js"
import { type DeliveryWorker, redisWorkers, update } from "./delivery/workers.js"
import { capture, type LogLine } from "./support/logs.js"
import { untilReal } from "./support/poll.js"
import * as RedisServer from "./support/RedisServer.js"
import { redisHasTls, selfSignedCertificate } from "./support/tls.js"

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
const Other = StateManager.slice("other", Schema.Struct({ n: Schema.Number }), { n: 0 })
const bump = (s: { readonly n: number }) => [s.n, { n: s.n + 1 }] as const

const raw = (server: RedisServer.RedisServer, key: string) =>
  Effect.map(Effect.orDie(server.command("GET", key)), (reply) =>
    typeof reply === "string" ? Option.some(reply) : Option.none()
  )

const sliceKey = (prefix: string, token: string, name: string) => `${prefix}:{${token}}:s:${name}`

/** One INFO field of `commandstats` or `errorstats`, e.g. `calls` of `cmdstat_eval`. */
const stat = (server: RedisServer.RedisServer, section: string, name: string, field: string) =>
  Effect.map(Effect.orDie(server.info(section)), (info) =>
    Number(new RegExp(`(?:^|,)${field}=(\\d+)`).exec(info[name] ?? "")?.[1] ?? 0)
  )

/** Link a socket, send it an update from the other worker and wait for it. */
const roundTrip = (from: DeliveryWorker, to: DeliveryWorker, token: string, n: number) =>
  Effect.gen(function* () {
    const linked = yield* to.tokens.link(token, `conn-${token}`)
    assert.strictEqual(linked.token, token)
    assert.strictEqual(yield* from.mailbox.send(token, update(n)), "sent")
    yield* untilReal(
      `update ${n} delivered`,
      Effect.sync(() => to.received.some(([t, value]) => t === token && value.n === n)),
      { within: 10_000 }
    )
  })

/** Every kind of operation a worker does, once; returns nothing, fails on any error. */
const everyOperation = (a: DeliveryWorker, b: DeliveryWorker, store: Store.Service, round: number) =>
  Effect.gen(function* () {
    const token = `ops-${round}`
    assert.strictEqual(yield* a.states.modify(token, Counter, bump), 0)
    assert.strictEqual(yield* b.states.modify(token, Counter, bump), 1)
    yield* a.states.modifyAll(token, { Counter, Other }, (v) =>
      Effect.succeed([null, { Counter: { n: v.Counter.n + 1 }, Other: { n: 7 } }] as const)
    )
    deepStrictEqual(yield* b.states.get(token, Counter), { n: 3 })
    // contention between the two workers: every modification counted once
    yield* Effect.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? a : b).states.modify(`${token}-hot`, Counter, bump)),
      { concurrency: "unbounded" }
    )
    deepStrictEqual(yield* a.states.get(`${token}-hot`, Counter), { n: 10 })
    yield* roundTrip(b, a, `tab-${round}`, round)
    deepStrictEqual(
      yield* b.tokens.owner(`tab-${round}`, { refresh: true }),
      Option.some({ instanceId: a.id, connectionId: `conn-tab-${round}` })
    )
    yield* a.tokens.disconnect(`tab-${round}`, `conn-tab-${round}`)
    deepStrictEqual(yield* b.tokens.owner(`tab-${round}`, { refresh: true }), Option.none())
    // the store's own operations, each once
    const lock = `lock-${round}`
    const acquired = yield* store.tryAcquire(`raw-${round}`, lock, ["a"])
    assert.strictEqual(acquired._tag, "Acquired")
    assert.isTrue(yield* store.extend(`raw-${round}`, lock))
    yield* store.writeIfHolder(`raw-${round}`, lock, [["a", "1"]])
    // another worker queues behind the holder, is counted, and leaves
    const queued = yield* store.acquireQueued(`raw-${round}`, "inst-y:1", [], { instanceId: "inst-y" })
    assert.strictEqual(queued._tag, "Queued")
    deepStrictEqual(yield* store.queue(`raw-${round}`), ["inst-y"])
    assert.strictEqual(yield* store.queueLength(`raw-${round}`, "inst-x"), 1)
    yield* store.leaveQueue(`raw-${round}`, "inst-y")
    yield* store.commitAndRelease(`raw-${round}`, lock, [["a", "2"]])
    const again = yield* store.tryAcquire(`raw-${round}`, `${lock}b`, ["a"])
    assert.strictEqual(again._tag, "Acquired")
    yield* store.release(`raw-${round}`, `${lock}b`)
    // the queue's own lock steps: take, commit and hand on, take, release
    const taken = yield* store.acquireQueued(`raw-${round}`, "inst-x:1", ["a"], { instanceId: "inst-x" })
    assert.strictEqual(taken._tag, "Acquired")
    yield* store.commitAndReleaseQueued(`raw-${round}`, "inst-x:1", [["a", "3"]], { instanceId: "inst-x" })
    const retaken = yield* store.acquireQueued(`raw-${round}`, "inst-x:2", ["a"], { instanceId: "inst-x" })
    assert.strictEqual(retaken._tag, "Acquired")
    deepStrictEqual(yield* store.releaseQueued(`raw-${round}`, "inst-x:2", { instanceId: "inst-x" }), {
      released: true,
      queued: 0
    })
    const record = { instanceId: "inst-x", connectionId: "c" }
    deepStrictEqual(yield* store.claimSocket(`sock-${round}`, record), { _tag: "Claimed" })
    assert.isTrue(yield* store.refreshSocket(`sock-${round}`, record))
    const batch = yield* store.claimSockets([
      [`sock-${round}`, record],
      [`sock-${round}b`, record]
    ])
    deepStrictEqual(
      batch.map((result) => (Result.isSuccess(result) ? result.success._tag : result.failure._tag)),
      ["Taken", "Claimed"]
    )
    assert.isTrue(yield* store.deleteSocketIfOwner(`sock-${round}`, record))
    assert.isTrue(yield* store.deleteSocketIfOwner(`sock-${round}b`, record))
    yield* store.mailboxSetCursor("inst-x", "1-0", 10_000)
    const keys = yield* store.tokenKeys(`raw-${round}`)
    assert.isTrue(keys.some((key) => key.name === "s:a"))
  })

/** The lines of `logs` and the message of `error` that contain any of `secrets`. */
const leaks = (lines: ReadonlyArray<LogLine>, secrets: ReadonlyArray<string>) =>
  lines.filter((line) => secrets.some((secret) => line.message.includes(secret)))

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.on("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      probe.close(() => (port > 0 && port !== 6379 ? resolve(port) : reject(new Error(`unusable port ${port}`))))
    })
  })

describe("a hostile Redis", () => {
  it.live("after SCRIPT FLUSH every operation works at once: the scripts are loaded again", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      const fx = yield* redisWorkers(server.url, { commandTimeout: 5_000 })
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      yield* everyOperation(a, b, fx.store, 1)
      deepStrictEqual(yield* Effect.orDie(server.command("SCRIPT", "FLUSH")), "OK")
      const noscriptBefore = yield* stat(server, "errorstats", "errorstat_NOSCRIPT", "count")
      yield* everyOperation(a, b, fx.store, 2)
      // the flush was noticed (an EVALSHA refused) and survived by loading the scripts again
      assert.isAbove((yield* stat(server, "errorstats", "errorstat_NOSCRIPT", "count")) - noscriptBefore, 0)
      // and again right after a second flush, with a pipeline of scripts first
      yield* Effect.orDie(server.command("SCRIPT", "FLUSH"))
      const batch = yield* fx.store.claimSockets([
        ["after-flush-1", { instanceId: "inst-z", connectionId: "c" }],
        ["after-flush-2", { instanceId: "inst-z", connectionId: "c" }]
      ])
      deepStrictEqual(
        batch.map((result) => (Result.isSuccess(result) ? result.success._tag : result.failure._tag)),
        ["Claimed", "Claimed"]
      )
      yield* everyOperation(a, b, fx.store, 3)
      assert.isTrue(yield* a.health.healthy)
      assert.isTrue(yield* b.health.healthy)
    })
  )

  it.live(
    "maxmemory 1mb, noeviction: writes fail with StoreRefused and nothing is partly written; they work once memory is free",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start({
          extraArgs: ["--maxmemory", "1mb", "--maxmemory-policy", "noeviction"]
        })
        const fx = yield* redisWorkers(server.url, {
          keyPrefix: "oom",
          lockExpiration: 2_000,
          lockWarningThreshold: 1_000
        })
        const limit = yield* Effect.map(Effect.orDie(server.info("memory")), (info) => Number(info.maxmemory))
        assert.strictEqual(limit, 1024 * 1024)
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        // The server with these connections already uses about that much: the setup gets room,
        // then the limit is 1 MB again.
        const used = yield* Effect.map(Effect.orDie(server.info("memory")), (info) => Number(info.used_memory))
        yield* Effect.orDie(server.command("CONFIG", "SET", "maxmemory", Math.max(limit, used) + 2 * 1024 * 1024))
        yield* a.tokens.link("tab", "conn")
        for (let i = 0; i < 3; i++) yield* a.states.modify("t", Counter, bump)
        yield* a.states.modifyAll("t", { Counter, Other }, (v) =>
          Effect.succeed([null, { Counter: v.Counter, Other: { n: 30 } }] as const)
        )
        const stored = {
          counter: yield* raw(server, sliceKey("oom", "t", "counter")),
          other: yield* raw(server, sliceKey("oom", "t", "other"))
        }
        deepStrictEqual(stored, { counter: Option.some('{"n":3}'), other: Option.some('{"n":30}') })

        const fillers: Array<string> = []

        const roomy = Math.max(limit, used) + 2 * 1024 * 1024
        const usedMemory = Effect.map(Effect.orDie(server.info("memory")), (info) => Number(info.used_memory))
        /**
         * Out of memory for good: 320 kB of raw values written while there is room, then the
         * limit back to 1 MB. Being far over the limit, the server cannot drift back under it
         * as connections come and go.
         */
        const exhaust = Effect.gen(function* () {
          for (let i = 0; i < 20; i++) {
            const key = `filler:${fillers.length}`
            yield* Effect.orDie(server.command("SET", key, "x".repeat(16 * 1024)))
            fillers.push(key)
          }
          yield* Effect.orDie(server.command("CONFIG", "SET", "maxmemory", limit))
          assert.isAbove(yield* usedMemory, limit + 128 * 1024)
          const tiny = yield* Effect.result(server.command("SET", "tiny", "1"))
          assert.isTrue(Result.isFailure(tiny) && /OOM/.test(tiny.failure.message), "a tiny write still fits")
        })
        const room = Effect.gen(function* () {
          yield* Effect.orDie(server.command("CONFIG", "SET", "maxmemory", roomy))
          while (fillers.length > 0) yield* Effect.orDie(server.command("DEL", fillers.pop()!))
        })
        const refused = (label: string, effect: Effect.Effect<unknown, { readonly _tag: string }>) =>
          Effect.gen(function* () {
            const error = yield* within(label, 10_000, Effect.flip(effect))
            assert.strictEqual(error._tag, "StoreRefused", `${label}: ${JSON.stringify(error)}`)
            assert.match((error as unknown as { message: string }).message, /OOM/, label)
          })

        yield* exhaust
        // a modification of one slice, of two slices, a send and a new link: all refused
        yield* refused("modify", a.states.modify("t", Counter, bump))
        yield* refused(
          "modifyAll",
          a.states.modifyAll("t", { Counter, Other }, (v) =>
            Effect.succeed([null, { Counter: { n: v.Counter.n + 1 }, Other: { n: v.Other.n + 1 } }] as const)
          )
        )
        yield* refused("send", b.mailbox.send("tab", update(1)))
        const notStored = yield* Effect.flip(a.tokens.link("tab-2", "conn-2"))
        assert.strictEqual(notStored._tag, "RecordNotStored")
        deepStrictEqual(
          {
            counter: yield* raw(server, sliceKey("oom", "t", "counter")),
            other: yield* raw(server, sliceKey("oom", "t", "other"))
          },
          stored
        )

        // memory runs out between the grant and the commit of two slices: neither is written
        yield* room
        yield* refused(
          "a commit of two slices",
          a.states.modifyAll("t2", { Counter, Other }, () =>
            Effect.as(exhaust, [null, { Counter: { n: 1 }, Other: { n: 2 } }] as const)
          )
        )
        deepStrictEqual(yield* raw(server, sliceKey("oom", "t2", "counter")), Option.none())
        deepStrictEqual(yield* raw(server, sliceKey("oom", "t2", "other")), Option.none())
        // and the lock is not left behind to block the token until it expires
        deepStrictEqual(yield* fx.store.holder("t2"), Option.none())

        // once memory is free again everything works, from the state as it was
        yield* room
        assert.strictEqual(yield* within("modify after", 10_000, a.states.modify("t", Counter, bump)), 3)
        assert.strictEqual(yield* within("modify t2 after", 10_000, b.states.modify("t2", Counter, bump)), 0)
        deepStrictEqual(yield* a.states.get("t", Other), { n: 30 })
        assert.strictEqual(yield* b.mailbox.send("tab", update(2)), "sent")
        yield* untilReal(
          "the update after",
          Effect.sync(() => a.received.some(([, value]) => value.n === 2)),
          { within: 10_000 }
        )
        deepStrictEqual(
          a.received.map(([, value]) => value.n),
          [2]
        )
        // every loop healthy again: the presence refresh, refused while memory was out, once
        // its back-off has run
        yield* untilReal("every loop healthy again", a.health.healthy, { within: 20_000 })
      })
  )

  it.live("CONFIG and KEYS renamed away: every operation works, records kept alive by refreshing", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start({
        extraArgs: ["--rename-command", "CONFIG", "", "--rename-command", "KEYS", ""]
      })
      // the server really refuses both
      assert.isTrue(Result.isFailure(yield* Effect.result(server.command("CONFIG", "GET", "maxmemory"))))
      assert.isTrue(Result.isFailure(yield* Effect.result(server.command("KEYS", "*"))))
      const fx = yield* redisWorkers(server.url, { commandTimeout: 5_000 })
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      yield* everyOperation(a, b, fx.store, 1)
      yield* a.tokens.link("kept", "conn")
      yield* untilReal("keep-alive mode known", Effect.map(a.tokens.keepAlive, Option.isSome), { within: 10_000 })
      deepStrictEqual(yield* a.tokens.keepAlive, Option.some("refresh"))
      const listed = yield* Stream.runCollect(b.tokens.tokens)
      deepStrictEqual([...listed], [["kept", { instanceId: a.id, connectionId: "conn" }]])
      const report = yield* Inspect.token("ops-1").pipe(Effect.provideService(Store, fx.store))
      assert.isTrue(report.slices.some((slice) => slice.name === "counter"))
      const mailbox = yield* Inspect.instance(a.id).pipe(Effect.provideService(Store, fx.store))
      assert.strictEqual(mailbox.instanceId, a.id)
      assert.isTrue(Option.isSome(mailbox.lastDeliveredId))
      assert.isTrue(yield* a.health.healthy)
      assert.isTrue(yield* b.health.healthy)
    })
  )

  it.live(
    "a restart that lost every key: records, mailboxes and leases recover, and the state starts again from the initial value",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const fx = yield* redisWorkers(server.url, {
          oplock: true,
          lockExpiration: 1_000,
          lockWarningThreshold: 500,
          leaseHoldTime: 600,
          retryDelayInitial: 50,
          retryDelayMax: 200
        })
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* roundTrip(b, a, "tab-a", 1)
        yield* roundTrip(a, b, "tab-b", 2)
        for (let i = 0; i < 5; i++) yield* a.states.modify("shared", Counter, bump)
        yield* b.states.modify("only-b", Counter, bump)
        // a holds its lease on "shared" when the server dies
        yield* server.kill
        yield* server.restart

        // socket records come back (each worker writes its own back after resubscribing)
        yield* untilReal(
          "tab-a's record restored",
          Effect.map(
            Effect.result(b.tokens.owner("tab-a", { refresh: true })),
            (owner) => Result.isSuccess(owner) && Option.isSome(owner.success)
          ),
          { within: 10_000 }
        )
        yield* untilReal(
          "tab-b's record restored",
          Effect.map(
            Effect.result(a.tokens.owner("tab-b", { refresh: true })),
            (owner) => Result.isSuccess(owner) && Option.isSome(owner.success)
          ),
          { within: 10_000 }
        )
        // mailboxes: updates reach both sockets again
        assert.strictEqual(yield* b.mailbox.send("tab-a", update(3)), "sent")
        assert.strictEqual(yield* a.mailbox.send("tab-b", update(4)), "sent")
        yield* untilReal(
          "updates after the restart",
          Effect.sync(
            () => a.received.some(([, value]) => value.n === 3) && b.received.some(([, value]) => value.n === 4)
          ),
          { within: 10_000 }
        )
        deepStrictEqual(
          a.received.map(([, value]) => value.n),
          [1, 3]
        )
        deepStrictEqual(
          b.received.map(([, value]) => value.n),
          [2, 4]
        )

        // state: from the initial value, no lost or doubled modification. A modification
        // caught by the restart in a's lease fails with a typed error and is retried, as an
        // app would; every one that succeeded is counted exactly once.
        const attempt = (worker: DeliveryWorker, token: string) =>
          worker.states.modify(token, Counter, bump).pipe(
            Effect.retry({
              while: (error) => error._tag === "LockExpired" || error._tag === "StoreUnavailable",
              times: 50
            })
          )
        const seen: Array<number> = []
        for (let i = 0; i < 10; i++)
          seen.push(yield* within("modify after restart", 15_000, attempt(i % 2 === 0 ? a : b, "shared")))
        deepStrictEqual(
          seen,
          Array.from({ length: 10 }, (_, i) => i)
        )
        deepStrictEqual(yield* b.states.get("shared", Counter), { n: 10 })
        assert.strictEqual(yield* within("only-b after restart", 15_000, attempt(b, "only-b")), 0)
        yield* untilReal(
          "both healthy",
          Effect.map(Effect.all([a.health.healthy, b.health.healthy]), ([x, y]) => x && y),
          { within: 10_000 }
        )
        const errors = fx.logs.filter((line) => line.level === "FATAL")
        deepStrictEqual(errors, [])
      })
  )
})

describe("credentials", () => {
  const secret = "s3cr3t/p@ss:w0rd"
  const encoded = encodeURIComponent(secret)
  const secrets = [secret, encoded, "s3cr3t"]

  const assertNoLeak = (lines: ReadonlyArray<LogLine>, messages: ReadonlyArray<string>) => {
    deepStrictEqual(leaks(lines, secrets), [])
    for (const message of messages) for (const s of secrets) assert.notInclude(message, s)
  }

  it.live("a password URL: it works, and the password appears in no log line or error message", () =>
    Effect.gen(function* () {
      const server = yield* RedisServer.start()
      yield* Effect.orDie(server.command("CONFIG", "SET", "requirepass", secret))
      const url = `redis://:${encoded}@127.0.0.1:${server.port}`
      const fx = yield* redisWorkers(url, { retryDelayInitial: 50, retryDelayMax: 200, commandTimeout: 1_000 })
      const a = yield* fx.worker()
      const b = yield* fx.worker()
      yield* roundTrip(b, a, "tab", 1)
      assert.strictEqual(yield* a.states.modify("t", Counter, bump), 0)

      const messages: Array<string> = []
      // a wrong password, a wrong user: the store cannot be built; the error names neither
      for (const bad of [
        `redis://:wrong-${encoded}@127.0.0.1:${server.port}`,
        `redis://nobody:${encoded}@127.0.0.1:${server.port}`
      ]) {
        const logs = capture()
        const error = yield* Effect.flip(
          Layer.build(
            RedisStore.layer({ url: bad }).pipe(
              Layer.provide(LeaseholdConfig.layer({ connectTimeout: 1_000, commandTimeout: 1_000 }))
            )
          ).pipe(Effect.provide(logs.layer), Effect.scoped)
        )
        messages.push(error.message, JSON.stringify(error), String((error as { cause?: unknown }).cause ?? ""))
        deepStrictEqual(leaks(logs.lines, secrets), [])
      }
      // a URL without a host: an InvalidConfig that does not echo it
      const invalid = yield* Effect.flip(
        Layer.build(
          RedisStore.layer({ url: `redis://:${encoded}@` }).pipe(Layer.provide(LeaseholdConfig.layer({})))
        ).pipe(Effect.scoped)
      )
      messages.push(invalid.message, JSON.stringify(invalid))

      // an outage: the server dies, comes back without the password, then with it again
      yield* server.kill
      const down = yield* Effect.flip(a.states.modify("t", Counter, bump))
      messages.push(down.message, JSON.stringify(down))
      yield* untilReal(
        "errors logged during the outage",
        Effect.sync(() => fx.logs.some((line) => line.level === "ERROR")),
        { within: 10_000 }
      )
      yield* server.restart
      yield* Effect.orDie(server.command("CONFIG", "SET", "requirepass", secret))
      yield* untilReal(
        "a modification after the outage",
        Effect.map(Effect.result(a.states.modify("t", Counter, bump)), Result.isSuccess),
        { within: 15_000 }
      )
      yield* untilReal(
        "the socket record back",
        Effect.map(
          Effect.result(b.tokens.owner("tab", { refresh: true })),
          (o) => Result.isSuccess(o) && Option.isSome(o.success)
        ),
        { within: 15_000 }
      )
      assertNoLeak(fx.logs, messages)
      // the check would see a leak: the URL itself is in the messages' source
      assert.isNotEmpty(leaks([{ level: "INFO", message: url }], secrets))
    })
  )

  const tls = redisHasTls()

  it.live(
    `a rediss:// URL ${tls ? "against a TLS redis-server" : "(no TLS in this redis-server: the URL is parsed and scrubbed only)"}: the password is never logged`,
    () =>
      Effect.gen(function* () {
        const messages: Array<string> = []
        const logs = capture()
        if (!tls) {
          const error = yield* Effect.flip(
            Layer.build(
              RedisStore.layer({ url: `rediss://:${encoded}@127.0.0.1:1` }).pipe(
                Layer.provide(LeaseholdConfig.layer({ connectTimeout: 500, commandTimeout: 500 }))
              )
            ).pipe(Effect.provide(logs.layer), Effect.scoped)
          )
          assert.strictEqual(error._tag, "StoreUnavailable")
          messages.push(error.message, JSON.stringify(error))
          assertNoLeak(logs.lines, messages)
          return
        }
        const { cert, key } = yield* selfSignedCertificate
        const tlsPort = yield* Effect.promise(freePort)
        // The harness waits for a PING without a password: the password is set after the start.
        const running = yield* RedisServer.start({
          extraArgs: ["--tls-port", String(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key].concat([
            "--tls-ca-cert-file",
            cert,
            "--tls-auth-clients",
            "no"
          ])
        })
        yield* Effect.orDie(running.command("CONFIG", "SET", "requirepass", secret))
        const url = `rediss://:${encoded}@127.0.0.1:${tlsPort}`
        const config = LeaseholdConfig.layer({ connectTimeout: 2_000, commandTimeout: 2_000 })

        // the self-signed certificate is not trusted: the store cannot be built, and says so without the password
        const untrusted = yield* Effect.flip(
          Layer.build(RedisStore.layer({ url }).pipe(Layer.provide(config))).pipe(
            Effect.provide(logs.layer),
            Effect.scoped
          )
        )
        assert.strictEqual(untrusted._tag, "StoreUnavailable")
        messages.push(untrusted.message, JSON.stringify(untrusted))

        // trusted (for this test only): a worker over TLS works
        yield* Effect.acquireRelease(
          Effect.sync(() => {
            const previous = process.env.NODE_TLS_REJECT_UNAUTHORIZED
            process.env.NODE_TLS_REJECT_UNAUTHORIZED = "0"
            return previous
          }),
          (previous) =>
            Effect.sync(() => {
              if (previous === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED
              else process.env.NODE_TLS_REJECT_UNAUTHORIZED = previous
            })
        )
        const fx = yield* redisWorkers(url, { retryDelayInitial: 50, retryDelayMax: 200 })
        const a = yield* fx.worker()
        const b = yield* fx.worker()
        yield* roundTrip(b, a, "tab", 1)
        assert.strictEqual(yield* a.states.modify("t", Counter, bump), 0)
        yield* running.kill
        const down = yield* Effect.flip(a.states.modify("t", Counter, bump))
        messages.push(down.message, JSON.stringify(down))
        yield* untilReal(
          "errors logged during the outage",
          Effect.sync(() => fx.logs.some((line) => line.level === "ERROR")),
          { within: 10_000 }
        )
        assertNoLeak([...logs.lines, ...fx.logs], messages)
      })
  )
})
