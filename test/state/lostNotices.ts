/**
 * Notices lost for real on Redis, and how a worker recovers them: a `Granted` notice
 * claimed at the waiter's next re-check, a `Contended` notice whose lease ends at the
 * waiter's next re-check (which tells the holder again) or when the holder's subscription is
 * back, and a waiter that re-checks when its subscription is back.
 * One body for a single server and a Cluster.
 *
 * A notice is lost the way Redis loses one: it is published while its worker's subscriber
 * connection is gone. That connection is cut by `CLIENT KILL ID` at the moment of the
 * release or the contention, and kept from subscribing again for as long as the test says
 * (each worker logs in as an ACL user of its own, denied the subscribe commands meanwhile):
 * nothing else of the worker is touched, its command connection runs on. Each worker has
 * its own RedisStore (its own command and subscriber connections), as separate processes
 * do, built the way `Worker.layerStateFromEnv` builds one.
 *
 * Every re-check interval is far from the bound it is not meant to meet: the lock lives
 * 300 s (600 s where the interval is 60 s), so a notice that nobody recovers shows as a
 * wait that outlasts the test's bound.
 */
import { assert, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { InstanceId } from "../../src/InstanceId.js"
import { makeKeys } from "../../src/internal/keys.js"
import * as Lease from "../../src/internal/lease.js"
// the worker layers with their leases, which the public ones leave out
import * as WorkerLayers from "../../src/internal/worker.js"
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as RedisStore from "../../src/RedisStore.js"
import * as StateManager from "../../src/StateManager.js"
import { Store } from "../../src/Store.js"
import { within } from "../conformance/helpers.js"
import { capture } from "../support/logs.js"
import * as Monitor from "../support/monitor.js"
import { buildOwn } from "../support/ownScope.js"
import { untilReal } from "../support/poll.js"
import * as RedisServer from "../support/RedisServer.js"
import { Counter, holding } from "./workers.js"

/** Where the workers of a test run. */
export interface Deployment {
  /** Every server: ACL users live on each node. */
  readonly nodes: ReadonlyArray<RedisServer.RedisServer>
  /** The store URL of a worker that logs in as `user`. */
  readonly urlFor: (user: string, password: string) => string
  readonly cluster: boolean
  /** The server holding a key (all of a token's keys, and its notices on a Cluster). */
  readonly nodeFor: (key: string) => Effect.Effect<RedisServer.RedisServer>
  readonly keyPrefix: string
}

interface Worker {
  readonly id: string
  /** Its ACL user. */
  readonly user: string
  readonly states: StateManager.StateManager.Service
  readonly lease: Lease.Lease.Service
  readonly store: Store["Service"]
}

const PASSWORD = "lost-notice-test"
let users = 0

/** A subscribe command of each kind, denied and allowed again together. */
const subscribeCommands = ["subscribe", "ssubscribe", "psubscribe"]

const onEveryNode = (deployment: Deployment, ...args: ReadonlyArray<string>) =>
  Effect.forEach(deployment.nodes, (node) => Effect.orDie(node.command(...args)), { discard: true })

/** A worker with a RedisStore of its own, logged in as a new ACL user allowed everything. */
const makeWorker = (deployment: Deployment, input: LeaseholdConfig.Input) =>
  Effect.gen(function* () {
    const user = `lost-${process.pid}-${++users}`
    yield* onEveryNode(deployment, "ACL", "SETUSER", user, "on", `>${PASSWORD}`, "~*", "&*", "+@all")
    const layer = WorkerLayers.layerState.pipe(
      Layer.provideMerge(RedisStore.layer({ url: deployment.urlFor(user, PASSWORD), cluster: deployment.cluster })),
      Layer.provideMerge(
        LeaseholdConfig.layer({
          keyPrefix: deployment.keyPrefix,
          retryJitter: false,
          // a subscription allowed again is restored within a fifth of a second
          retryDelayInitial: 100,
          retryDelayMax: 200,
          ...input
        })
      )
    )
    const { built } = yield* Effect.orDie(buildOwn(layer, capture()))
    return {
      id: Context.get(built, InstanceId),
      user,
      states: Context.get(built, StateManager.StateManager),
      lease: Context.get(built, Lease.Lease),
      store: Context.get(built, Store)
    } satisfies Worker
  })

/** The subscribers of `w`'s notice channel for `token`, on the server that carries it. */
const subscribers = (deployment: Deployment, w: Worker, token: string) =>
  Effect.gen(function* () {
    const channel = w.store.noticeChannel(token, w.id)
    const node = yield* deployment.nodeFor(channel)
    const reply = yield* Effect.orDie(node.command("PUBSUB", deployment.cluster ? "SHARDNUMSUB" : "NUMSUB", channel))
    return Array.isArray(reply) && typeof reply[1] === "number" ? reply[1] : -1
  })

const listening = (deployment: Deployment, w: Worker, token: string) =>
  untilReal(
    `${w.id} listens to ${token}`,
    Effect.map(subscribers(deployment, w, token), (n) => n === 1),
    { within: 5_000 }
  )

/**
 * Cut `w`'s subscriber connection to the server that carries its notices of `token`, and
 * keep it from subscribing again until `hear`: what is published to it meanwhile is lost.
 */
const deafen = (deployment: Deployment, w: Worker, token: string) =>
  Effect.gen(function* () {
    yield* onEveryNode(deployment, "ACL", "SETUSER", w.user, ...subscribeCommands.map((c) => `-${c}`))
    const node = yield* deployment.nodeFor(w.store.noticeChannel(token, w.id))
    const list = yield* Effect.orDie(node.command("CLIENT", "LIST"))
    const ids = String(list)
      .split("\n")
      .filter((line) => line.includes(` user=${w.user} `) && line.includes(" name=leasehold:subscriber "))
      .map((line) => /^id=(\d+) /.exec(line)?.[1])
    assert.strictEqual(ids.length, 1, `${w.id}'s subscriber connections on ${node.port}: ${list}`)
    yield* Effect.orDie(node.command("CLIENT", "KILL", "ID", ids[0]!))
    assert.strictEqual(yield* subscribers(deployment, w, token), 0)
  })

/** Let `w` subscribe again. */
const hear = (deployment: Deployment, w: Worker) =>
  onEveryNode(deployment, "ACL", "SETUSER", w.user, ...subscribeCommands.map((c) => `+${c}`))

/** Returns once the token's server has run `n` scripts naming `w` (its attempts) since `m` began. */
const attemptsOf = (m: Monitor.Monitor, w: Worker, n: number) =>
  untilReal(
    `${n} attempts of ${w.id}`,
    Effect.sync(
      () =>
        m.commands.filter((c) => !c.fromScript && c.args[0]!.startsWith("eval") && c.args.includes(w.id)).length >= n
    ),
    { within: 5_000 }
  )

const addTen = (w: Worker, token: string) => w.states.modify(token, Counter, (s) => [null, { n: s.n + 10 }])

/** The stored counter of `token`, read past the store. */
const stored = (deployment: Deployment, token: string) =>
  Effect.gen(function* () {
    const key = makeKeys(deployment.keyPrefix).slice(token, "counter")
    const raw = yield* RedisServer.getRaw(yield* deployment.nodeFor(key), key)
    return Option.match(raw, { onNone: () => 0, onSome: (text) => (JSON.parse(text) as { n: number }).n })
  })

/**
 * `b` queued behind `a`'s modification of `token` (which holds the lock until `open`), b's
 * attempts made and b waiting for its notice: its next attempt is a re-check interval away.
 */
const queuedBehind = (deployment: Deployment, input: LeaseholdConfig.Input, token: string) =>
  Effect.gen(function* () {
    const a = yield* makeWorker(deployment, input)
    const b = yield* makeWorker(deployment, input)
    const { fiber: first, open } = yield* holding(a, token)
    const monitor = yield* Monitor.monitor(yield* deployment.nodeFor(makeKeys(deployment.keyPrefix).lock(token)))
    const second = yield* Effect.forkChild(addTen(b, token))
    // the attempt that queued b, then the one that follows its subscription (a grant's
    // notice may have been sent before it listened)
    yield* attemptsOf(monitor, b, 2)
    yield* listening(deployment, b, token)
    return { a, b, first, second, open }
  })

/**
 * `a` leasing `token`, cut off from its notices; then `b`'s modification (`second`) contends
 * from the moment `contended`: b's attempts made and b listening, each attempt a `Contended`
 * notice published while a could not hear it.
 */
const contendedWhileDeaf = (deployment: Deployment, input: LeaseholdConfig.Input, token: string) =>
  Effect.gen(function* () {
    const a = yield* makeWorker(deployment, input)
    const b = yield* makeWorker(deployment, input)
    yield* Effect.orDie(a.states.modify(token, Counter, (s) => [null, { n: s.n + 1 }]))
    assert.isTrue(a.lease.isLeased(token))
    yield* listening(deployment, a, token)
    const monitor = yield* Monitor.monitor(yield* deployment.nodeFor(makeKeys(deployment.keyPrefix).lock(token)))
    yield* deafen(deployment, a, token)
    const contended = yield* Clock.currentTimeMillis
    const second = yield* Effect.forkChild(addTen(b, token))
    yield* attemptsOf(monitor, b, 2)
    yield* listening(deployment, b, token)
    assert.isTrue(a.lease.isLeased(token), "a heard of the contention")
    return { a, b, second, contended }
  })

/** The lock of `token` was handed to `w` (the release installed its lock id), and not claimed yet. */
const handedTo = (w: Worker, token: string) =>
  Effect.gen(function* () {
    const holder = yield* Effect.orDie(w.store.holder(token))
    const lockId = Option.getOrUndefined(Option.map(holder, (h) => h.lockId))
    assert.isTrue(lockId?.startsWith(`${w.id}:`), `lock ${lockId}`)
  })

/** `fiber` completes within `ms` of `since` (real time), or the test fails. */
const doneBy = <A, E>(label: string, fiber: Fiber.Fiber<A, E>, since: number, ms: number) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    within(`${label} (within ${ms} ms)`, Math.max(1, since + ms - now), Effect.orDie(Fiber.join(fiber)))
  )

