/**
 * The chaos soak: W worker processes (`test/soak/worker.ts`) on one redis-server, oplock on,
 * modifying and sending to a set of tokens while faults are injected in an order drawn from
 * the seed: SIGKILL and restart of the server, SIGSTOP/SIGCONT of it for longer than the lock
 * expiration, CLIENT KILL of the command and of the subscriber connections, SIGKILL of one
 * worker while it holds leases (restarted after, three times), SIGSTOP of a worker that holds
 * sockets and leases for longer than the lock expiration (a long GC pause, a frozen VM), then
 * SIGCONT, and random interruptions of modifications inside the workers. Then every outcome
 * is checked against what the store holds: only an unknown outcome may have gone either way
 * (a failure with `StoreUnavailable` or `NotAcknowledged` after the function decided, and
 * the operations in flight in a killed incarnation, never reported); an error that promises
 * nothing was written is held to it, and any other failure is a violation. The history is
 * checked too: one fence per holder incarnation, and the counter's values in real-time order.
 *
 * The server runs with `appendonly yes` and `appendfsync always`, so that a SIGKILLed server
 * keeps every write it acknowledged (without persistence a restart empties it, and no count
 * can survive that). Every token is one browser tab, whose socket one worker holds; the
 * killed worker holds some. When it dies, each of its tabs reconnects about a second later,
 * as a page does, to another live worker or to the killed one's next incarnation, with the same
 * token: it must be linked again under that token, the dead worker's record taken over, and
 * the updates sent to it from then on delivered there.
 *
 * Behind Sentinel (`sentinel`: a primary, two replicas, three Sentinels; the workers find the
 * primary through them, with `LEASEHOLD_MIN_REPLICAS_ACK` = `minReplicasAck`, default 2)
 * the server's SIGKILL and SIGSTOP become failovers: SIGKILL of the primary, SIGSTOP of it
 * until a replica is promoted, and one that loses the primary's last writes (its replicas
 * frozen and cut off while the workers write to it alone, then it is SIGKILLed); each time
 * the old primary comes back as a replica. A modification that fails with `NotAcknowledged`
 * after its function decided is ambiguous, as one that fails with `StoreUnavailable` then;
 * one that fails so before deciding wrote nothing of its own. With every replica acknowledging, nothing
 * acknowledged may be lost; with 0, what the failovers that lose writes took is reported as
 * lost acknowledged modifications. Mailbox entries are not acknowledged by replicas: the
 * updates appended while the primary had no replica are counted apart (`exposed_sends`).
 * The Sentinels may also fail a primary over by themselves (one that did not answer one of
 * them within `down-after-milliseconds`, on a loaded machine): such a failover, seen in
 * their `+try-failover` and `+switch-master` events, loses what the demoted primary
 * acknowledged after the promotion, and its window is treated as that of a failover that
 * loses writes, its counts reported apart (`failovers_unplanned`, `*_in_unplanned_failovers`).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Scope from "effect/Scope"
import { Redis } from "ioredis"
import { makeKeys } from "../../src/internal/keys.js"
import * as RedisSentinel from "../support/RedisSentinel.js"
import * as RedisServer from "../support/RedisServer.js"

export interface Options {
  readonly seconds: number
  readonly seed: number
  readonly workers?: number
  readonly tokens?: number
  readonly fibers?: number
  /**
   * Run against a primary, two replicas and three Sentinels (`test/support/RedisSentinel`)
   * instead of one server, failovers among the faults.
   */
  readonly sentinel?: boolean
  /** `LEASEHOLD_MIN_REPLICAS_ACK` of the workers; with `sentinel`, default 2 (every replica), else 0. */
  readonly minReplicasAck?: number
  /** The faults to inject, in this order (kinds of `faultKinds`); default: the seed's schedule. */
  readonly faults?: ReadonlyArray<string>
  /** Progress lines (faults as they happen). */
  readonly log?: (line: string) => void
  /**
   * A property the workers break on purpose (`SOAK_INJECT` of `test/soak/worker.ts`), to
   * show that its check fails: `nothing-written`, `fence-reuse`, `counter-order` or
   * `unexpected-failure`.
   */
  readonly inject?: "nothing-written" | "fence-reuse" | "counter-order" | "unexpected-failure"
}

/**
 * Errors after which a write's fate is unknown (docs/state.md): a modification failing so
 * once its function decided may or may not be in the log. An interruption after the
 * decision (`Interrupted`) cannot happen by design, but would be unknown too.
 */
export const unknownOutcomeErrors: ReadonlyArray<string> = ["StoreUnavailable", "NotAcknowledged", "Interrupted"]

/** Errors that promise nothing was written (docs/state.md): checked against the log. */
export const nothingWrittenErrors: ReadonlyArray<string> = [
  "LockExpired",
  "LockLost",
  "ValueTooLarge",
  "InvalidSliceValue",
  "InvalidToken"
]

/**
 * The seed the tests run the soak with: `LEASEHOLD_SOAK_SEED` (CI derives it from the
 * commit), else the commit's own (the first 8 hex digits of `git rev-parse HEAD`), so that
 * every commit checked runs a schedule of its own, and a failure is replayed with
 * `npm run soak -- --seed S`.
 */
export const testSeed = (): number => {
  const fromEnv = process.env.LEASEHOLD_SOAK_SEED
  if (fromEnv !== undefined && fromEnv !== "") {
    const seed = Number(fromEnv)
    if (!Number.isSafeInteger(seed)) throw new Error(`LEASEHOLD_SOAK_SEED=${fromEnv}: not an integer`)
    return seed
  }
  const head = execFileSync("git", ["rev-parse", "HEAD"], { cwd: root, encoding: "utf8" }).trim()
  return Number.parseInt(head.slice(0, 8), 16)
}

/** The incarnation that made an operation: its id begins `<worker>g<generation>.`. */
const incarnationOf = (op: string) => op.slice(0, op.indexOf("."))

