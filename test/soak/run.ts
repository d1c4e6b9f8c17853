/**
 * The chaos soak: W worker processes (`test/soak/worker.ts`) on one redis-server, oplock on,
 * modifying and sending to a set of tokens while faults are injected in an order drawn from
 * the seed: SIGKILL and restart of the server, SIGSTOP/SIGCONT of it for longer than the lock
 * expiration, CLIENT KILL of the command and of the subscriber connections, SIGKILL of one
 * worker while it holds leases (restarted after, three times), SIGSTOP of a worker that holds
 * sockets and leases for longer than the lock expiration (a long GC pause, a frozen VM), then
 * SIGCONT, and random interruptions of modifications inside the workers. Then every outcome
 * is checked against what the store holds: only the operations in flight in a killed
 * incarnation (never reported) may have gone either way.
 *
 * The server runs with `appendonly yes` and `appendfsync always`, so that a SIGKILLed server
 * keeps every write it acknowledged (without persistence a restart empties it, and no count
 * can survive that). Sockets are held by the workers that are never killed (they may be paused).
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { makeKeys } from "../../src/internal/keys.js"
import * as RedisServer from "../support/RedisServer.js"

export interface Options {
  readonly seconds: number
  readonly seed: number
  readonly workers?: number
  readonly tokens?: number
  readonly fibers?: number
  /** Progress lines (faults as they happen). */
  readonly log?: (line: string) => void
}

export interface Report {
  readonly seconds: number
  readonly faults: number
  /** The faults by kind. */
  readonly fault_counts: Readonly<Record<string, number>>
  /** Modifications and sends that reported an outcome. */
  readonly operations: number
  readonly successes: number
  readonly ambiguous: number
  readonly sends: number
  readonly deliveries: number
  /** Successful modifications missing from the stored logs. */
  readonly lost_updates: number
  /** Log entries of modifications that reported failure or interruption, or that appear twice. */
  readonly phantom_or_doubled: number
  /** Writes whose grant's fencing number is below that of the write they read (interleaved holders). */
  readonly fence_regressions: number
  readonly lost_deliveries: number
  readonly duplicate_deliveries: number
  readonly out_of_order_deliveries: number
  /** Locks, pending grants or queue entries left, records of live workers missing, loops not running, workers that did not close. */
  readonly stale_or_unhealthy: number
  readonly violations: number
  readonly details: ReadonlyArray<string>
  /** When each fault began and ended, and when each worker was told to stop and closed (ms into the run). */
  readonly fault_timeline: ReadonlyArray<string>
  /** What is left but allowed: queues whose every entry has passed its deadline. */
  readonly notes: ReadonlyArray<string>
}

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
  readonly waitFor: (t: string, ms: number) => Promise<Event>
}

