/**
 * The socket session on real worker processes (`test/session/worker.ts`) over one
 * redis-server that persists (AOF, `appendfsync always`), each worker on its own port, and
 * WebSocket clients speaking the wire protocol: an event with `seq` is applied exactly
 * once when its worker is SIGKILLed between its commit and its answer, or before its
 * commit, and when Redis restarts between its answer and its resend; a socket whose token
 * a link elsewhere took over is closed with 4001; a link that takes a dead worker's record
 * over sends the state.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as RedisStore from "leasehold/RedisStore"
import * as SocketSession from "leasehold/SocketSession"
import type * as SocketSessionError from "leasehold/SocketSessionError"
import { Store } from "leasehold/Store"
import { answers, type Client, connect, serveWorkerWith, session } from "./session/support.js"
import { spawnChild } from "./support/children.js"
import * as RedisServer from "./support/RedisServer.js"

const presenceMs = 1_000

/** A redis-server that writes every command to its AOF before it answers. */
const persisting = RedisServer.start({ extraArgs: ["--appendonly", "yes", "--appendfsync", "always"] })

/** A worker process over `server`, serving the session; SIGKILLed with the scope. */
const worker = (server: RedisServer.RedisServer, env: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const child = yield* spawnChild("test/session/worker.ts", {
      LEASEHOLD_REDIS_URL: server.url,
      LEASEHOLD_PRESENCE_EXPIRATION_MS: String(presenceMs),
      LEASEHOLD_LOCK_EXPIRATION_MS: "2000",
      LEASEHOLD_RETRY_JITTER: "false",
      LEASEHOLD_RETRY_DELAY_MAX_MS: "500",
      ...env
    })
    const [, port, id] = (yield* child.waitFor(/^listening \d+ \S+$/, 30_000)).split(" ")
    return { child, port: Number(port), id: id! }
  })

/** Two workers over one persisting server. */
const twoWorkers: Effect.Effect<
  {
    readonly server: RedisServer.RedisServer
    readonly a: Effect.Success<ReturnType<typeof worker>>
    readonly b: Effect.Success<ReturnType<typeof worker>>
  },
  never,
  Scope.Scope
> = Effect.gen(function* () {
  const server = yield* persisting
  const [a, b] = yield* Effect.all([worker(server), worker(server)], { concurrency: 2 })
  return { server, a, b }
})

/** A slice of `token` as stored, parsed (`None` when absent). */
const stored = (server: RedisServer.RedisServer, token: string, slice: string) =>
  Effect.map(
    RedisServer.getRaw(server, `leasehold:{${token}}:s:${slice}`),
    Option.map((raw) => JSON.parse(raw))
  )

const counter = (server: RedisServer.RedisServer, token: string) =>
  Effect.map(
    stored(server, token, "counter"),
    Option.map((value: { readonly n: number }) => value.n)
  )

/** The last applied `seq` of `client` as stored. */
const lastSeq = (server: RedisServer.RedisServer, token: string, client: string) =>
  Effect.map(
    stored(server, token, SocketSession.seqSliceName),
    Option.flatMap((value: { readonly clients: ReadonlyArray<readonly [string, number]> }) =>
      Option.fromNullishOr(value.clients.find(([id]) => id === client)?.[1])
    )
  )

