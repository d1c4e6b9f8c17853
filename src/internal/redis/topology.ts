/**
 * Where a Redis store's commands go: one server, or a Cluster. Both are one interface
 * (`Topology`), so the driver, pub/sub and blocking reads never ask which it is: they ask
 * which node serves a key, which masters there are, how a channel is subscribed, and run
 * commands through it.
 *
 * - `single`: one command connection; every key, channel and scan on the one server;
 *   PUBLISH / SUBSCRIBE.
 * - `cluster`: an ioredis `Cluster` client; a key's node from the client's slot table;
 *   sharded pub/sub (SPUBLISH / SSUBSCRIBE) on the node owning the channel's slot; scans
 *   and settings on every master. The slot table is re-read on every MOVED reply and every
 *   5 s, and each re-read is reported (`onRefresh`), so that pub/sub can follow slots that
 *   moved.
 *
 * A command issued while the connection is not ready waits for it, never longer than the
 * command timeout in all.
 *
 * @internal
 */

import type { Writable } from "node:stream"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type { Cluster, Redis, RedisCommander } from "ioredis"
import { type StoreError, StoreUnavailable } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import { type ClusterEndpoint, clusterOptions, keySlot, nodeKey, settleEach, slotMaster } from "./cluster.js"
import {
  awaitReady,
  closeConnection,
  connectionOptions,
  type Endpoint,
  openCluster,
  openConnection,
  toStoreError,
  withLiveClock
} from "./connection.js"
import type { Health } from "./health.js"
import { defineAll, cluster as shardedDialect, singleServer } from "./script.js"
import * as Scripts from "./scripts/index.js"

/** What a scan or a per-node command runs on: the only server, or one master of a cluster. @internal */
export interface Node {
  readonly name: string
  readonly run: <A>(operation: string, f: (connection: Redis) => Promise<A>) => Effect.Effect<A, StoreError>
}

/** A batch's replies, one `[error, reply]` per command, as a pipeline's `exec` gives them. @internal */
export type BatchReplies = ReadonlyArray<[error: Error | null, reply: unknown]> | null

/** @internal */
export interface Topology {
  /**
   * The commands of a token channel: publishing (on the command connection), subscribing
   * (on a subscriber connection), and the event its messages arrive as.
   */
  readonly channels: {
    readonly publish: (connection: RedisCommander, name: string, message: string) => Promise<unknown>
    readonly subscribe: (connection: Redis, name: string) => Promise<unknown>
    readonly unsubscribe: (connection: Redis, name: string) => Promise<unknown>
    readonly message: "message" | "smessage"
  }
  /**
   * The channel a worker's notices about `token` go to, less the worker id the scripts
   * append (docs/design.md#notices-reach-one-worker): one channel per worker on a single server
   * (`<p>:w:`), shared by every token; the token's hash tag on a Cluster (`<p>:{<t>}:w:`), where a
   * script may publish only in its own slot.
   */
  readonly noticePrefix: (keys: Keys, token: string) => string
  /**
   * Whether a script may touch keys other than those it is called with (a single server:
   * every key lives there); not on a Cluster, where each key's slot has its own master.
   */
  readonly anyKeyInScripts: boolean
  /** Run one command on the command connection. */
  readonly run: <A>(operation: string, f: (connection: RedisCommander) => Promise<A>) => Effect.Effect<A, StoreError>
  /** Single-key commands as one batch, each settled on its own (one round trip per node). */
  readonly runBatch: (
    operation: string,
    batch: ReadonlyArray<readonly [name: string, ...args: Array<string>]>
  ) => Effect.Effect<BatchReplies, StoreError>
  /** The node serving a key's (or a shard channel's) slot; `""` on a single server. */
  readonly nodeOf: (operation: string, key: string) => Effect.Effect<string, StoreUnavailable>
  /** The node serving a slot now, from the client's table; `""` on a single server. */
  readonly slotOwner: (slot: number) => string | undefined
  /** The slot of a key or channel (0 on a single server). */
  readonly slotOf: (key: string) => number
  /** Where a node is, to open a connection of our own to it. */
  readonly endpointOf: (node: string) => Endpoint
  /** The masters now: `[""]` on a single server; none on a cluster that does not know them yet. */
  readonly masters: () => ReadonlyArray<string>
  /** What scans and per-node settings run on. */
  readonly nodes: () => ReadonlyArray<Node>
  /** A ready command connection to `node`, to send it CLIENT UNBLOCK. */
  readonly commandOn: (node: string) => Redis | undefined
  /** A reply on a connection of ours said the slot table is stale (MOVED / ASK): re-read it. */
  readonly onReplyError: (cause: unknown) => void
  /** Wait, within the connect timeout, until commands can run (on a cluster: on every master). */
  readonly connected: (timeoutMs: number, onTimeout: () => StoreUnavailable) => Effect.Effect<void, StoreUnavailable>
  /** Called after each re-read of the slot table (never on a single server). */
  onRefresh: () => void
}