/** The suite, each test on a deployment of its own (`deploy`). */
export const lostNoticeSuite = (deploy: Effect.Effect<Deployment, never, Scope.Scope>) => {
  const token = "t"
  const test = (name: string, body: (deployment: Deployment) => Effect.Effect<void, never, Scope.Scope>) =>
    it.live(name, () => Effect.flatMap(deploy, body), 60_000)

  test("a lost Granted: the waiter, cut off from its notices at the release, claims its grant at its next re-check (2 s), before the grant expires", (deployment) =>
    Effect.gen(function* () {
      // re-checks every 2 s (half the hand-off timeout): the bound is one interval and 1 s
      const input = { lockExpiration: 300_000, handoffTimeout: 4_000 }
      const { b, first, second, open } = yield* queuedBehind(deployment, input, token)
      yield* deafen(deployment, b, token)
      const released = yield* Clock.currentTimeMillis
      yield* open
      yield* Effect.orDie(Fiber.join(first))
      // the release handed the lock to b, whose notice went to nobody; b cannot subscribe
      // again, so only its re-check can find the grant
      yield* handedTo(b, token)
      assert.strictEqual(yield* subscribers(deployment, b, token), 0)
      yield* doneBy("b's modification, by its re-check", second, released, 3_000)
      assert.strictEqual(yield* stored(deployment, token), 11)
      assert.strictEqual(yield* subscribers(deployment, b, token), 0, "b heard nothing meanwhile")
    }))

  test("a lost Contended: the lease of a holder cut off from its notices at the contention ends within one re-check interval (2 s) and 1 s, not at its hold time (120 s)", (deployment) =>
    Effect.gen(function* () {
      // b re-checks every 2 s (half the hand-off timeout): the bound is one interval and 1 s
      const input = { oplock: true, lockExpiration: 300_000, handoffTimeout: 4_000, leaseHoldTime: 120_000 }
      const { a, second, contended } = yield* contendedWhileDeaf(deployment, input, token)
      // a may subscribe again at once: its lease ends when it hears b's next attempt (b's
      // re-check) or asks the store on its return, whichever is first; a notice that
      // nobody recovers keeps the lease for its 120 s hold time
      yield* hear(deployment, a)
      yield* doneBy("b's modification, after a's lease ended", second, contended, 3_000)
      assert.isFalse(a.lease.isLeased(token))
      assert.strictEqual(yield* stored(deployment, token), 11)
    }))

  test("a lost Contended: the lease of a holder cut off from its notices at the contention ends once its subscription is back, not at the waiter's re-check (30 s) or the hold time (120 s)", (deployment) =>
    Effect.gen(function* () {
      const input = { oplock: true, lockExpiration: 300_000, handoffTimeout: 60_000, leaseHoldTime: 120_000 }
      const { a, second } = yield* contendedWhileDeaf(deployment, input, token)
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))))
      const allowed = yield* Clock.currentTimeMillis
      yield* hear(deployment, a)
      // a's subscription comes back: a asks the store, finds b queued, and ends its lease
      yield* doneBy("b's modification, after a's lease ended", second, allowed, 5_000)
      assert.isFalse(a.lease.isLeased(token))
      assert.strictEqual(yield* stored(deployment, token), 11)
    }))

  test("a waiter cut off from its notices at the release re-checks once its subscription is back, not after its re-check interval (60 s)", (deployment) =>
    Effect.gen(function* () {
      // re-checks every 60 s: within the bound, only the subscription's return recovers
      const input = { lockExpiration: 600_000, handoffTimeout: 120_000 }
      const { b, first, second, open } = yield* queuedBehind(deployment, input, token)
      yield* deafen(deployment, b, token)
      yield* open
      yield* Effect.orDie(Fiber.join(first))
      yield* handedTo(b, token)
      assert.strictEqual(yield* subscribers(deployment, b, token), 0)
      assert.isTrue(Option.isNone(yield* Effect.sync(() => Option.fromNullishOr(second.pollUnsafe()))))
      const allowed = yield* Clock.currentTimeMillis
      yield* hear(deployment, b)
      yield* doneBy("b's modification, after its resubscription", second, allowed, 5_000)
      assert.strictEqual(yield* stored(deployment, token), 11)
    }))
}