export interface Report {
  /** The seed of the run: `--seed` replays its schedule. */
  readonly seed: number
  readonly seconds: number
  /** One redis-server, or a primary with two replicas behind Sentinel. */
  readonly store: "server" | "sentinel"
  readonly min_replicas_ack: number
  readonly faults: number
  /** Failovers among the faults (a replica promoted each time). */
  readonly failovers: number
  /** The faults by kind. */
  readonly fault_counts: Readonly<Record<string, number>>
  /** Modifications and sends that reported an outcome. */
  readonly operations: number
  readonly successes: number
  /** Modifications that failed after their function decided, with an error whose outcome is unknown. */
  readonly ambiguous: number
  /**
   * Modifications that failed with `NotAcknowledged` (fewer replicas than asked had the
   * grant or the commit in time): ambiguous when the function had decided (counted there),
   * else failed before anything of them was written.
   */
  readonly not_acknowledged: number
  readonly sends: number
  readonly deliveries: number
  /** Successful modifications missing from the stored logs. */
  readonly lost_updates: number
  /** Of those, the ones acknowledged during a failover that loses writes (from the cut of the replicas to the SIGKILL). */
  readonly lost_updates_in_losing_failovers: number
  /**
   * Failovers the Sentinels started by themselves, not among the faults (a primary that did
   * not answer one of them within `down-after-milliseconds`, on a loaded machine).
   */
  readonly failovers_unplanned: number
  /**
   * Of the lost ones, those acknowledged during such a failover (from 1 s before its first
   * `+try-failover` to 1 s after the last Sentinel's `+switch-master`): the demoted primary
   * serves until its clients leave it, and what it acknowledges after the promoted replica
   * stopped following it is lost when it becomes a replica.
   */
  readonly lost_updates_in_unplanned_failovers: number
  /** Log entries of modifications that reported failure or interruption, or that appear twice. */
  readonly phantom_or_doubled: number
  /** Writes whose grant's fencing number is below that of the write they read (interleaved holders). */
  readonly fence_regressions: number
  /**
   * The operations allowed either way, by the tag of their error (`StoreUnavailable`,
   * `NotAcknowledged`, `Interrupted`, after their function decided), and `killed`: those of
   * a killed incarnation that never reported and are in the log.
   */
  readonly excused_by_error: Readonly<Record<string, number>>
  /** Modifications that failed with an error promising nothing was written, by its tag: each checked against the log. */
  readonly nothing_written_by_error: Readonly<Record<string, number>>
  /** Of those, the ones in the log. */
  readonly nothing_written_violations: number
  /** Modifications that failed with an error no document calls of unknown outcome (`StoreRefused`, a defect, …). */
  readonly unexpected_failures: number
  /** Log entries under a fence another incarnation wrote under too (one grant, two holders). */
  readonly fence_reuse_violations: number
  /** With `minReplicasAck` 0, such entries answered during a failover that loses writes (not violations). */
  readonly fence_reuse_in_losing_failovers: number
  /** With `minReplicasAck` 0, such entries answered during a failover the Sentinels started (not violations). */
  readonly fence_reuse_in_unplanned_failovers: number
  /**
   * Acknowledged increments whose counter value is not above that of one acknowledged
   * before they were asked for (the counter is not linearizable).
   */
  readonly real_time_order_violations: number
  /** With `minReplicasAck` 0, such increments answered during a failover that loses writes (not violations). */
  readonly real_time_order_in_losing_failovers: number
  /** With `minReplicasAck` 0, such increments answered during a failover the Sentinels started (not violations). */
  readonly real_time_order_in_unplanned_failovers: number
  readonly lost_deliveries: number
  /**
   * Sends appended while the primary had no replica (a failover that loses writes, from the
   * cut to the SIGKILL) or while the Sentinels failed it over by themselves: mailbox entries
   * are not replica-acknowledged, so these may be lost (not counted in `lost_deliveries`),
   * but not doubled nor misdirected.
   */
  readonly exposed_sends: number
  /** Of those, not delivered. */
  readonly exposed_sends_lost: number
  readonly duplicate_deliveries: number
  readonly out_of_order_deliveries: number
  /** Deliveries on a worker that did not hold the tab's socket at the time. */
  readonly misdirected_deliveries: number
  /** Reconnections of the tabs of a killed incarnation (each linked again elsewhere or on its successor). */
  readonly relinks: number
  /** Of those, linked again under the same token, the dead worker's record taken over. */
  readonly relinked: number
  /** Re-links answered with a fresh token (the tab taken for a duplicate of itself). */
  readonly relink_fresh: number
  /** Re-links that kept the token without taking the dead worker's record over. */
  readonly relink_not_taken_over: number
  /** Re-links that failed or did not answer, or whose record is not the tab's at the end. */
  readonly relink_lost: number
  /** Sockets reported on `TokenManager.lost` (each token is one tab: none may lose it). */
  readonly sockets_lost: number
  /** Locks, pending grants or queue entries left, records of live workers missing, loops not running, workers that did not close. */
  readonly stale_or_unhealthy: number
  readonly violations: number
  readonly details: ReadonlyArray<string>
  /** When each fault began and ended, and when each worker was told to stop and closed (ms into the run). */
  readonly fault_timeline: ReadonlyArray<string>
  /** What is left but allowed: queues whose every entry has passed its deadline. */
  readonly notes: ReadonlyArray<string>
}

/** The kinds of fault the soak injects on one server, or behind Sentinel. */
export const faultKinds = (sentinel: boolean): ReadonlyArray<string> => [
  "client-kill-normal",
  "client-kill-pubsub",
  ...(sentinel ? ["failover-kill", "failover-pause", "failover-losing"] : ["server-kill", "server-pause"]),
  "worker-kill",
  "worker-pause"
]

const root = path.resolve(import.meta.dirname, "../..")

interface Event {
  readonly t: string
  readonly [key: string]: unknown
}

interface Proc {
  readonly name: string
  readonly child: ChildProcess
  readonly events: Array<Event>
  readonly exited: Promise<number | null>
  /** The first event of kind `t` (and matching `where`). */
  readonly waitFor: (t: string, ms: number, where?: (event: Event) => boolean) => Promise<Event>
}

/** A tab's socket on one worker: linking from `start`, linked from `from` until `to`. */
interface Holding {
  readonly proc: Proc
  readonly connectionId: string
  readonly start: number
  readonly from: number
  to: number
}

const startWorker = (name: string, env: Record<string, string>): Proc => {
  const child = spawn(process.execPath, ["--import", "tsx", "test/soak/worker.ts"], {
    cwd: root,
    // the soak's own settings only: a LEASEHOLD_REDIS_URL of the shell would clash with Sentinels
    env: {
      ...Object.fromEntries(
        Object.entries(process.env).filter(([key]) => !key.startsWith("LEASEHOLD_") && key !== "SOAK_INJECT")
      ),
      ...env
    },
    stdio: ["pipe", "pipe", "pipe"]
  })
  const events: Array<Event> = []
  const listeners = new Set<() => void>()
  let buffer = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    buffer += chunk
    const lines = buffer.split("\n")
    buffer = lines.pop() ?? ""
    for (const line of lines) {
      if (!line.startsWith("{")) continue
      try {
        events.push(JSON.parse(line) as Event)
      } catch {
        // a log line that happens to start with a brace
      }
    }
    for (const listener of listeners) listener()
  })
  let stderr = ""
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000)
  })
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  const waitFor = (t: string, ms: number, where: (event: Event) => boolean = () => true) =>
    new Promise<Event>((resolve, reject) => {
      const check = () => {
        const found = events.find((event) => event.t === t && where(event))
        if (found !== undefined) {
          listeners.delete(check)
          clearTimeout(timer)
          resolve(found)
        }
      }
      const timer = setTimeout(() => {
        listeners.delete(check)
        reject(new Error(`${name}: no "${t}" within ${ms} ms; stderr: ${stderr}`))
      }, ms)
      listeners.add(check)
      check()
    })
  return { name, child, events, exited, waitFor }
}