/** @internal */
export interface Settings {
  readonly commandTimeoutMs: number
  readonly connectTimeoutMs: number
}

/**
 * The writes of `connection` held from its first command until the event loop's next check
 * phase (`setImmediate`), so that the commands a busy worker sends meanwhile (many tokens'
 * commits, acquisitions, releases) leave in one write and Redis reads them in one: per
 * request, most of either side's cost is the system call. A command waits at most one turn
 * of the event loop (a command sent from a check-phase callback, where Effect runs its
 * fibers, waits for the next turn's); its timeout is unchanged, and nothing is held back
 * behind a reply (ioredis's auto-pipelining, by contrast, holds a command behind the batch
 * in flight).
 */
const turnBatcher = (connection: Redis) => {
  let held: Writable | undefined
  const release = () => {
    const stream = held
    held = undefined
    stream?.uncork()
  }
  return () => {
    if (held !== undefined) return
    // the connection's socket now: a reconnection replaces it, and the one corked is released
    const stream = (connection as unknown as { readonly stream?: Writable }).stream
    if (stream === undefined || stream.destroyed) return
    held = stream
    stream.cork()
    setImmediate(release)
  }
}

/** @internal */
export const make = (
  endpoint: Endpoint,
  cluster: ClusterEndpoint | undefined,
  settings: Settings,
  health: Health
): Effect.Effect<Topology, never, Scope.Scope> =>
  Effect.gen(function* () {
    const command: Redis | Cluster = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const connection =
          cluster === undefined
            ? openConnection(endpoint, connectionOptions("command", settings), health.onError)
            : openCluster(cluster.seeds, clusterOptions(endpoint, "command", settings), health.onError)
        // how the scripts publish: PUBLISH on a single server, SPUBLISH on a Cluster
        defineAll(connection, Scripts.all, cluster === undefined ? singleServer : shardedDialect)
        health.track(connection, "command")
        // A cluster client opens a node's connection on its first command, and without an
        // offline queue refuses the commands that arrive while it is still connecting:
        // connect each node as soon as the client learns of it.
        connection.on("+node", (node: Redis) => {
          if (node.status === "wait") node.connect().catch(() => undefined)
        })
        return connection
      }),
      (connection) => closeConnection(connection, settings.commandTimeoutMs)
    )
    const commands = command as unknown as RedisCommander
    const mapError = (operation: string) => toStoreError(endpoint, operation)
    const { commandTimeoutMs } = settings

    // one server: a turn's commands leave in one write (a Cluster's go to many connections)
    const batch = cluster === undefined ? turnBatcher(command as Redis) : undefined
    const run = <A>(operation: string, f: (connection: RedisCommander) => Promise<A>) => {
      const attempt = Effect.tryPromise({
        try: () => {
          batch?.()
          return f(commands)
        },
        catch: (cause) => {
          topology.onReplyError(cause)
          return mapError(operation)(cause)
        }
      })
      const notConnected = health.notConnected(operation, commandTimeoutMs)
      return Effect.suspend(() =>
        command.status === "ready"
          ? attempt
          : awaitReady(command, commandTimeoutMs, notConnected).pipe(
              Effect.andThen(attempt),
              Effect.timeoutOrElse({ duration: commandTimeoutMs, orElse: () => Effect.failSync(notConnected) }),
              withLiveClock
            )
      )
    }

    /** One command on one node, failing within the command timeout when the node is away. */
    const runOn =
      (connection: Redis) =>
      <A>(operation: string, f: (connection: Redis) => Promise<A>): Effect.Effect<A, StoreError> =>
        Effect.tryPromise({ try: () => f(connection), catch: mapError(operation) }).pipe(
          Effect.timeoutOrElse({
            duration: commandTimeoutMs,
            orElse: () => Effect.failSync(health.notConnected(operation, commandTimeoutMs))
          }),
          withLiveClock
        )

    const topology: Topology =
      cluster === undefined
        ? single(command as Redis, endpoint, run)
        : yield* sharded(command as Cluster, cluster, run, runOn)
    return topology
  })