const startWorker = (name: string, env: Record<string, string>): Proc => {
  const child = spawn(
    process.execPath,
    [path.join(root, "node_modules/vite-node/vite-node.mjs"), "test/soak/worker.ts"],
    {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ["pipe", "pipe", "pipe"]
    }
  )
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
  const waitFor = (t: string, ms: number) =>
    new Promise<Event>((resolve, reject) => {
      const check = () => {
        const found = events.find((event) => event.t === t)
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export const soak = (options: Options): Effect.Effect<Report, never, Scope.Scope> =>
  Effect.gen(function* () {
    const workerCount = options.workers ?? 4
    const tokenCount = options.tokens ?? 16
    const fibers = options.fibers ?? 4
    const log = options.log ?? (() => undefined)
    const random = seeded(options.seed)
    const lockMs = 2_000
    const server = yield* RedisServer.start({ extraArgs: ["--appendonly", "yes", "--appendfsync", "always"] })
    const tokens = Array.from({ length: tokenCount }, (_, i) => `soak-${i}`)
    // Sockets on the workers that are never killed (all but the last).
    const socketsOf = new Map<number, Array<string>>()
    for (const token of tokens) {
      const owner = Math.floor(random() * (workerCount - 1))
      socketsOf.set(owner, [...(socketsOf.get(owner) ?? []), token])
    }
    const env = (index: number, generation: number): Record<string, string> => ({
      LEASEHOLD_REDIS_URL: server.url,
      LEASEHOLD_OPLOCK: "true",
      LEASEHOLD_LOCK_EXPIRATION_MS: String(lockMs),
      LEASEHOLD_LOCK_WARNING_THRESHOLD_MS: "1500",
      LEASEHOLD_COMMAND_TIMEOUT_MS: "500",
      LEASEHOLD_CONNECT_TIMEOUT_MS: "1000",
      LEASEHOLD_RETRY_DELAY_INITIAL_MS: "100",
      LEASEHOLD_RETRY_DELAY_MAX_MS: "1000",
      INDEX: String(index),
      GENERATION: String(generation),
      TOKENS: tokens.join(","),
      SOCKETS: (socketsOf.get(index) ?? []).join(","),
      FIBERS: String(fibers),
      SEED: String(options.seed)
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
      const at = (fraction: number) => started + fraction * options.seconds * 1_000 * (0.97 + 0.06 * random())
      const until = async (time: number) => {
        const wait = time - Date.now()
        if (wait > 0) await sleep(wait)
      }
      const faultCounts: Record<string, number> = {}
      const timeline: Array<string> = []
      let faults = 0
      const fault = async (kind: string, name: string, action: () => Promise<unknown>) => {
        faults++
        faultCounts[kind] = (faultCounts[kind] ?? 0) + 1
        const begun = Date.now() - started
        log(`fault ${faults} at ${begun} ms: ${name}`)
        await action()
        timeline.push(`${begun}-${Date.now() - started} ms: ${name}`)
      }
      const run = <A>(effect: Effect.Effect<A, unknown>) => Effect.runPromise(Effect.orDie(effect))
      const victim = workerCount - 1
      const generations = new Map<number, number>()
      const pauseMs = lockMs + 1_000

      /** Every kind of fault, each run as often as the schedule names it. */
      const kinds: Record<string, () => Promise<void>> = {
        "client-kill-normal": () =>
          fault("client-kill-normal", "CLIENT KILL TYPE normal", () => run(server.clientKill("normal"))),
        "client-kill-pubsub": () =>
          fault("client-kill-pubsub", "CLIENT KILL TYPE pubsub", () => run(server.clientKill("pubsub"))),
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
          ),
        "worker-kill": () => {
          const proc = live.get(victim)!
          return fault("worker-kill", `SIGKILL ${proc.name} (holding leases), restart after 2 s`, async () => {
            proc.child.kill("SIGKILL")
            await proc.exited
            live.delete(victim)
            await sleep(2_000)
            const generation = (generations.get(victim) ?? 0) + 1
            generations.set(victim, generation)
            await launch(victim, generation).waitFor("ready", 60_000)
          })
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
      // Thirteen faults, every kind twice (the worker SIGKILL three times), in an
      // order drawn from the seed, spread over 5 %-76 % of the run.
      const schedule = [...Object.keys(kinds), ...Object.keys(kinds), "worker-kill"]
      for (let i = schedule.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1))
        ;[schedule[i], schedule[j]] = [schedule[j]!, schedule[i]!]
      }
      for (const [i, kind] of schedule.entries()) {
        await until(at(0.05 + (0.71 * i) / (schedule.length - 1)))
        await kinds[kind]!()
      }
      // What a fault leaves behind by design (a registration whose reply was lost) expires
      // within a lock expiration: the workers stop once that has passed after the last one.
      await until(Math.max(started + 0.85 * options.seconds * 1_000, Date.now() + 2 * lockMs))
      timeline.push(`${Date.now() - started} ms: the workers are told to stop`)

      log("stopping the workers")
      for (const proc of live.values()) proc.child.stdin!.write("stop\n")
      const closing = await Promise.allSettled([...live.values()].map((proc) => proc.waitFor("closed", 90_000)))
      for (const proc of live.values()) {
        const at = proc.events.find((event) => event.t === "closed")?.at
        if (at !== undefined) timeline.push(`${Number(at) - started} ms: ${proc.name} closed`)
      }
      const seconds = (Date.now() - started) / 1_000
      const details: Array<string> = []
      let staleOrUnhealthy = closing.filter((result) => result.status === "rejected").length
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
      for (const { event } of all) {
        const op = String(event.op)
        if (event.t === "ok") ok.add(op)
        else if (event.t === "ambiguous") ambiguous.add(op)
        else if (event.t === "failed" || event.t === "interrupted") clean.add(op)
      }
      // Ops of a killed incarnation that never reported (in flight when it died) may be either way.
      const killedPrefixes = Array.from({ length: generations.get(victim) ?? 0 }, (_, g) => `${victim}g${g}.`)
      const killed = (op: string) => killedPrefixes.some((prefix) => op.startsWith(prefix))
      const keys = makeKeys("leasehold")
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
        const lockId = await run(server.command("GET", lockKey))
        if (typeof lockId === "string") {
          const ttl = await run(server.command("PTTL", lockKey))
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
        const scored = await run(server.command("ZRANGE", deadlinesKey, 0, -1, "WITHSCORES"))
        if (Array.isArray(scored) && scored.length > 0) {
          const [seconds, micros] = (await run(server.command("TIME"))) as [string, string]
          const now = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000)
          const ttl = await run(server.command("PTTL", keys.queue(token)))
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
      let phantom = 0
      let fenceRegressions = 0
      for (const token of tokens) {
        const raw = await run(server.command("GET", keys.slice(token, "log")))
        const value =
          typeof raw === "string" ? (JSON.parse(raw) as { n: number; ops: Array<string> }) : { n: 0, ops: [] }
        const inLog = new Map<string, number>()
        let lastFence = Number.NEGATIVE_INFINITY
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
        }
        if (value.n !== value.ops.length) {
          phantom++
          details.push(`${token}: n ${value.n} but ${value.ops.length} entries`)
        }
        for (const [op, times] of inLog) {
          if (times > 1) {
            phantom++
            details.push(`${token}: ${op} applied ${times} times`)
          } else if (clean.has(op)) {
            phantom++
            details.push(`${token}: ${op} reported failure but was applied`)
          } else if (!ok.has(op) && !ambiguous.has(op) && !killed(op)) {
            phantom++
            details.push(`${token}: ${op} applied but never reported`)
          }
        }
        for (const { event } of all) {
          if (event.t === "ok" && event.token === token && !inLog.has(String(event.op))) {
            lost++
            details.push(`${token}: ${String(event.op)} acknowledged but missing`)
          }
        }
        // nothing stale: no lock, no pending grant, no live queue entry
        for (const left of await leftOver(token)) {
          staleOrUnhealthy++
          details.push(`${token}: ${left}`)
        }
      }

      // --- deliveries -----------------------------------------------------------------
      // Expected: every update whose send reported it appended or delivered, and, from a
      // sender alive at the end, every one it buffered.
      const survivors = new Set([...live.values()])
      const expected = new Map<string, Array<number>>()
      const delivered = new Map<string, Array<number>>()
      let sends = 0
      for (const { proc, event } of all) {
        if (event.t === "sent") {
          sends++
          const outcome = String(event.outcome)
          const counts =
            outcome === "sent" || outcome === "delivered" || (outcome === "buffered" && survivors.has(proc))
          if (!counts) continue
          const key = `${event.token}|${proc.name}|${event.fiber}`
          expected.set(key, [...(expected.get(key) ?? []), Number(event.seq)])
        } else if (event.t === "dlv") {
          const key = `${event.token}|${event.sender}|${event.fiber}`
          delivered.set(key, [...(delivered.get(key) ?? []), Number(event.seq)])
        }
      }
      let lostDeliveries = 0
      let duplicates = 0
      let outOfOrder = 0
      let deliveries = 0
      for (const [key, seqs] of delivered) {
        deliveries += seqs.length
        const unique = new Set(seqs)
        duplicates += seqs.length - unique.size
        for (let i = 1; i < seqs.length; i++) if (seqs[i]! <= seqs[i - 1]!) outOfOrder++
        if (seqs.length !== unique.size) details.push(`${key}: delivered twice`)
      }
      for (const [key, seqs] of expected) {
        const got = new Set(delivered.get(key) ?? [])
        for (const seq of seqs) {
          if (!got.has(seq)) {
            lostDeliveries++
            if (lostDeliveries <= 20) details.push(`${key}: update ${seq} not delivered`)
          }
        }
      }

      // --- records of live workers ------------------------------------------------------
      // (closed workers removed theirs; every record left must be of the killed incarnation)
      const records = await run(server.command("KEYS", "leasehold:{*}:socket"))
      const killedIds = new Set(
        procs
          .filter((proc) => !survivors.has(proc))
          .map((proc) => String(proc.events.find((event) => event.t === "ready")?.instanceId))
      )
      for (const key of Array.isArray(records) ? records : []) {
        const raw = await run(server.command("GET", String(key)))
        const record = typeof raw === "string" ? (JSON.parse(raw) as { instanceId: string }) : undefined
        if (record !== undefined && !killedIds.has(record.instanceId)) {
          staleOrUnhealthy++
          details.push(`${String(key)}: record of a worker that closed`)
        }
      }

      const operations = all.filter((e) =>
        ["ok", "ambiguous", "failed", "interrupted", "sent"].includes(e.event.t)
      ).length
      const violations = lost + phantom + fenceRegressions + lostDeliveries + duplicates + outOfOrder + staleOrUnhealthy
      return {
        seconds: Math.round(seconds),
        faults,
        fault_counts: faultCounts,
        operations,
        successes: ok.size,
        ambiguous: ambiguous.size,
        sends,
        deliveries,
        lost_updates: lost,
        phantom_or_doubled: phantom,
        fence_regressions: fenceRegressions,
        lost_deliveries: lostDeliveries,
        duplicate_deliveries: duplicates,
        out_of_order_deliveries: outOfOrder,
        stale_or_unhealthy: staleOrUnhealthy,
        violations,
        details: details.slice(0, 50),
        fault_timeline: timeline,
        notes: expiredLeft
      } satisfies Report
    })
    return report
  })
