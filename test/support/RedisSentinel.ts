/**
 * Test harness: a primary, two replicas and three Sentinels on free loopback ports, as
 * production runs Redis behind Sentinel. Each process is a `RedisServer` (its own temp
 * directory, its pid recorded in the run directory and reaped like any single server); a
 * Sentinel is the same `redis-server` binary with `--sentinel` and a configuration file
 * of its own, with short timings so that a failover takes a few seconds:
 * `down-after-milliseconds` 1000 (a primary that answers nothing for 1 s is down),
 * `failover-timeout` 4000, a quorum of 2.
 *
 * ```ts
 * const sentinel = yield* RedisSentinel.start()
 * const { old, promoted } = yield* sentinel.failover("kill") // SIGKILL, wait for the promotion
 * yield* sentinel.rejoin(old)                                // back, as a replica of `promoted`
 * ```
 */
import { setTimeout as sleep } from "node:timers/promises"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import { untilReal } from "./poll.js"
import * as RedisServer from "./RedisServer.js"

/** The master name the Sentinels monitor. */
export const MASTER_NAME = "leasehold"

/** How long a promotion, or a return to a stable state, may take (a loaded 2-core machine). */
const STABLE_TIMEOUT_MS = 60_000

/** A running Sentinel deployment owned by a test. */
export interface RedisSentinel {
  readonly name: string
  /** The data servers, primary and replicas (the roles change with failovers). */
  readonly servers: ReadonlyArray<RedisServer.RedisServer>
  readonly sentinels: ReadonlyArray<RedisServer.RedisServer>
  /** `127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>`: the Sentinels, as `LEASEHOLD_REDIS_SENTINELS` lists them. */
  readonly addresses: string
  /** The primary the Sentinels name now (`SENTINEL get-master-addr-by-name`, asked of the first that answers). */
  readonly primary: Effect.Effect<RedisServer.RedisServer>
  /** The data servers that are replicas of the current primary. */
  readonly replicas: Effect.Effect<ReadonlyArray<RedisServer.RedisServer>>
  /**
   * Stop the primary (`kill`: SIGKILL; `pause`: SIGSTOP, it keeps its sockets and answers
   * nothing) and wait until every Sentinel names another server, that server is a primary
   * and the other replica follows it. The old primary stays down (or frozen) until `rejoin`.
   */
  readonly failover: (
    how: "kill" | "pause"
  ) => Effect.Effect<{ readonly old: RedisServer.RedisServer; readonly promoted: RedisServer.RedisServer }>
  /**
   * A failover that loses writes, as asynchronous replication may: freeze both replicas
   * (SIGSTOP) and cut their links to the primary, run `writes` (on the primary only),
   * SIGKILL the primary, thaw the replicas, and wait for the promotion of one of them,
   * which never had those writes. `killedAt` is when the old primary was gone
   * (`Date.now()` once its process exited): nothing it acknowledged came later.
   */
  readonly failoverLosing: <A, E, R>(
    writes: Effect.Effect<A, E, R>
  ) => Effect.Effect<
    {
      readonly old: RedisServer.RedisServer
      readonly promoted: RedisServer.RedisServer
      readonly value: A
      readonly killedAt: number
    },
    E,
    R
  >
  /**
   * A failover to the replica `chosen`: wait until every Sentinel sees each other replica
   * down (they must be frozen by the caller: a replica that does not answer is never
   * promoted), SIGKILL the primary, thaw `chosen` (it may be frozen: it is thawed only once
   * the primary is gone, so it takes nothing more from it), and wait until every Sentinel
   * names it and it is a primary. Then thaw the other replicas, point them at it and wait
   * until they follow it. The old primary stays down until `rejoin`.
   */
  readonly failoverTo: (
    chosen: RedisServer.RedisServer
  ) => Effect.Effect<{ readonly old: RedisServer.RedisServer; readonly promoted: RedisServer.RedisServer }>
  /** Whether `server` is a replica linked to the current primary. */
  readonly linked: (server: RedisServer.RedisServer) => Effect.Effect<boolean>
  /** The number of clients of `server` blocked in a `WAIT` (for replicas to acknowledge). */
  readonly blockedInWait: (server: RedisServer.RedisServer) => Effect.Effect<number>
  /**
   * Bring a former primary back (restart after a kill, SIGCONT after a pause) as a replica
   * of the current primary, and wait until the deployment is stable again.
   */
  readonly rejoin: (old: RedisServer.RedisServer) => Effect.Effect<void>
  /**
   * Every Sentinel names the same primary, sees two replicas and two other Sentinels, none
   * of them down, and both replicas are linked to the primary.
   */
  readonly awaitStable: Effect.Effect<void>
  /** Wait until both replicas have every write the primary has made so far. */
  readonly awaitReplicated: Effect.Effect<void>
  /** SIGKILL every data server: no primary to promote, the whole deployment is down. */
  readonly killAll: Effect.Effect<void>
  /**
   * Start every stopped data server again (empty: no persistence), the one the Sentinels
   * name as the primary and the others as its replicas, and wait until stable.
   */
  readonly restartAll: Effect.Effect<void>
  /** SIGSTOP every data server (the replicas first: no promotion can start meanwhile). */
  readonly pauseAll: Effect.Effect<void>
  /** SIGCONT every data server, the primary first. */
  readonly resumeAll: Effect.Effect<void>
}