/** A small seeded generator (mulberry32): the schedule is the same for the same seed. */
const seeded = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * The faults a run injects, in order: `options.faults`, or the seed's schedule. On one
 * server, thirteen, every kind twice (the worker SIGKILL three times); behind Sentinel,
 * every kind once (three failovers) per minute of the run (a failover with the return of
 * the old primary takes 6-9 s). In an order drawn from the seed.
 */
export const faultSchedule = (
  options: Pick<Options, "seconds" | "seed" | "sentinel" | "faults">
): ReadonlyArray<string> => {
  if (options.faults !== undefined) return [...options.faults]
  const kinds = faultKinds(options.sentinel === true)
  const rounds = Math.max(1, Math.floor(options.seconds / 60))
  const schedule =
    options.sentinel === true ? Array.from({ length: rounds }, () => kinds).flat() : [...kinds, ...kinds, "worker-kill"]
  const random = seeded(options.seed)
  for (let i = schedule.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1))
    ;[schedule[i], schedule[j]] = [schedule[j]!, schedule[i]!]
  }
  return schedule
}

/**
 * The re-links a run makes: each SIGKILL of the victim moves every tab it holds, and every
 * other one (the first, the third, …) goes to its next incarnation, to be moved again by
 * the next kill. It starts with a quarter of the tokens.
 */
export const expectedRelinks = (
  options: Pick<Options, "seconds" | "seed" | "sentinel" | "faults" | "workers" | "tokens">
): number => {
  const kills = faultSchedule(options).filter((kind) => kind === "worker-kill").length
  let held = Math.max(1, Math.floor((options.tokens ?? 16) / (options.workers ?? 4)))
  let relinks = 0
  for (let i = 0; i < kills; i++) {
    relinks += held
    held = Math.ceil(held / 2)
  }
  return relinks
}