const clientId = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`

/** Send `seq` from `from` to `to` (bumps of 1) and wait for the last answer. */
const bumps = (client: Client, from: number, to: number) =>
  Effect.gen(function* () {
    for (let seq = from; seq <= to; seq++) client.send({ type: "bump", by: 1, seq })
    yield* client.waitFor((f) => f.seq === to)
  })

/** The worker's process SIGKILLed, and its presence expired. */
const killed = (w: Effect.Success<ReturnType<typeof worker>>) =>
  Effect.gen(function* () {
    yield* w.child.kill("SIGKILL")
    yield* w.child.exited
    yield* Effect.sleep(presenceMs)
  })

describe("SocketSession (redis, processes)", () => {
  it.live(
    "a worker SIGKILLed between the commit and the answer: the resend to another worker is answered duplicate, applied once",
    () =>
      Effect.gen(function* () {
        const { server, a, b } = yield* twoWorkers
        const id = clientId("after")
        const onA = yield* connect(a.port, { client: id })
        yield* bumps(onA, 1, 1)
        onA.send({ type: "bump", by: 1, seq: 2, hold: "answer" })
        yield* a.child.waitFor(/^holding answer$/)
        // committed, and not answered
        assert.deepStrictEqual(yield* counter(server, onA.token), Option.some(2))
        assert.deepStrictEqual(yield* lastSeq(server, onA.token, id), Option.some(2))
        yield* killed(a)
        assert.deepStrictEqual(answers(onA), [["update", 1]])
        const onB = yield* connect(b.port, { client: id, token: onA.token })
        onB.send({ type: "bump", by: 1, seq: 2 })
        assert.deepStrictEqual(yield* onB.waitFor((f) => f.seq === 2), {
          type: "state",
          n: 2,
          v: 2,
          seq: 2,
          duplicate: true
        })
        yield* bumps(onB, 3, 3)
        assert.deepStrictEqual(onB.frames.at(-1), { type: "update", n: 3, v: 3, seq: 3 })
        assert.deepStrictEqual(yield* counter(server, onA.token), Option.some(3))
      }),
    60_000
  )

  it.live(
    "a worker SIGKILLed before the commit: the resend to another worker is applied, once",
    () =>
      Effect.gen(function* () {
        const { server, a, b } = yield* twoWorkers
        const id = clientId("before")
        const onA = yield* connect(a.port, { client: id })
        yield* bumps(onA, 1, 1)
        onA.send({ type: "bump", by: 1, seq: 2, hold: "commit" })
        yield* a.child.waitFor(/^holding commit$/)
        yield* killed(a)
        // nothing of seq 2 was written
        assert.deepStrictEqual(yield* counter(server, onA.token), Option.some(1))
        assert.deepStrictEqual(yield* lastSeq(server, onA.token, id), Option.some(1))
        const onB = yield* connect(b.port, { client: id, token: onA.token })
        onB.send({ type: "bump", by: 1, seq: 2 })
        onB.send({ type: "bump", by: 1, seq: 2 })
        yield* onB.waitFor((f) => f.seq === 2 && f.duplicate === true)
        assert.deepStrictEqual(
          onB.frames.filter((f) => f.seq === 2),
          [
            { type: "update", n: 2, v: 2, seq: 2 },
            { type: "state", n: 2, v: 2, seq: 2, duplicate: true }
          ]
        )
        assert.deepStrictEqual(yield* counter(server, onA.token), Option.some(2))
        assert.deepStrictEqual(yield* lastSeq(server, onA.token, id), Option.some(2))
      }),
    60_000
  )

  it.live(
    "Redis restarted (AOF, appendfsync always) between the answer and the resend: answered duplicate, not applied twice",
    () =>
      Effect.gen(function* () {
        const { server, a, b } = yield* twoWorkers
        const id = clientId("restart")
        const onA = yield* connect(a.port, { client: id })
        yield* bumps(onA, 1, 3)
        assert.deepStrictEqual(answers(onA), [
          ["update", 1],
          ["update", 2],
          ["update", 3]
        ])
        yield* onA.close
        yield* server.kill
        yield* server.restart
        const onB = yield* connect(b.port, { client: id, token: onA.token })
        assert.deepStrictEqual(onB.frames.at(-1), { type: "state", n: 3, v: 3 })
        onB.send({ type: "bump", by: 1, seq: 3 })
        assert.deepStrictEqual(yield* onB.waitFor((f) => f.seq === 3), {
          type: "state",
          n: 3,
          v: 3,
          seq: 3,
          duplicate: true
        })
        yield* bumps(onB, 4, 4)
        assert.deepStrictEqual(onB.frames.at(-1), { type: "update", n: 4, v: 4, seq: 4 })
        assert.deepStrictEqual(yield* counter(server, onA.token), Option.some(4))
      }),
    60_000
  )

  it.live(
    "a socket whose token a link on another worker took over is closed with 4001",
    () =>
      Effect.gen(function* () {
        const { server, a, b } = yield* twoWorkers
        const onA = yield* connect(a.port, { client: clientId("lost") })
        yield* bumps(onA, 1, 2)
        // a's presence expires while it is stopped: its record is taken over
        yield* a.child.kill("SIGSTOP")
        yield* Effect.sleep(presenceMs * 2)
        const onB = yield* connect(b.port, { client: clientId("taker"), token: onA.token })
        assert.deepStrictEqual(
          onB.frames.map((f) => f.type),
          ["hello", "state"]
        )
        assert.strictEqual(onB.token, onA.token)
        assert.strictEqual(
          JSON.parse((yield* server.command("GET", `leasehold:{${onA.token}}:socket`)) as string).instanceId,
          b.id
        )
        yield* a.child.kill("SIGCONT")
        assert.strictEqual(yield* onA.closed, SocketSession.lostCloseCode)
      }),
    60_000
  )

  it.live(
    "a link that takes a dead worker's record over keeps the token and sends the current state",
    () =>
      Effect.gen(function* () {
        const { server, a, b } = yield* twoWorkers
        const onA = yield* connect(a.port, { client: clientId("dead") })
        yield* bumps(onA, 1, 5)
        const before = JSON.parse((yield* server.command("GET", `leasehold:{${onA.token}}:socket`)) as string)
        assert.strictEqual(before.instanceId, a.id)
        yield* killed(a)
        const onB = yield* connect(b.port, { client: clientId("heir"), token: onA.token })
        assert.deepStrictEqual(onB.frames, [
          { type: "hello", token: onA.token, instanceId: b.id, maxFrameBytes: SocketSession.defaultMaxFrameBytes },
          { type: "state", n: 5, v: 5 }
        ])
        const after = JSON.parse((yield* server.command("GET", `leasehold:{${onA.token}}:socket`)) as string)
        assert.strictEqual(after.instanceId, b.id)
      }),
    60_000
  )
})

/**
 * A worker served in this process over `server` (the test's own session, whose events and
 * updates the worker processes' read and write alike), with the processes' settings: where
 * `SocketSession.apply` runs.
 */
const caller = (server: RedisServer.RedisServer) =>
  Effect.gen(function* () {
    const settings = LeaseholdConfig.layer({
      lockExpiration: "2 seconds",
      presenceExpiration: Duration.millis(presenceMs),
      retryJitter: false,
      oplock: true,
      leaseDurability: "batch"
    })
    const shared = Context.pick(
      Store,
      LeaseholdConfig.LeaseholdConfig
    )(yield* Layer.build(RedisStore.layer({ url: server.url }).pipe(Layer.provideMerge(settings))))
    const { context } = yield* serveWorkerWith(shared)
    return <A, E>(effect: Effect.Effect<A, E, SocketSession.Sockets>) => Effect.provideContext(effect, context)
  })

describe("SocketSession.apply on worker processes", () => {
  it.live(
    "an event applied through another worker is applied by the worker holding the socket: its lease stays",
    () =>
      Effect.gen(function* () {
        const server = yield* persisting
        const a = yield* worker(server, {
          LEASEHOLD_OPLOCK: "true",
          LEASEHOLD_LEASE_DURABILITY: "batch",
          // a lease held longer than the test: only a contender could end it
          LEASEHOLD_LOCK_EXPIRATION_MS: "60000",
          LEASEHOLD_LEASE_HOLD_TIME_MS: "50000"
        })
        const onB = yield* caller(server)
        const tab = yield* connect(a.port, { client: clientId("leased") })
        yield* bumps(tab, 1, 3)
        // a's lease of the token: its lock, held since the tab's first event
        const lock = `leasehold:{${tab.token}}:lock`
        const held = yield* server.command("GET", lock)
        assert.isString(held)
        for (let i = 1; i <= 20; i++) {
          const applied = yield* onB(SocketSession.apply(session, tab.token, { type: "bump", by: 1 }))
          assert.deepStrictEqual(applied, { update: { n: 3 + i, v: 3 + i }, delivery: "sent" })
        }
        yield* tab.waitFor((f) => f.type === "update" && f.n === 23)
        // the lease never moved to the caller's worker and back: the same lock all along
        assert.strictEqual(yield* server.command("GET", lock), held)
        // answered once stored
        assert.deepStrictEqual(yield* counter(server, tab.token), Option.some(23))
      }),
    60_000
  )

  it.live(
    "the socket's worker frozen: the event fails of unknown outcome after the lock expiration, and is applied once when it resumes",
    () =>
      Effect.gen(function* () {
        const server = yield* persisting
        const a = yield* worker(server)
        const onB = yield* caller(server)
        const tab = yield* connect(a.port, { client: clientId("frozen") })
        yield* bumps(tab, 1, 1)
        yield* a.child.kill("SIGSTOP")
        const started = Date.now()
        const failed = yield* Effect.flip(onB(SocketSession.apply(session, tab.token, { type: "bump", by: 1 })))
        const waited = Date.now() - started
        assert.strictEqual(failed._tag, "EventFailed")
        const { applied, code } = failed as SocketSessionError.EventFailed
        assert.deepStrictEqual({ applied, code }, { applied: "unknown", code: "Unanswered" })
        assert.isAtLeast(waited, 1_900)
        // nothing applied by the caller
        assert.deepStrictEqual(yield* counter(server, tab.token), Option.some(1))
        yield* a.child.kill("SIGCONT")
        // the resumed worker reads the call and applies it, once
        yield* tab.waitFor((f) => f.type === "update" && f.n === 2, 20_000)
        assert.deepStrictEqual(yield* counter(server, tab.token), Option.some(2))
        yield* Effect.sleep(1_000)
        assert.deepStrictEqual(yield* counter(server, tab.token), Option.some(2))
      }),
    60_000
  )
})