/** A flat `[field, value, ...]` reply as a record. */
const record = (reply: RedisServer.Reply): Record<string, string> => {
  const out: Record<string, string> = {}
  if (!Array.isArray(reply)) return out
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1])
  return out
}

const records = (reply: RedisServer.Reply): ReadonlyArray<Record<string, string>> =>
  Array.isArray(reply) ? reply.map(record) : []

/** `wait`, its death telling the servers' logs as well. */
const withLogs = (wait: Effect.Effect<void>, logs: Effect.Effect<string>): Effect.Effect<void> =>
  Effect.catchDefect(wait, (defect) =>
    Effect.flatMap(logs, (text) => Effect.die(`${defect instanceof Error ? defect.message : String(defect)}\n${text}`))
  )

const sentinelConfig = (primaryPort: number, password: string | undefined) =>
  [
    `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${primaryPort} 2`,
    ...(password === undefined ? [] : [`sentinel auth-pass ${MASTER_NAME} ${password}`]),
    `sentinel down-after-milliseconds ${MASTER_NAME} 1000`,
    `sentinel failover-timeout ${MASTER_NAME} 4000`,
    `sentinel parallel-syncs ${MASTER_NAME} 2`,
    ""
  ].join("\n")

/** Options of `start`. */
export interface StartOptions {
  /**
   * Every process serves TLS only with this certificate and key (see `RedisServer.start`):
   * the replicas reach the primary, and the Sentinels the servers and each other, with TLS.
   */
  readonly tls?: { readonly cert: string; readonly key: string }
  /**
   * The data servers' `requirepass` and `masterauth`, and the Sentinels' `auth-pass`; the
   * Sentinels themselves have none.
   */
  readonly password?: string
}

/**
 * Start a primary, two replicas and three Sentinels, and wait until the Sentinels know
 * each other and the replicas. Every process is SIGKILLed and its directory removed when
 * the scope closes.
 */
