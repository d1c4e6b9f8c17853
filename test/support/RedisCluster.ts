/**
 * Test harness: a 3-master Redis Cluster on free loopback ports, no replicas. Each node is
 * a `RedisServer` (its own temp directory, its pid recorded in the run directory and
 * reaped like any single server); `redis-cli --cluster create` assigns the slots.
 *
 * A node keeps its cluster configuration (`nodes.conf`) in its directory, so `restart`
 * (every node SIGKILLed and started again on the same ports) brings the same cluster
 * back, with its slots and without its data.
 *
 * ```ts
 * const cluster = yield* RedisCluster.start()
 * cluster.url            // redis://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
 * yield* cluster.nodeFor("some-key")
 * ```
 */
import { execFile } from "node:child_process"
import { setTimeout as sleep } from "node:timers/promises"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as RedisServer from "./RedisServer.js"

/** A running cluster owned by a test. */
export interface RedisCluster {
  /** The masters, in the order of `url`. */
  readonly nodes: ReadonlyArray<RedisServer.RedisServer>
  /** `redis://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>`: every node is a seed. */
  readonly url: string
  /** The master serving `key`'s slot (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`). */
  readonly nodeFor: (key: string) => Effect.Effect<RedisServer.RedisServer, RedisServer.RedisServerError>
  /** SIGKILL every node. */
  readonly kill: Effect.Effect<void>
  /** Start every stopped node again on its port and wait for `cluster_state:ok` everywhere. */
  readonly restart: Effect.Effect<void>
  /** SIGSTOP / SIGCONT every node. */
  readonly pause: Effect.Effect<void>
  readonly resume: Effect.Effect<void>
  /** `CLIENT KILL TYPE <type>` on every node; the number of clients killed in all. */
  readonly clientKill: (type: "normal" | "pubsub") => Effect.Effect<number, RedisServer.RedisServerError>
  /** The keys of every node. */
  readonly dbsize: Effect.Effect<number, RedisServer.RedisServerError>
  /** Wait until every node reports `cluster_state:ok`. */
  readonly awaitOk: Effect.Effect<void>
  /**
   * Take a master whose slots have moved (`moveSlots`) out of the cluster for good: remove
   * it (`--cluster del-node`, asked of `via`), then SIGKILL it. `nodes` and `awaitOk` then
   * cover the remaining masters.
   */
  readonly removeMaster: (node: RedisServer.RedisServer, via: RedisServer.RedisServer) => Effect.Effect<void>
  /** Move every slot (and key) of a master to `into`; the emptied master stays in the cluster. */
  readonly moveSlots: (node: RedisServer.RedisServer, into: RedisServer.RedisServer) => Effect.Effect<void>
}

const MASTERS = 3
const OK_TIMEOUT_MS = 60_000

