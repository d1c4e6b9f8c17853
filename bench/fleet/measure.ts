/**
 * What `bench:fleet` reads around a measured window: the store (one redis-server, or a
 * 3-master Cluster) with its `INFO cpu` and `INFO commandstats`, the machine's CPU from
 * `/proc/stat`, and the latency percentiles of a window's samples.
 */
import * as fs from "node:fs"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as RedisCluster from "../../test/support/RedisCluster.js"
import * as RedisServer from "../../test/support/RedisServer.js"

/** The store of one cell, started fresh for each implementation. */
export interface Store {
  readonly kind: "redis" | "cluster"
  readonly nodes: ReadonlyArray<RedisServer.RedisServer>
  /** leasehold's `LEASEHOLD_REDIS_URL`. */
  readonly url: string
  /** `host:port,…` of every master. */
  readonly addresses: string
}

/** A fresh redis-server, or a fresh 3-master Cluster; gone with the scope. */
export const startStore = (cluster: boolean): Effect.Effect<Store, never, Scope.Scope> =>
  cluster
    ? Effect.map(RedisCluster.start(), (c) => ({
        kind: "cluster" as const,
        nodes: c.nodes,
        url: c.url,
        addresses: c.nodes.map((node) => `127.0.0.1:${node.port}`).join(",")
      }))
    : Effect.map(RedisServer.start(), (server) => ({
        kind: "redis" as const,
        nodes: [server],
        url: server.url,
        addresses: `127.0.0.1:${server.port}`
      }))

/** The store's CPU seconds and commands so far, over every master. */
export interface StoreStats {
  readonly cpuS: number
  readonly commands: number
  /** The calls of each command (`cmdstat_<name>`), over every master. */
  readonly calls: Readonly<Record<string, number>>
}

/** The commands called between `before` and `after`, most called first: `name calls, …`. */
export const commandsBetween = (before: StoreStats, after: StoreStats): string =>
  Object.entries(after.calls)
    .map(([name, calls]) => [name, calls - (before.calls[name] ?? 0)] as const)
    .filter(([, calls]) => calls > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([name, calls]) => `${name.replace("cmdstat_", "")} ${calls}`)
    .join(", ")

// The harness's own INFO calls are not the implementation's.
const skip = (name: string) => name === "cmdstat_info"

export const storeStats = (store: Store): Effect.Effect<StoreStats> =>
  Effect.map(
    Effect.forEach(store.nodes, (node) =>
      Effect.orDie(
        Effect.all({ cpu: node.info("cpu"), commands: node.info("commandstats") }).pipe(
          Effect.map(({ cpu, commands }) => ({
            cpuS: Number(cpu.used_cpu_sys ?? 0) + Number(cpu.used_cpu_user ?? 0),
            commands: RedisServer.commandCalls(commands, skip),
            calls: commands
          }))
        )
      )
    ),
    (all) => {
      const calls: Record<string, number> = {}
      for (const node of all) {
        for (const [name, value] of Object.entries(node.calls)) {
          if (name.startsWith("cmdstat_") && !skip(name)) {
            calls[name] = (calls[name] ?? 0) + Number(/(?:^|,)calls=(\d+)/.exec(value)?.[1] ?? 0)
          }
        }
      }
      return {
        cpuS: all.reduce((sum, node) => sum + node.cpuS, 0),
        commands: all.reduce((sum, node) => sum + node.commands, 0),
        calls
      }
    }
  )

/** The machine's busy and total CPU ticks so far (`/proc/stat`, every core). */
export const machineTicks = Effect.sync(() => {
  const fields = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  const total = fields.reduce((sum, n) => sum + n, 0)
  // idle and iowait
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0)
  return { busy: total - idle, total }
})

/** The `p`th percentile of ascending samples (0 without any). */
export const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

/** To `digits` decimals. */
export const round = (x: number, digits = 2): number => Math.round(x * 10 ** digits) / 10 ** digits