export const start = (options: StartOptions = {}): Effect.Effect<RedisSentinel, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { tls, password } = options
    const data = { ...(tls === undefined ? {} : { tls }), ...(password === undefined ? {} : { password }) }
    const first = yield* RedisServer.start(data)
    const followers = yield* Effect.forEach(
      [0, 1],
      () => RedisServer.start({ ...data, extraArgs: ["--replicaof", "127.0.0.1", String(first.port)] }),
      { concurrency: "unbounded" }
    )
    const servers = [first, ...followers]
    const sentinels = yield* Effect.forEach(
      [0, 1, 2],
      () =>
        RedisServer.start({
          ...(tls === undefined ? {} : { tls }),
          configFile: sentinelConfig(first.port, password),
          extraArgs: ["--sentinel"]
        }),
      { concurrency: "unbounded" }
    )
    const byPort = new Map(servers.map((server) => [server.port, server]))
    const logs = Effect.map(
      Effect.forEach([...servers, ...sentinels], (node) => node.logs),
      (all) => all.join("\n")
    )
    const ask = (sentinel: RedisServer.RedisServer, ...args: ReadonlyArray<string>) =>
      Effect.option(sentinel.commandWithTimeout(1_000, "SENTINEL", ...args, MASTER_NAME))

    /** The primary's port as one Sentinel names it. */
    const namedBy = (sentinel: RedisServer.RedisServer) =>
      Effect.map(ask(sentinel, "get-master-addr-by-name"), (reply) =>
        Option.flatMap(reply, (address) => (Array.isArray(address) ? Option.some(Number(address[1])) : Option.none()))
      )
    /** The port every Sentinel names, when they agree. */
    const agreed = Effect.map(Effect.forEach(sentinels, namedBy, { concurrency: "unbounded" }), (ports) => {
      const [port] = ports
      return port !== undefined && Option.isSome(port) && ports.every((p) => Option.isSome(p) && p.value === port.value)
        ? Option.some(port.value)
        : Option.none<number>()
    })
    /** A data server's `INFO replication`; none while it is down or frozen. */
    const replication = (server: RedisServer.RedisServer): Effect.Effect<Option.Option<Record<string, string>>> =>
      Effect.flatMap(server.pid, (pid) =>
        Option.isNone(pid) ? Effect.succeedNone : Effect.option(server.info("replication"))
      )
    /** Whether `server` is a replica linked to the primary on `port`. */
    const follows = (server: RedisServer.RedisServer, port: number) =>
      Effect.map(replication(server), (info) =>
        Option.exists(
          info,
          (i) => i.role === "slave" && Number(i.master_port) === port && i.master_link_status === "up"
        )
      )

    const primaryNow = Effect.gen(function* () {
      const deadline = performance.now() + STABLE_TIMEOUT_MS
      while (performance.now() < deadline) {
        for (const sentinel of sentinels) {
          const port = yield* namedBy(sentinel)
          const server = Option.flatMap(port, (p) => Option.fromNullishOr(byPort.get(p)))
          if (Option.isSome(server)) return server.value
        }
        yield* Effect.promise(() => sleep(50))
      }
      return yield* Effect.die(`no Sentinel names a primary\n${yield* logs}`)
    })

    /** One Sentinel's view is whole: the master up, both replicas and both other Sentinels known and up. */
    const sentinelSeesAll = (sentinel: RedisServer.RedisServer, port: number) =>
      Effect.gen(function* () {
        const master = record(Option.getOrElse(yield* ask(sentinel, "master"), () => null))
        if (master.flags !== "master" || Number(master.port) !== port) return false
        const replicas = records(Option.getOrElse(yield* ask(sentinel, "replicas"), () => null))
        // (the link itself is checked on the replicas: a Sentinel reads a replica's INFO only every 10 s)
        const upReplicas = replicas.filter((r) => r.flags === "slave")
        const others = records(Option.getOrElse(yield* ask(sentinel, "sentinels"), () => null))
        return upReplicas.length === 2 && others.filter((s) => s.flags === "sentinel").length === 2
      })

    const awaitStable = withLogs(
      untilReal(
        "a stable Sentinel deployment",
        Effect.gen(function* () {
          const port = yield* agreed
          if (Option.isNone(port)) return false
          const links = yield* Effect.forEach(
            servers.filter((server) => server.port !== port.value),
            (server) => follows(server, port.value)
          )
          if (!links.every(Boolean)) return false
          const views = yield* Effect.forEach(sentinels, (s) => sentinelSeesAll(s, port.value), {
            concurrency: "unbounded"
          })
          return views.every(Boolean)
        }),
        { within: STABLE_TIMEOUT_MS }
      ),
      logs
    )

    const awaitReplicated = Effect.gen(function* () {
      const primary = yield* primaryNow
      yield* withLogs(
        untilReal(
          "the replicas to catch up",
          Effect.map(replication(primary), (info) => {
            if (Option.isNone(info)) return false
            const offset = info.value.master_repl_offset
            const slaves = Object.entries(info.value).filter(([key]) => /^slave\d+$/.test(key))
            return slaves.length === 2 && slaves.every(([, value]) => value.includes(`offset=${offset},`))
          }),
          { within: STABLE_TIMEOUT_MS }
        ),
        logs
      )
    })

    /** Wait until a server other than `old` is the primary every Sentinel names, and the other replica follows it. */
    const awaitPromotion = (old: RedisServer.RedisServer) =>
      Effect.gen(function* () {
        let promoted: RedisServer.RedisServer | undefined
        yield* withLogs(
          untilReal(
            "a replica promoted",
            Effect.gen(function* () {
              const port = yield* agreed
              if (Option.isNone(port) || port.value === old.port) return false
              const candidate = byPort.get(port.value)
              if (candidate === undefined) return false
              const info = yield* replication(candidate)
              if (!Option.exists(info, (i) => i.role === "master")) return false
              const rest = servers.filter((server) => server !== old && server !== candidate)
              const links = yield* Effect.forEach(rest, (server) => follows(server, port.value))
              promoted = candidate
              return links.every(Boolean)
            }),
            { within: STABLE_TIMEOUT_MS }
          ),
          logs
        )
        return { old, promoted: promoted! }
      })

    const failover = (how: "kill" | "pause") =>
      Effect.gen(function* () {
        const old = yield* primaryNow
        yield* how === "kill" ? old.kill : old.pause
        return yield* awaitPromotion(old)
      })

    const failoverLosing = <A, E, R>(writes: Effect.Effect<A, E, R>) =>
      Effect.gen(function* () {
        const old = yield* primaryNow
        const followers = servers.filter((server) => server !== old)
        yield* Effect.forEach(followers, (server) => server.pause)
        // A frozen replica's socket still takes the replication stream into its kernel
        // buffer: cut the links, so that nothing written from now on can reach them.
        yield* Effect.orDie(old.command("CLIENT", "KILL", "TYPE", "replica"))
        let killedAt = Number.POSITIVE_INFINITY
        const value = yield* writes.pipe(
          Effect.ensuring(
            Effect.andThen(
              Effect.andThen(
                old.kill,
                Effect.sync(() => {
                  killedAt = Date.now()
                })
              ),
              Effect.forEach(followers, (server) => server.resume)
            )
          )
        )
        return { ...(yield* awaitPromotion(old)), value, killedAt }
      })

    /** Whether every Sentinel flags `server` as subjectively down. */
    const seenDown = (server: RedisServer.RedisServer) =>
      Effect.map(
        Effect.forEach(sentinels, (sentinel) => ask(sentinel, "replicas"), { concurrency: "unbounded" }),
        (replies) =>
          replies.every((reply) =>
            records(Option.getOrElse(reply, () => null)).some(
              (r) => Number(r.port) === server.port && r.flags?.split(",").includes("s_down") === true
            )
          )
      )

    const failoverTo = (chosen: RedisServer.RedisServer) =>
      Effect.gen(function* () {
        const old = yield* primaryNow
        if (chosen === old) return yield* Effect.die("failoverTo: the chosen server is the primary")
        const others = servers.filter((server) => server !== old && server !== chosen)
        yield* withLogs(
          untilReal(
            "the other replicas seen down by every Sentinel",
            Effect.map(Effect.forEach(others, seenDown), (down) => down.every(Boolean)),
            { within: STABLE_TIMEOUT_MS }
          ),
          logs
        )
        yield* old.kill
        yield* chosen.resume
        yield* withLogs(
          untilReal(
            "the chosen replica promoted",
            Effect.gen(function* () {
              const port = yield* agreed
              if (!Option.contains(port, chosen.port)) return false
              return Option.exists(yield* replication(chosen), (i) => i.role === "master")
            }),
            { within: STABLE_TIMEOUT_MS }
          ),
          logs
        )
        yield* Effect.forEach(others, (server) =>
          Effect.andThen(server.resume, Effect.ignore(server.command("REPLICAOF", "127.0.0.1", chosen.port)))
        )
        yield* withLogs(
          untilReal(
            "the other replicas following the promoted one",
            Effect.map(
              Effect.forEach(others, (server) => follows(server, chosen.port)),
              (links) => links.every(Boolean)
            ),
            { within: STABLE_TIMEOUT_MS }
          ),
          logs
        )
        return { old, promoted: chosen }
      })

    const blockedInWait = (server: RedisServer.RedisServer) =>
      Effect.map(Effect.orDie(server.command("CLIENT", "LIST")), (reply) =>
        typeof reply === "string"
          ? reply.split("\n").filter((line) => / cmd=wait /.test(line) && /\bflags=\w*b/.test(line)).length
          : 0
      )

    const rejoin = (old: RedisServer.RedisServer) =>
      Effect.gen(function* () {
        const pid = yield* old.pid
        yield* Option.isNone(pid) ? old.restart : old.resume
        const primary = yield* primaryNow
        // Sentinel turns a returning primary into a replica by itself; saying it here only
        // spares the wait for its next look
        yield* Effect.ignore(old.command("REPLICAOF", "127.0.0.1", primary.port))
        yield* awaitStable
      })

    const restartAll = Effect.gen(function* () {
      const named = yield* primaryNow
      const stopped = yield* Effect.filter(servers, (server) => Effect.map(server.pid, Option.isNone))
      yield* Effect.forEach(stopped, (server) => server.restart, { concurrency: "unbounded", discard: true })
      // a replica starts as one of the first primary (its arguments): point each where it belongs
      yield* Effect.forEach(servers, (server) =>
        Effect.ignore(
          server === named
            ? server.command("REPLICAOF", "NO", "ONE")
            : server.command("REPLICAOF", "127.0.0.1", named.port)
        )
      )
      yield* awaitStable
    })
    const pauseAll = Effect.gen(function* () {
      const named = yield* primaryNow
      yield* Effect.forEach(
        servers.filter((server) => server !== named),
        (server) => server.pause
      )
      yield* named.pause
    })
    const resumeAll = Effect.gen(function* () {
      const named = yield* primaryNow
      yield* named.resume
      yield* Effect.forEach(
        servers.filter((server) => server !== named),
        (server) => server.resume
      )
    })

    yield* awaitStable
    return {
      killAll: Effect.forEach(servers, (server) => server.kill, { concurrency: "unbounded", discard: true }),
      restartAll,
      pauseAll,
      resumeAll,
      name: MASTER_NAME,
      servers,
      sentinels,
      addresses: sentinels.map((sentinel) => `127.0.0.1:${sentinel.port}`).join(","),
      primary: primaryNow,
      replicas: Effect.flatMap(primaryNow, (primary) =>
        Effect.filter(
          servers.filter((server) => server !== primary),
          (server) => follows(server, primary.port)
        )
      ),
      failover,
      failoverLosing,
      failoverTo,
      linked: (server) => Effect.flatMap(primaryNow, (primary) => follows(server, primary.port)),
      blockedInWait,
      rejoin,
      awaitStable,
      awaitReplicated
    } satisfies RedisSentinel
  })

/**
 * One deployment for every test of a file: started by the first test that asks for it and
 * stable each time it is handed out. `close` (for `afterAll`) stops it; the run directory
 * reaps it anyway.
 */
export const shared = (): { readonly get: Effect.Effect<RedisSentinel>; readonly close: () => Promise<void> } => {
  const scope = Effect.runSync(Scope.make())
  let started: Promise<RedisSentinel> | undefined
  return {
    get: Effect.promise(() => {
      started ??= Effect.runPromise(Scope.provide(start(), scope))
      return started
    }).pipe(Effect.tap((sentinel) => sentinel.awaitStable)),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