const run = (file: string, args: ReadonlyArray<string>, timeoutMs: number): Promise<string> =>
  new Promise((resolve, reject) => {
    execFile(file, [...args], { timeout: timeoutMs, encoding: "utf8" }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${file} ${args.join(" ")} failed: ${error.message}\n${stdout}\n${stderr}`))
      else resolve(stdout)
    })
  })

const clusterOk = (node: RedisServer.RedisServer) =>
  node.commandWithTimeout(1_000, "CLUSTER", "INFO").pipe(
    Effect.map((reply) => typeof reply === "string" && reply.includes("cluster_state:ok")),
    Effect.orElseSucceed(() => false)
  )

/** Every node says ok, and every node's slot table covers all slots with the same owners. */
const awaitOk = (nodes: ReadonlyArray<RedisServer.RedisServer>): Effect.Effect<void> =>
  Effect.gen(function* () {
    const deadline = performance.now() + OK_TIMEOUT_MS
    while (performance.now() < deadline) {
      const ok = yield* Effect.forEach(nodes, clusterOk, { concurrency: "unbounded" })
      if (ok.every(Boolean)) {
        const tables = yield* Effect.forEach(
          nodes,
          (node) =>
            Effect.map(
              Effect.orElseSucceed(node.command("CLUSTER", "SLOTS"), () => null),
              JSON.stringify
            ),
          { concurrency: "unbounded" }
        )
        if (tables.every((table) => table === tables[0]) && tables[0] !== "null") return
      }
      yield* Effect.promise(() => sleep(50))
    }
    const logs = yield* Effect.forEach(nodes, (node) => node.logs)
    return yield* Effect.die(`the cluster did not reach cluster_state:ok in ${OK_TIMEOUT_MS} ms\n${logs.join("\n")}`)
  })

/**
 * Start three masters and join them into one cluster; each node is SIGKILLed and its
 * directory removed when the scope closes.
 */
export const start = (): Effect.Effect<RedisCluster, never, Scope.Scope> =>
  Effect.gen(function* () {
    const nodes = yield* Effect.forEach(
      Array.from({ length: MASTERS }),
      () =>
        // The bus port would default to port + 10000, which may not exist for a high port.
        RedisServer.start({
          extraArgs: [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000"
          ],
          clusterBus: true
        }),
      { concurrency: "unbounded" }
    )
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`)
    yield* Effect.promise(() =>
      run("redis-cli", ["--cluster", "create", ...addresses, "--cluster-replicas", "0", "--cluster-yes"], 60_000)
    )
    yield* awaitOk(nodes)

    const byPort = new Map(nodes.map((node) => [node.port, node]))
    /** The masters still in the cluster (`removeMaster` takes one out). */
    const live = [...nodes]
    const nodeFor = (key: string) =>
      Effect.gen(function* () {
        const slot = yield* nodes[0]!.command("CLUSTER", "KEYSLOT", key)
        const table = (yield* nodes[0]!.command("CLUSTER", "SLOTS")) as ReadonlyArray<ReadonlyArray<unknown>>
        for (const [from, to, master] of table) {
          if (Number(from) <= Number(slot) && Number(slot) <= Number(to)) {
            const port = Number((master as ReadonlyArray<unknown>)[1])
            const node = byPort.get(port)
            if (node !== undefined) return node
          }
        }
        return yield* new RedisServer.RedisServerError({ operation: "nodeFor", message: `no node serves slot ${slot}` })
      })
    const each = (f: (node: RedisServer.RedisServer) => Effect.Effect<void>) =>
      Effect.suspend(() => Effect.forEach(live, f, { concurrency: "unbounded", discard: true }))
    const sum = (f: (node: RedisServer.RedisServer) => Effect.Effect<number, RedisServer.RedisServerError>) =>
      Effect.suspend(() =>
        Effect.map(Effect.forEach(live, f, { concurrency: "unbounded" }), (counts) => counts.reduce((a, b) => a + b, 0))
      )

    const nodeId = (node: RedisServer.RedisServer) => Effect.map(Effect.orDie(node.command("CLUSTER", "MYID")), String)
    const moveSlots = (node: RedisServer.RedisServer, into: RedisServer.RedisServer) =>
      Effect.gen(function* () {
        const [from, to] = [yield* nodeId(node), yield* nodeId(into)]
        const args = ["--cluster", "reshard", `127.0.0.1:${into.port}`, "--cluster-from", from, "--cluster-to", to]
        yield* Effect.promise(() => run("redis-cli", [...args, "--cluster-slots", "16384", "--cluster-yes"], 60_000))
        yield* awaitOk(live)
      })
    const removeMaster = (node: RedisServer.RedisServer, via: RedisServer.RedisServer) =>
      Effect.gen(function* () {
        const id = yield* nodeId(node)
        yield* Effect.promise(() => run("redis-cli", ["--cluster", "del-node", `127.0.0.1:${via.port}`, id], 60_000))
        yield* node.kill
        live.splice(live.indexOf(node), 1)
        yield* awaitOk(live)
      })

    const cluster: RedisCluster = {
      nodes: live,
      url: `redis://${addresses.join(",")}`,
      nodeFor,
      kill: each((node) => node.kill),
      restart: Effect.andThen(
        each((node) => Effect.flatMap(node.pid, (pid) => (pid._tag === "None" ? node.restart : Effect.void))),
        Effect.suspend(() => awaitOk(live))
      ),
      pause: each((node) => node.pause),
      resume: each((node) => node.resume),
      clientKill: (type) => sum((node) => node.clientKill(type)),
      dbsize: sum((node) => node.dbsize),
      awaitOk: Effect.suspend(() => awaitOk(live)),
      removeMaster,
      moveSlots
    }
    return cluster
  })

/**
 * One cluster for every test of a file: started by the first test that asks for it and
 * ready (`cluster_state:ok`) each time it is handed out. `close` (for `afterAll`) stops it;
 * the run directory reaps it anyway.
 */
export const shared = (): { readonly get: Effect.Effect<RedisCluster>; readonly close: () => Promise<void> } => {
  const scope = Effect.runSync(Scope.make())
  let started: Promise<RedisCluster> | undefined
  return {
    get: Effect.promise(() => {
      started ??= Effect.runPromise(Scope.provide(start(), scope))
      return started
    }).pipe(Effect.tap((cluster) => cluster.awaitOk)),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