const single = (
  command: Redis,
  endpoint: Endpoint,
  run: <A>(operation: string, f: (connection: RedisCommander) => Promise<A>) => Effect.Effect<A, StoreError>
): Topology => ({
  channels: {
    publish: (connection, name, message) => connection.publish(name, message),
    subscribe: (connection, name) => connection.subscribe(name),
    unsubscribe: (connection, name) => connection.unsubscribe(name),
    message: "message"
  },
  noticePrefix: (keys) => keys.workerNotices(""),
  anyKeyInScripts: true,
  run,
  runBatch: (operation, batch) => run(operation, () => command.pipeline(batch.map((entry) => [...entry])).exec()),
  nodeOf: () => Effect.succeed(""),
  slotOwner: () => "",
  slotOf: () => 0,
  endpointOf: () => endpoint,
  masters: () => [""],
  nodes: () => [{ name: endpoint.safeUrl, run: (operation, f) => run(operation, () => f(command)) }],
  commandOn: () => (command.status === "ready" ? command : undefined),
  onReplyError: () => undefined,
  connected: (timeoutMs, onTimeout) => awaitReady(command, timeoutMs, onTimeout),
  onRefresh: () => undefined
})

const sharded = (
  command: Cluster,
  cluster: ClusterEndpoint,
  run: <A>(operation: string, f: (connection: RedisCommander) => Promise<A>) => Effect.Effect<A, StoreError>,
  runOn: (connection: Redis) => Node["run"]
): Effect.Effect<Topology, never, Scope.Scope> =>
  Effect.gen(function* () {
    const masters = (): ReadonlyArray<Redis> => command.nodes("master")
    const topology: Topology = {
      channels: {
        publish: (connection, name, message) => connection.spublish(name, message),
        subscribe: (connection, name) => connection.ssubscribe(name),
        unsubscribe: (connection, name) => connection.sunsubscribe(name),
        message: "smessage"
      },
      noticePrefix: (keys, token) => keys.tokenNotices(token, ""),
      anyKeyInScripts: false,
      run,
      runBatch: (operation, batch) =>
        run(operation, (c) => {
          // A pipeline must not span nodes: each command is routed alone.
          const byName = c as unknown as Record<string, (...args: Array<string>) => Promise<unknown>>
          return settleEach(
            batch.map(
              ([name, ...args]) =>
                () =>
                  byName[name]!(...args)
            )
          )
        }),
      nodeOf: (operation, key) =>
        Effect.suspend(() => {
          const node = slotMaster(command, keySlot(key))
          return node === undefined
            ? Effect.fail(
                new StoreUnavailable({
                  operation,
                  reason: `no node of ${cluster.endpoint.safeUrl} serves ${key}`
                })
              )
            : Effect.succeed(node)
        }),
      slotOwner: (slot) => slotMaster(command, slot),
      slotOf: keySlot,
      endpointOf: (node) => cluster.nodeEndpoint(node),
      masters: () => masters().map(nodeKey),
      nodes: () => masters().map((master) => ({ name: nodeKey(master), run: runOn(master) })),
      commandOn: (node) => {
        const master = masters().find((candidate) => nodeKey(candidate) === node)
        return master?.status === "ready" ? master : undefined
      },
      onReplyError: (cause) => {
        if (cause instanceof Error && /^(MOVED|ASK)\b/.test(cause.message)) command.refreshSlotsCache()
      },
      connected: (timeoutMs, onTimeout) =>
        awaitReady(command, timeoutMs, onTimeout).pipe(
          // The masters are known once the cluster client is ready.
          Effect.andThen(
            Effect.suspend(() =>
              Effect.forEach(masters(), (master) => awaitReady(master, timeoutMs, onTimeout), {
                concurrency: "unbounded",
                discard: true
              })
            )
          )
        ),
      onRefresh: () => undefined
    }
    command.on("refresh", () => topology.onRefresh())
    // The client re-reads its slot table on a MOVED reply; this re-reads it every 5 s too,
    // so that slots that moved with no command of ours touching them are noticed. Not
    // ioredis' `slotsRefreshInterval`: its timer can outlive the client.
    yield* Effect.callback<void>((resume) => command.refreshSlotsCache(() => resume(Effect.void))).pipe(
      Effect.schedule(Schedule.spaced(Duration.seconds(5))),
      withLiveClock,
      Effect.interruptible,
      Effect.forkScoped
    )
    return topology
  })