/** How many of each kind a run injects. */
export const faultCounts = (schedule: ReadonlyArray<string>): Record<string, number> => {
  const counts: Record<string, number> = {}
  for (const kind of schedule) counts[kind] = (counts[kind] ?? 0) + 1
  return counts
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export const soak = (options: Options): Effect.Effect<Report, never, Scope.Scope> =>
  Effect.gen(function* () {
    const workerCount = options.workers ?? 4
    const tokenCount = options.tokens ?? 16
    const fibers = options.fibers ?? 4
    const log = options.log ?? (() => undefined)
    const schedule = faultSchedule(options)
    // a stream of its own: the schedule is the seed's whatever else draws
    const random = seeded(options.seed ^ 0x5bd1e995)
    const lockMs = 2_000
    // Short, so that the tabs of a killed worker are taken over within the run.
    const presenceMs = 1_200
    const minReplicasAck = options.minReplicasAck ?? (options.sentinel === true ? 2 : 0)
    if (options.sentinel !== true && minReplicasAck !== 0)
      return yield* Effect.die(new Error("minReplicasAck needs replicas: run the soak with sentinel"))
    const unknown = (options.faults ?? []).filter((kind) => !faultKinds(options.sentinel === true).includes(kind))
    if (unknown.length > 0)
      return yield* Effect.die(
        new Error(`no fault ${unknown.join(", ")} here; the kinds: ${faultKinds(options.sentinel === true).join(", ")}`)
      )
    // One server with persistence, or a primary, two replicas and three Sentinels (without
    // persistence: a killed primary comes back empty, as a replica, and copies the new one).
    const deployment = options.sentinel === true ? yield* RedisSentinel.start() : undefined
    const server =
      deployment === undefined
        ? yield* RedisServer.start({ extraArgs: ["--appendonly", "yes", "--appendfsync", "always"] })
        : undefined
    /** The server that takes writes now: the one server, or the primary the Sentinels name. */
    const primary: Effect.Effect<RedisServer.RedisServer> = deployment?.primary ?? Effect.succeed(server!)
    const storeEnv: Record<string, string> =
      deployment === undefined
        ? { LEASEHOLD_REDIS_URL: server!.url }
        : {
            LEASEHOLD_REDIS_SENTINELS: deployment.addresses,
            LEASEHOLD_REDIS_SENTINEL_NAME: deployment.name,
            LEASEHOLD_MIN_REPLICAS_ACK: String(minReplicasAck)
          }
    // Every failover, ours or one the Sentinels start by themselves, as each Sentinel
    // publishes it (on a channel named after the event): `+try-failover` names the primary
    // failed over, `+switch-master` the old primary and the new one.
    const sentinelEvents: Array<{
      readonly at: number
      readonly event: string
      readonly port: number
      readonly promoted: number
    }> = []
    for (const sentinel of deployment?.sentinels ?? []) {
      const events = yield* Effect.acquireRelease(
        Effect.sync(() => new Redis(sentinel.port, "127.0.0.1", { maxRetriesPerRequest: null })),
        (connection) => Effect.sync(() => connection.disconnect())
      )
      events.on("message", (event: string, message: string) => {
        const words = message.split(" ")
        sentinelEvents.push(
          event === "+try-failover"
            ? { at: Date.now(), event, port: Number(words[3]), promoted: 0 }
            : { at: Date.now(), event, port: Number(words[2]), promoted: Number(words[4]) }
        )
      })
      yield* Effect.promise(() => events.subscribe("+try-failover", "+switch-master"))
    }
    const tokens = Array.from({ length: tokenCount }, (_, i) => `soak-${i}`)
    const victim = workerCount - 1
    // One tab per token: a quarter on the worker that is killed (the last), the rest on the others.
    const socketsOf = new Map<number, Array<string>>()
    for (const [i, token] of tokens.entries()) {
      const owner = i < Math.max(1, Math.floor(tokenCount / workerCount)) ? victim : Math.floor(random() * victim)
      socketsOf.set(owner, [...(socketsOf.get(owner) ?? []), token])
    }
    const env = (index: number, generation: number): Record<string, string> => ({
      ...storeEnv,
      LEASEHOLD_OPLOCK: "true",
      LEASEHOLD_LOCK_EXPIRATION_MS: String(lockMs),
      LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "1500",
      LEASEHOLD_COMMAND_TIMEOUT_MS: "500",
      LEASEHOLD_CONNECT_TIMEOUT_MS: "1000",
      LEASEHOLD_RETRY_DELAY_INITIAL_MS: "100",
      LEASEHOLD_RETRY_DELAY_MAX_MS: "1000",
      LEASEHOLD_PRESENCE_EXPIRATION_MS: String(presenceMs),
      INDEX: String(index),
      GENERATION: String(generation),
      TOKENS: tokens.join(","),
      // a restarted incarnation starts without sockets: tabs reconnect to it
      SOCKETS: generation > 0 ? "" : (socketsOf.get(index) ?? []).map((token) => `${token}=tab-${token}-0`).join(","),
      FIBERS: String(fibers),
      SEED: String(options.seed),
      ...(options.inject === undefined ? {} : { SOAK_INJECT: options.inject })
    })
    const procs: Array<Proc> = []
    const live = new Map<number, Proc>()
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        for (const proc of procs) {
          if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill("SIGKILL")
        }
        await Promise.all(procs.map((proc) => proc.exited))
      })
    )
    const launch = (index: number, generation: number) => {
      const proc = startWorker(`worker ${index}.${generation}`, env(index, generation))
      procs.push(proc)
      live.set(index, proc)
      return proc
    }

    const report = yield* Effect.promise(async () => {
      for (let i = 0; i < workerCount; i++) launch(i, 0)
      await Promise.all([...live.values()].map((proc) => proc.waitFor("ready", 60_000)))
      log("all workers ready")
      const started = Date.now()
      // --- tabs -----------------------------------------------------------------------
      const holdings = new Map<string, Array<Holding>>()
      const holding = (token: string) => holdings.get(token)?.find((held) => held.to === Number.POSITIVE_INFINITY)
      const tabDetails: Array<string> = []
      let startProblems = 0
      for (const proc of live.values()) {
        for (const event of proc.events) {
          if (event.t !== "linked") continue
          const token = String(event.token)
          // at start the store is up: a link it could not store is a problem too
          if (event.result !== token || event.notStored === true) {
            startProblems++
            tabDetails.push(`${proc.name}: tab ${token} linked at start as ${JSON.stringify(event)}`)
            continue
          }
          const held = { proc, connectionId: String(event.connectionId), start: Number(event.started) }
          holdings.set(token, [{ ...held, from: Number(event.at), to: Number.POSITIVE_INFINITY }])
        }
      }
      const connections = new Map<string, number>()
      let relinks = 0
      let relinked = 0
      let relinkFresh = 0
      let relinkNotTakenOver = 0
      let relinkLost = 0
      const moved = new Set<string>()
      /** Tabs of a killed incarnation whose re-link has not answered yet. */
      const waiting = new Set<string>()
      /** The tab of `token` reconnects to `proc` (a new socket, the same token), as a page does. */
      const relink = async (token: string, proc: Proc) => {
        relinks++
        moved.add(token)
        const n = (connections.get(token) ?? 0) + 1
        connections.set(token, n)
        const connectionId = `tab-${token}-${n}`
        proc.child.stdin!.write(`link ${token} ${connectionId}\n`)
        const event = await proc
          .waitFor("linked", 30_000, (event) => event.connectionId === connectionId)
          .catch((error: unknown) => String(error))
        waiting.delete(token)
        if (typeof event === "string") {
          relinkLost++
          tabDetails.push(`tab ${token}: no answer to its re-link: ${event}`)
          return
        }
        const what = `tab ${token}: re-linked on ${proc.name} as ${JSON.stringify(event)}`
        log(`${what}, ${Number(event.at) - Number(event.started)} ms`)
        if (event.result !== token) {
          if (event.fresh === true) relinkFresh++
          else relinkLost++
          tabDetails.push(what)
          return
        }
        // Linked during an outage: the record is judged and taken over when the store returns;
        // the records' check at the end tells whether it was.
        if (event.takenOver !== true && event.notStored !== true) {
          relinkNotTakenOver++
          tabDetails.push(what)
        } else relinked++
        const held = {
          proc,
          connectionId,
          start: Number(event.started),
          // linked during an outage: updates are expected there once its record names it
          from: event.notStored === true ? Number.POSITIVE_INFINITY : Number(event.at),
          to: Number.POSITIVE_INFINITY
        }
        holdings.get(token)!.push(held)
        if (event.notStored === true) {
          proc
            .waitFor("stored", 60_000, (stored) => stored.connectionId === connectionId)
            .then((stored) => {
              held.from = Number(stored.at)
            })
            // counted at the end (its holding never starts)
            .catch(() => log(`tab ${token}: its record did not name ${connectionId} on ${proc.name} within 60 s`))
        }
      }

      const at = (fraction: number) => started + fraction * options.seconds * 1_000 * (0.97 + 0.06 * random())
      const until = async (time: number) => {
        const wait = time - Date.now()
        if (wait > 0) await sleep(wait)
      }
      const faultCounts: Record<string, number> = {}
      /** From the start of each failover that loses writes to the SIGKILL of its primary. */
      const losingWindows: Array<{ readonly from: number; to: number }> = []
      /** The primaries this soak stopped, from the fault's start to the promotion of another. */
      const ownFailovers: Array<{ readonly port: number; readonly from: number; to: number }> = []
      // Twice a grant's and a commit's acknowledgement timeouts (1 s each) together: a
      // store that took a WAIT that timed out for an acknowledgement would acknowledge
      // modifications made there, and lose them.
      const losingMs = 4_000
      const timeline: Array<string> = []
      let faults = 0
      let lastDisturbance = started
      const fault = async (kind: string, name: string, action: () => Promise<unknown>) => {
        faults++
        faultCounts[kind] = (faultCounts[kind] ?? 0) + 1
        const begun = Date.now() - started
        log(`fault ${faults} at ${begun} ms: ${name}`)
        await action()
        const ended = Date.now()
        // every fault but a worker's SIGKILL disturbs the presence of the workers that live on
        if (kind !== "worker-kill") lastDisturbance = ended
        timeline.push(`${begun}-${ended - started} ms: ${name}`)
      }
      const run = <A>(effect: Effect.Effect<A, unknown>) => Effect.runPromise(Effect.orDie(effect))
      /** A raw command on the server that takes writes now. */
      const command = (...args: ReadonlyArray<string | number>) =>
        run(Effect.flatMap(primary, (to) => to.command(...args)))
      const generations = new Map<number, number>()
      const pauseMs = lockMs + 1_000

      /** The faults of the one server: SIGKILL and restart (it keeps what it acknowledged), SIGSTOP. */
      const serverFaults = (server: RedisServer.RedisServer): Record<string, () => Promise<void>> => ({
        "server-kill": () =>
          fault("server-kill", "SIGKILL redis-server, restart after 1 s", async () => {
            await run(server.kill)
            await sleep(1_000)
            await run(server.restart)
          }),
        "server-pause": () =>
          fault(
            "server-pause",
            `SIGSTOP redis-server for ${pauseMs} ms (longer than the lock expiration)`,
            async () => {
              await run(server.pause)
              await sleep(pauseMs)
              await run(server.resume)
            }
          )
      })
      /**
       * The faults of a Sentinel deployment: the primary SIGKILLed or SIGSTOPped until the
       * Sentinels promote a replica, or a failover that loses the primary's last writes
       * (`failoverLosing`: the replicas frozen and cut off while the workers write to the
       * primary alone for `losingMs`, then the primary SIGKILLed). After each, the old
       * primary comes back (restarted empty, or SIGCONT) as a replica of the new one, and
       * the fault ends once the deployment is stable again (two linked replicas, every
       * Sentinel agreeing).
       */
      const failoverFaults = (sentinel: RedisSentinel.RedisSentinel): Record<string, () => Promise<void>> => {
        const failover = (
          kind: string,
          name: string,
          promote: Effect.Effect<{ readonly old: RedisServer.RedisServer; readonly promoted: RedisServer.RedisServer }>
        ) =>
          fault(kind, name, async () => {
            const from = (await run(primary)).port
            const begun = Date.now()
            const own = { port: from, from: begun, to: Number.POSITIVE_INFINITY }
            ownFailovers.push(own)
            const { old, promoted } = await run(promote)
            const promotedAt = Date.now()
            own.to = promotedAt
            log(`${promoted.port} promoted in place of ${from}, ${promotedAt - begun} ms`)
            await run(sentinel.rejoin(old))
            log(`${old.port} back as a replica, stable after ${Date.now() - promotedAt} ms`)
          })
        return {
          "failover-kill": () =>
            failover(
              "failover-kill",
              "failover: SIGKILL the primary, the old one back as a replica",
              sentinel.failover("kill")
            ),
          "failover-pause": () =>
            failover(
              "failover-pause",
              "failover: SIGSTOP the primary, SIGCONT once a replica is promoted, back as a replica",
              sentinel.failover("pause")
            ),
          "failover-losing": () => {
            const window = { from: Date.now(), to: Number.POSITIVE_INFINITY }
            losingWindows.push(window)
            return failover(
              "failover-losing",
              `failover losing writes: replicas frozen and cut off, ${losingMs} ms of writes on the primary alone, SIGKILL it`,
              // the window ends when the old primary's process is gone (not when the writes'
              // time is up: it serves until the SIGKILL lands, on a loaded machine a while later);
              // a failover that fails ends it where it failed
              sentinel.failoverLosing(Effect.sleep(losingMs)).pipe(
                Effect.onExit((exit) =>
                  Effect.sync(() => {
                    window.to = Exit.isSuccess(exit) ? exit.value.killedAt : Date.now()
                  })
                )
              )
            )
          }
        }
      }

      /** Every kind of fault, each run as often as the schedule names it. */
      const kinds: Record<string, () => Promise<void>> = {
        "client-kill-normal": () =>
          fault("client-kill-normal", "CLIENT KILL TYPE normal", () =>
            run(Effect.flatMap(primary, (to) => to.clientKill("normal")))
          ),
        "client-kill-pubsub": () =>
          fault("client-kill-pubsub", "CLIENT KILL TYPE pubsub", () =>
            run(Effect.flatMap(primary, (to) => to.clientKill("pubsub")))
          ),
        ...(deployment === undefined ? serverFaults(server!) : failoverFaults(deployment)),
        "worker-kill": () => {
          const proc = live.get(victim)!
          const tabs = tokens.filter((token) => holding(token)?.proc === proc)
          // Every other one to the next incarnation (once it is up), the rest each to another
          // worker, 0.5-1.5 s after the kill (the dead worker's presence is there still, or
          // not). But not in the aftermath of the fault before: a worker whose presence has just
          // come back (after an outage of the store or of itself) cannot judge another dead
          // yet, and gives the tab a fresh token instead, by design (docs/tokens.md). Its
          // connection may come back well after the fault ends on a loaded machine: a margin of
          // two presence periods more.
          const settled = lastDisturbance + 4 * presenceMs
          const targets = tabs.map(
            (token, i) =>
              [token, i % 2 === 0 ? victim : Math.floor(random() * victim), 500 + Math.floor(random() * 1_000)] as const
          )
          return fault(
            "worker-kill",
            `SIGKILL ${proc.name} (holding leases and ${tabs.length} tabs), restart after 2 s; its tabs reconnect`,
            async () => {
              const killedAt = Date.now()
              proc.child.kill("SIGKILL")
              for (const token of tabs) {
                holding(token)!.to = killedAt
                waiting.add(token)
              }
              await proc.exited
              live.delete(victim)
              const elsewhere = Promise.all(
                targets
                  .filter(([, to]) => to !== victim)
                  .map(([token, to, after]) =>
                    until(Math.max(killedAt + after, settled)).then(() => relink(token, live.get(to)!))
                  )
              )
              await sleep(2_000)
              const generation = (generations.get(victim) ?? 0) + 1
              generations.set(victim, generation)
              const next = launch(victim, generation)
              await next.waitFor("ready", 60_000)
              log(`${next.name} ready`)
              await Promise.all([
                elsewhere,
                ...targets.filter(([, to]) => to === victim).map(([token]) => relink(token, next))
              ])
            }
          )
        },
        "worker-pause": () => {
          // a worker that holds sockets and leases freezes (a long GC pause, a frozen VM)
          const proc = live.get(Math.floor(random() * (workerCount - 1)))!
          return fault("worker-pause", `SIGSTOP ${proc.name} for ${pauseMs} ms, then SIGCONT`, async () => {
            proc.child.kill("SIGSTOP")
            await sleep(pauseMs)
            proc.child.kill("SIGCONT")
          })
        }
      }
      // spread over 5 %-76 % of the run
      for (const [i, kind] of schedule.entries()) {
        await until(at(0.05 + (0.71 * i) / Math.max(1, schedule.length - 1)))
        await kinds[kind]!()
      }
      // What a fault leaves behind by design (a registration whose reply was lost) expires
      // within a lock expiration: the workers stop once that has passed after the last one.
      await until(Math.max(started + 0.85 * options.seconds * 1_000, Date.now() + 2 * lockMs))
      const keys = makeKeys("leasehold")
      const instanceOf = (proc: Proc) => proc.events.find((event) => event.t === "ready")?.instanceId
      // Every tab's record names the socket it was linked with last (before the workers close theirs).
      let recordsWrong = 0
      for (const token of waiting) {
        relinkLost++
        tabDetails.push(`tab ${token}: never linked again after its worker was killed`)
      }
      for (const [token, held] of holdings) {
        const last = held.at(-1)
        if (last === undefined || last.from !== Number.POSITIVE_INFINITY) continue
        relinkLost++
        tabDetails.push(`tab ${token}: linked during an outage as ${last.connectionId}, its record never named it`)
      }
      for (const token of tokens) {
        const held = holding(token)
        if (held === undefined) continue
        const raw = await command("GET", keys.socket(token))
        const record = typeof raw === "string" ? (JSON.parse(raw) as Record<string, unknown>) : undefined
        if (record?.instanceId === instanceOf(held.proc) && record?.connectionId === held.connectionId) continue
        if (moved.has(token)) relinkLost++
        else recordsWrong++
        tabDetails.push(
          `tab ${token}: linked last as ${held.connectionId} on ${held.proc.name}, its record at the end: ${String(raw)}`
        )
      }
      timeline.push(`${Date.now() - started} ms: the workers are told to stop`)

      log("stopping the workers")
      for (const proc of live.values()) proc.child.stdin!.write("stop\n")
      const closing = await Promise.allSettled([...live.values()].map((proc) => proc.waitFor("closed", 90_000)))
      for (const proc of live.values()) {
        const at = proc.events.find((event) => event.t === "closed")?.at
        if (at !== undefined) timeline.push(`${Number(at) - started} ms: ${proc.name} closed`)
      }
      const seconds = (Date.now() - started) / 1_000
      const details: Array<string> = [...tabDetails]
      let staleOrUnhealthy =
        closing.filter((result) => result.status === "rejected").length + startProblems + recordsWrong
      for (const result of closing) if (result.status === "rejected") details.push(String(result.reason))
      for (const proc of live.values()) {
        const health = proc.events.find((event) => event.t === "health") as
          | { readonly buffered: number; readonly loops: ReadonlyArray<{ name: string; state: { _tag: string } }> }
          | undefined
        const notRunning = (health?.loops ?? []).filter((loop) => loop.state._tag !== "Running")
        if (health === undefined || notRunning.length > 0 || health.buffered > 0) {
          staleOrUnhealthy++
          details.push(`${proc.name}: health ${JSON.stringify(health)}`)
        }
        const stuck = proc.events.find((event) => event.t === "stuck")
        if (stuck !== undefined)
          details.push(`${proc.name}: slow to stop: ${JSON.stringify(stuck.fibers)} ${JSON.stringify(stuck.state)}`)
      }

      // --- modifications --------------------------------------------------------------
      const all = procs.flatMap((proc) => proc.events.map((event) => ({ proc, event })))
      const ok = new Set<string>()
      const ambiguous = new Set<string>()
      const clean = new Set<string>()
      let notAcknowledged = 0
      /**
       * When a time (ms since the epoch) falls in a failover that loses writes, with margins:
       * `before`, and 1 s after the SIGKILL (a worker stamps an acknowledgement when its
       * fiber resumes, on a loaded machine that long after the reply left the server).
       */
      const exposed = (at: number, before: number) =>
        losingWindows.some((window) => at >= window.from - before && at <= window.to + 1_000)
      // A `+try-failover` of a primary this soak was not stopping then is a failover the
      // Sentinels started by themselves. Its window ends at the last Sentinel's
      // `+switch-master` away from that primary: until then a worker that asks one that has
      // not switched yet is sent back to it, and it answers as a primary until demoted.
      const unplannedWindows: Array<{ readonly port: number; readonly from: number; readonly to: number }> = []
      for (const tried of sentinelEvents) {
        if (tried.event !== "+try-failover") continue
        if (ownFailovers.some((own) => own.port === tried.port && tried.at >= own.from && tried.at <= own.to)) continue
        // several Sentinels may try the same failover: one window, from the first
        if (unplannedWindows.some((window) => window.port === tried.port && tried.at <= window.to)) continue
        const switches = sentinelEvents.filter(
          (event) => event.event === "+switch-master" && event.port === tried.port && event.at >= tried.at
        )
        const first = switches[0]
        const retried =
          sentinelEvents.find(
            (event) =>
              event.event === "+try-failover" && event.port === tried.port && first !== undefined && event.at > first.at
          )?.at ?? Number.POSITIVE_INFINITY
        const learnt = switches.filter((event) => event.promoted === first?.promoted && event.at < retried)
        unplannedWindows.push({
          port: tried.port,
          from: tried.at,
          to: first === undefined ? Number.POSITIVE_INFINITY : Math.max(...learnt.map((event) => event.at))
        })
      }
      for (const window of unplannedWindows)
        timeline.push(
          `${window.from - started}-${window.to - started} ms: failover of the primary on ${window.port}, started by the Sentinels themselves`
        )
      /** As `exposed`, for the failovers the Sentinels started by themselves. */
      const inUnplanned = (at: number, before: number) =>
        unplannedWindows.some((window) => at >= window.from - before && at <= window.to + 1_000)
      const into = (at: number) => `${at - started} ms`
      /** Operations that failed with an error that promises nothing was written, with its tag. */
      const nothingWritten = new Map<string, string>()
      const excusedByError: Record<string, number> = {}
      const nothingWrittenByError: Record<string, number> = {}
      let unexpectedFailures = 0
      for (const { proc, event } of all) {
        const op = String(event.op)
        const reason = String(event.reason)
        if ((event.t === "decided" || event.t === "failed") && reason === "NotAcknowledged") notAcknowledged++
        if (event.t === "ok") ok.add(op)
        else if (event.t === "interrupted") clean.add(op)
        else if (event.t === "decided" || event.t === "failed") {
          if (nothingWrittenErrors.includes(reason)) {
            nothingWritten.set(op, reason)
            nothingWrittenByError[reason] = (nothingWrittenByError[reason] ?? 0) + 1
          } else if (unknownOutcomeErrors.includes(reason)) {
            // before its function decided, nothing of it was written: only after is its outcome unknown
            if (event.t === "failed") clean.add(op)
            else {
              ambiguous.add(op)
              excusedByError[reason] = (excusedByError[reason] ?? 0) + 1
            }
          } else {
            // an outcome no document calls unknown: a violation, whether written or not
            unexpectedFailures++
            ambiguous.add(op)
            const message = typeof event.message === "string" ? `: ${event.message.slice(0, 300)}` : ""
            details.push(`${proc.name}: ${op} on ${String(event.token)} failed with ${reason} (${event.t})${message}`)
          }
        }
      }
      // Ops of a killed incarnation that never reported (in flight when it died) may be either way.
      const killedPrefixes = Array.from({ length: generations.get(victim) ?? 0 }, (_, g) => `${victim}g${g}.`)
      const killed = (op: string) => killedPrefixes.some((prefix) => op.startsWith(prefix))
      // Who an instance id was: every incarnation reports its id when ready.
      const nameOf = (instanceId: string) =>
        procs.find((proc) => proc.events.some((event) => event.t === "ready" && event.instanceId === instanceId))
          ?.name ?? "an unknown worker"
      const closedAt = Math.max(
        ...[...live.values()].map((proc) => Number(proc.events.find((event) => event.t === "closed")?.at ?? 0))
      )
      /** Queues left whose entries have all passed their deadline (not a violation: reported). */
      const expiredLeft: Array<string> = []
      /** The lock, pending grant or queue left of a token: the key, its TTL, and whose id it holds. */
      const leftOver = async (token: string) => {
        const found: Array<string> = []
        const since = `${Date.now() - closedAt} ms after the last worker closed`
        const lockKey = keys.lock(token)
        const lockId = await command("GET", lockKey)
        if (typeof lockId === "string") {
          const ttl = await command("PTTL", lockKey)
          // `?<worker>` is a grant pending for that worker; a lock id is `<worker>:<n>`
          const pending = lockId.startsWith("?")
          const owner = nameOf(pending ? lockId.slice(1) : lockId.slice(0, lockId.lastIndexOf(":")))
          found.push(
            `${pending ? "pending grant" : "lock"} left: ${lockKey} = ${lockId} (${owner}), PTTL ${String(ttl)} ms, ${since}`
          )
        }
        const deadlinesKey = keys.queueDeadlines(token)
        // Each entry has a deadline of its own (the server's clock): one past it no longer
        // waits, and counts for nobody. A live one is a queue entry left behind.
        const scored = await command("ZRANGE", deadlinesKey, 0, -1, "WITHSCORES")
        if (Array.isArray(scored) && scored.length > 0) {
          const [seconds, micros] = (await command("TIME")) as [string, string]
          const now = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000)
          const ttl = await command("PTTL", keys.queue(token))
          const who: Array<string> = []
          let live = 0
          for (let i = 0; i < scored.length; i += 2) {
            const id = String(scored[i])
            const deadline = Number(scored[i + 1])
            if (deadline > now) live++
            who.push(
              `${id} (${nameOf(id)}, queued ${deadline - lockMs - started} ms into the run, deadline in ${deadline - now} ms)`
            )
          }
          const what = `${keys.queue(token)} = {${who.join(", ")}}, PTTL ${String(ttl)} ms, ${since}`
          if (live > 0) found.push(`queue entry left: ${what}`)
          else expiredLeft.push(`${token}: only expired entries: ${what}`)
        }
        return found
      }
      let lost = 0
      let lostInLosing = 0
      let lostInUnplanned = 0
      let phantom = 0
      let fenceRegressions = 0
      let nothingWrittenViolations = 0
      let fenceReuse = 0
      let fenceReuseInLosing = 0
      let fenceReuseInUnplanned = 0
      let realTimeOrder = 0
      let realTimeOrderInLosing = 0
      let realTimeOrderInUnplanned = 0
      excusedByError.killed = 0
      /** When each operation was answered (a decided failure too): where its write falls in time. */
      const answeredAt = new Map<string, number>()
      for (const { event } of all)
        if (event.at !== undefined && event.op !== undefined) answeredAt.set(String(event.op), Number(event.at))
      // With no replica acknowledging, a failover that loses writes, or one the Sentinels
      // started, may give a fence or a counter value out again: apart, not a violation.
      const losable = (at: number | undefined): "losing" | "unplanned" | undefined =>
        minReplicasAck !== 0 || at === undefined
          ? undefined
          : exposed(at, 1_000)
            ? "losing"
            : inUnplanned(at, 1_000)
              ? "unplanned"
              : undefined
      for (const token of tokens) {
        const raw = await command("GET", keys.slice(token, "log"))
        const value =
          typeof raw === "string" ? (JSON.parse(raw) as { n: number; ops: Array<string> }) : { n: 0, ops: [] }
        const inLog = new Map<string, number>()
        let lastFence = Number.NEGATIVE_INFINITY
        /** The first write under each fence: one grant is one holder's, one incarnation's. */
        const holderOf = new Map<number, string>()
        for (const entry of value.ops) {
          const at = entry.lastIndexOf("@")
          const op = entry.slice(0, at)
          const fence = Number(entry.slice(at + 1))
          inLog.set(op, (inLog.get(op) ?? 0) + 1)
          // Each write read the one before it: its grant must be that one's or a later one.
          if (!(fence >= lastFence) || fence < 1) {
            fenceRegressions++
            details.push(`${token}: ${op} written under fence ${fence} after a write under fence ${lastFence}`)
          }
          lastFence = fence
          const first = holderOf.get(fence)
          if (first === undefined) holderOf.set(fence, op)
          else if (incarnationOf(first) !== incarnationOf(op)) {
            const window = losable(answeredAt.get(op)) ?? losable(answeredAt.get(first))
            if (window === "losing") fenceReuseInLosing++
            else if (window === "unplanned") fenceReuseInUnplanned++
            else {
              fenceReuse++
              details.push(`${token}: ${op} written under fence ${fence}, already ${first}'s (another incarnation)`)
            }
          }
        }
        if (value.n !== value.ops.length) {
          phantom++
          details.push(`${token}: n ${value.n} but ${value.ops.length} entries`)
        }
        for (const [op, times] of inLog) {
          if (times > 1) {
            phantom++
            details.push(`${token}: ${op} applied ${times} times`)
          } else if (nothingWritten.has(op)) {
            nothingWrittenViolations++
            details.push(`${token}: ${op} failed with ${nothingWritten.get(op)} (nothing written) but was applied`)
          } else if (clean.has(op)) {
            phantom++
            details.push(`${token}: ${op} reported failure but was applied`)
          } else if (!ok.has(op) && !ambiguous.has(op)) {
            if (killed(op)) excusedByError.killed++
            else {
              phantom++
              details.push(`${token}: ${op} applied but never reported`)
            }
          }
        }
        // Real time: an increment answered before another was asked for has the smaller value
        // (the counter's results are unique, so this is its linearizability).
        const answered = all
          .filter(({ event }) => event.t === "ok" && event.token === token)
          .map(({ event }) => ({
            op: String(event.op),
            n: Number(event.n),
            invoked: Number(event.invoked),
            at: Number(event.at)
          }))
        const byAnswer = [...answered].sort((a, b) => a.at - b.at)
        let before = 0
        let highest: (typeof answered)[number] | undefined
        for (const later of [...answered].sort((a, b) => a.invoked - b.invoked)) {
          while (before < byAnswer.length && byAnswer[before]!.at < later.invoked) {
            const earlier = byAnswer[before++]!
            if (highest === undefined || earlier.n > highest.n) highest = earlier
          }
          if (highest === undefined || highest.n < later.n) continue
          const window = losable(highest.at) ?? losable(later.at)
          if (window === "losing") realTimeOrderInLosing++
          else if (window === "unplanned") realTimeOrderInUnplanned++
          else {
            realTimeOrder++
            if (realTimeOrder <= 20)
              details.push(
                `${token}: ${later.op} asked for at ${into(later.invoked)} got ${later.n}, but ${highest.op} got ${highest.n} at ${into(highest.at)}`
              )
          }
        }
        for (const { event } of all) {
          if (event.t === "ok" && event.token === token && !inLog.has(String(event.op))) {
            lost++
            const at = Number(event.at)
            // up to 1 s before the replicas froze: what the primary acknowledged then may not
            // have reached them yet (replication is asynchronous; a loaded machine lags)
            const inLosing = exposed(at, 1_000)
            const unplanned = !inLosing && inUnplanned(at, 1_000)
            if (inLosing) lostInLosing++
            if (unplanned) lostInUnplanned++
            const during = inLosing
              ? " (acknowledged during a failover that loses writes)"
              : unplanned
                ? " (acknowledged during a failover the Sentinels started themselves)"
                : ""
            details.push(`${token}: ${String(event.op)} acknowledged at ${into(at)} but missing${during}`)
          }
        }
        // nothing stale: no lock, no pending grant, no live queue entry
        for (const left of await leftOver(token)) {
          staleOrUnhealthy++
          details.push(`${token}: ${left}`)
        }
      }

      // --- deliveries -----------------------------------------------------------------
      // A socket reported lost ends its holding there (and is a violation: one tab per token).
      let socketsLost = 0
      for (const { proc, event } of all) {
        if (event.t !== "lost") continue
        socketsLost++
        details.push(`${proc.name}: lost the socket of ${String(event.token)}: ${JSON.stringify(event)}`)
        for (const held of holdings.get(String(event.token)) ?? []) {
          if (held.proc === proc && held.connectionId === event.connectionId)
            held.to = Math.min(held.to, Number(event.at))
        }
      }
      // Expected: every update whose send began while its tab was linked on a worker alive at
      // the end, and reported it appended or delivered (or, from a sender alive at the end,
      // buffered), delivered there. One sent while the tab was on a worker that was killed,
      // or between the kill and the tab's re-link, went to the dead worker's mailbox, which
      // nobody reads: it may be lost (not expected), but never doubled nor misdirected.
      const survivors = new Set([...live.values()])
      const holderAt = (token: string, at: number) =>
        holdings.get(token)?.find((held) => held.from <= at && at < held.to)?.proc
      const expected = new Map<
        string,
        Array<{ readonly seq: number; readonly holder: Proc; readonly exposed: boolean }>
      >()
      const delivered = new Map<string, Array<{ readonly seq: number; readonly proc: Proc; readonly at: number }>>()
      let sends = 0
      let misdirected = 0
      for (const { proc, event } of all) {
        if (event.t === "sent") {
          sends++
          const outcome = String(event.outcome)
          const counts =
            outcome === "sent" || outcome === "delivered" || (outcome === "buffered" && survivors.has(proc))
          const holder = holderAt(String(event.token), Number(event.at))
          if (!counts || holder === undefined || !survivors.has(holder)) continue
          const key = `${event.token}|${proc.name}|${event.fiber}`
          // An append begun up to a command timeout before the cut (or the Sentinels' own
          // failover) may land after it; a buffered update is appended later, once its store
          // is back (within seconds)
          const before = outcome === "buffered" ? 5_000 : 1_000
          const appendedUnreplicated =
            outcome !== "delivered" && (exposed(Number(event.at), before) || inUnplanned(Number(event.at), before))
          expected.set(key, [
            ...(expected.get(key) ?? []),
            { seq: Number(event.seq), holder, exposed: appendedUnreplicated }
          ])
        } else if (event.t === "dlv") {
          const token = String(event.token)
          const at = Number(event.at)
          // only a worker linking or holding the tab's socket delivers to it
          const holds = (holdings.get(token) ?? []).some(
            (held) => held.proc === proc && held.start <= at && at <= held.to
          )
          if (!holds) {
            misdirected++
            if (misdirected <= 20) details.push(`${proc.name}: delivered ${JSON.stringify(event)} without the socket`)
          }
          const key = `${token}|${event.sender}|${event.fiber}`
          delivered.set(key, [...(delivered.get(key) ?? []), { seq: Number(event.seq), proc, at }])
        }
      }
      let lostDeliveries = 0
      let exposedSends = 0
      let exposedSendsLost = 0
      let duplicates = 0
      let outOfOrder = 0
      let deliveries = 0
      for (const [key, list] of delivered) {
        // in time order: a tab that moved was delivered to by one worker, then by another
        const seqs = [...list].sort((a, b) => a.at - b.at).map((delivery) => delivery.seq)
        deliveries += seqs.length
        const unique = new Set(seqs)
        duplicates += seqs.length - unique.size
        for (let i = 1; i < seqs.length; i++) if (seqs[i]! <= seqs[i - 1]!) outOfOrder++
        if (seqs.length !== unique.size) details.push(`${key}: delivered twice`)
      }
      for (const [key, updates] of expected) {
        const got = delivered.get(key) ?? []
        for (const { seq, holder, exposed } of updates) {
          if (exposed) exposedSends++
          if (!got.some((delivery) => delivery.seq === seq && delivery.proc === holder)) {
            if (exposed) {
              exposedSendsLost++
              continue
            }
            lostDeliveries++
            const elsewhere = got.filter((delivery) => delivery.seq === seq).map((delivery) => delivery.proc.name)
            if (lostDeliveries <= 20)
              details.push(
                `${key}: update ${seq} not delivered on ${holder.name}${elsewhere.length > 0 ? ` (on ${elsewhere.join(", ")})` : ""}`
              )
          }
        }
      }

      // --- records of live workers ------------------------------------------------------
      // (closed workers removed theirs; every record left must be of the killed incarnation)
      const records = await command("KEYS", "leasehold:{*}:socket")
      const killedIds = new Set(
        procs
          .filter((proc) => !survivors.has(proc))
          .map((proc) => String(proc.events.find((event) => event.t === "ready")?.instanceId))
      )
      for (const key of Array.isArray(records) ? records : []) {
        const raw = await command("GET", String(key))
        const record = typeof raw === "string" ? (JSON.parse(raw) as { instanceId: string }) : undefined
        if (record !== undefined && !killedIds.has(record.instanceId)) {
          staleOrUnhealthy++
          details.push(`${String(key)}: record of a worker that closed`)
        }
      }

      const operations = all.filter((e) =>
        ["ok", "decided", "failed", "interrupted", "sent"].includes(e.event.t)
      ).length
      const violations =
        lost +
        phantom +
        fenceRegressions +
        nothingWrittenViolations +
        fenceReuse +
        realTimeOrder +
        unexpectedFailures +
        lostDeliveries +
        duplicates +
        outOfOrder +
        misdirected +
        relinkFresh +
        relinkNotTakenOver +
        relinkLost +
        socketsLost +
        staleOrUnhealthy
      return {
        seed: options.seed,
        seconds: Math.round(seconds),
        store: deployment === undefined ? "server" : "sentinel",
        min_replicas_ack: minReplicasAck,
        faults,
        failovers: Object.entries(faultCounts)
          .filter(([kind]) => kind.startsWith("failover-"))
          .reduce((sum, [, count]) => sum + count, 0),
        fault_counts: faultCounts,
        operations,
        successes: ok.size,
        ambiguous: ambiguous.size,
        not_acknowledged: notAcknowledged,
        sends,
        deliveries,
        lost_updates: lost,
        lost_updates_in_losing_failovers: lostInLosing,
        failovers_unplanned: unplannedWindows.length,
        lost_updates_in_unplanned_failovers: lostInUnplanned,
        phantom_or_doubled: phantom,
        fence_regressions: fenceRegressions,
        excused_by_error: excusedByError,
        nothing_written_by_error: nothingWrittenByError,
        nothing_written_violations: nothingWrittenViolations,
        unexpected_failures: unexpectedFailures,
        fence_reuse_violations: fenceReuse,
        fence_reuse_in_losing_failovers: fenceReuseInLosing,
        fence_reuse_in_unplanned_failovers: fenceReuseInUnplanned,
        real_time_order_violations: realTimeOrder,
        real_time_order_in_losing_failovers: realTimeOrderInLosing,
        real_time_order_in_unplanned_failovers: realTimeOrderInUnplanned,
        lost_deliveries: lostDeliveries,
        exposed_sends: exposedSends,
        exposed_sends_lost: exposedSendsLost,
        duplicate_deliveries: duplicates,
        out_of_order_deliveries: outOfOrder,
        misdirected_deliveries: misdirected,
        relinks,
        relinked,
        relink_fresh: relinkFresh,
        relink_not_taken_over: relinkNotTakenOver,
        relink_lost: relinkLost,
        sockets_lost: socketsLost,
        stale_or_unhealthy: staleOrUnhealthy,
        violations,
        details: details.slice(0, 50),
        fault_timeline: timeline,
        notes: expiredLeft
      } satisfies Report
    })
    return report
  })
