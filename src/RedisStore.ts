/**
 * `Store` over Redis with ioredis: one Lua script per atomic operation, one command
 * connection, one subscriber connection, and (only once a mailbox read blocks) one
 * connection for blocking reads. Keys follow DESIGN §3; every script touches the keys of
 * one token only, so the layout is Cluster-safe.
 *
 * On a Redis Cluster (`cluster: true`, or `redisCluster` in `LeaseholdConfig`) the command
 * connection is an ioredis `Cluster` client, and there is one subscriber connection per
 * master: signals use sharded pub/sub (SSUBSCRIBE on the node owning the token's slot,
 * SPUBLISH from the scripts), socket-record scans and keyspace notifications cover every
 * master, and a blocking mailbox read runs on a connection to the node owning the mailbox.
 *
 * The connections reconnect by themselves forever; an operation issued while Redis is
 * away fails with `StoreUnavailable` within the command timeout, and operations work
 * again as soon as Redis is back. Subscription streams fail when the subscriber
 * connection drops (the server forgot the subscriptions); callers subscribe again.
 *
 * @since 0.1.0
 */
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { Cluster, Redis, RedisCommander } from "ioredis"
import { decodeSignal, decodeSocketRecord, encodeSignal, encodeSocketRecord } from "./internal/codec.js"
import { makeKeys } from "./internal/keys.js"
import {
  type ClusterEndpoint,
  clusterOptions,
  keySlot,
  nodeKey,
  parseClusterEndpoint,
  settleEach,
  slotMaster
} from "./internal/redis/cluster.js"
import {
  awaitReady,
  closeConnection,
  connectionOptions,
  type Endpoint,
  openCluster,
  openConnection,
  parseEndpoint,
  scrub,
  toStoreError,
  withLiveClock
} from "./internal/redis/connection.js"
import {
  asArray,
  cluster as clusterDialect,
  commandLine,
  defineAll,
  type Input,
  invoke,
  type Script,
  singleServer
} from "./internal/redis/script.js"
import * as Scripts from "./internal/redis/scripts/index.js"
import {
  isValidToken,
  signalInstance,
  validateSliceNames,
  validateToken,
  validateTokenAndInstance,
  validateTokens
} from "./internal/validate.js"
import { InvalidConfig, LeaseholdConfig, type Settings } from "./LeaseholdConfig.js"
import {
  type AcquireResult,
  type ClaimResult,
  type ConnectionStatus,
  type KeyInfo,
  type LockHolder,
  type MailboxEntry,
  type Signal,
  type SliceEntry,
  type SocketEvent,
  type SocketEventsSetting,
  type SocketRecord,
  Store,
  type WaiterOptions
} from "./Store.js"
import { type CorruptValue, LockLost, type StoreError, StoreRefused, StoreUnavailable } from "./StoreError.js"

/**
 * Where the store connects. Without a `url`, the `redisUrl` of `LeaseholdConfig` is used.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly url?: string | Redacted.Redacted
  /**
   * The URL names seed nodes of a Redis Cluster: `redis://[user:password@]host:port[,host:port...]`.
   * Without it, the `redisCluster` of `LeaseholdConfig` decides.
   */
  readonly cluster?: boolean
}

/** The commands a single server's connection and a cluster client share, plus our scripts. */
type CommandConnection = RedisCommander

/** A subscriber connection: the only one on a single server, one per master on a cluster. */
interface Subscriber {
  /** The node's `host:port` on a cluster; "" on a single server. */
  readonly node: string
  readonly connection: Redis
  ready: boolean
  /** Counts the connection's drops: a channel subscribed in an earlier one is forgotten by the server. */
  generation: number
}

/** One Redis channel, shared by every local subscriber of one token. */
interface Channel {
  readonly name: string
  /** Its cluster slot (0 on a single server). */
  readonly slot: number
  readonly subscriber: Subscriber
  /** The subscriber's generation when SUBSCRIBE was sent; a later one means the server forgot it. */
  readonly generation: number
  readonly confirmed: Deferred.Deferred<void, StoreError>
  readonly subscribers: Set<Mailbox.Mailbox<Signal, StoreUnavailable>>
  refs: number
}

/** The pattern subscription to socket-record changes (on every master), shared by every local listener. */
interface SocketWatch {
  readonly parts: ReadonlyArray<{ readonly subscriber: Subscriber; readonly generation: number }>
  readonly confirmed: Deferred.Deferred<void, StoreError>
  readonly subscribers: Set<Mailbox.Mailbox<SocketEvent, StoreUnavailable>>
}

/** What a scan or a per-node command runs on: the only server, or one master of a cluster. */
interface Node {
  readonly name: string
  readonly run: <A>(operation: string, f: (connection: Redis) => Promise<A>) => Effect.Effect<A, StoreError>
}

/** The keyspace events a socket record can see that a caller needs; `expire` (a TTL set) is not one. */
const socketEventNames: ReadonlySet<string> = new Set(["set", "del", "expired", "evicted"])

/**
 * Keyspace notification flags socket events need: `K` keyspace channels, `g` DEL, `$` SET,
 * `x` expired, `e` evicted. `A` stands for `g$lshzxet`.
 */
const neededFlags = ["K", "g", "$", "x", "e"] as const

/** The flags to add to `current` so that socket events are published; empty when none are missing. */
const missingFlags = (current: string): string => {
  const present = new Set(current.includes("A") ? `${current}g$lshzxet` : current)
  return neededFlags.filter((flag) => !present.has(flag)).join("")
}

/** The keyspace channels of socket keys in the connection's database, and their decoding. */
const socketKeyspace = (keys: ReturnType<typeof makeKeys>, db: number) => {
  const head = `__keyspace@${db}__:`
  return {
    pattern: `${head}${keys.socketPattern}`,
    event: (channel: string, message: string): SocketEvent | undefined => {
      if (!channel.startsWith(head) || !socketEventNames.has(message)) return undefined
      const token = keys.socketToken(channel.slice(head.length))
      return token !== undefined && isValidToken(token) ? { token, event: message as SocketEvent["event"] } : undefined
    }
  }
}

/** The message of a release: it names the lock released, so a waiter can tell its own releases apart. */
const released = (lockId: string) => encodeSignal({ _tag: "Released", lockId })

const millis = (duration: Duration.Duration): number => Math.max(1, Math.ceil(Duration.toMillis(duration)))

/** Where the store connects: one server, or a cluster through its seed nodes. */
interface Target {
  readonly endpoint: Endpoint
  readonly cluster: ClusterEndpoint | undefined
}

const resolveTarget = (options: Options, settings: Settings): Effect.Effect<Target, InvalidConfig> => {
  const url =
    options.url !== undefined
      ? Option.some(Redacted.isRedacted(options.url) ? String(Redacted.value(options.url)) : options.url)
      : Option.map(settings.redisUrl, (url) => String(Redacted.value(url)))
  if (Option.isNone(url)) {
    return Effect.fail(
      new InvalidConfig({ knob: "redisUrl", value: "(unset)", reason: "must be set to use the Redis store" })
    )
  }
  if (options.cluster ?? settings.redisCluster) {
    const cluster = parseClusterEndpoint(url.value)
    return cluster === undefined
      ? Effect.fail(
          new InvalidConfig({
            knob: "redisUrl",
            value: "<redacted>",
            reason: "must be a redis:// or rediss:// URL listing host:port seed nodes, without a database other than 0"
          })
        )
      : Effect.succeed({ endpoint: cluster.endpoint, cluster })
  }
  const endpoint = parseEndpoint(url.value)
  return endpoint === undefined
    ? Effect.fail(
        new InvalidConfig({
          knob: "redisUrl",
          value: "<redacted>",
          reason: "must be a redis:// or rediss:// URL with a host"
        })
      )
    : Effect.succeed({ endpoint, cluster: undefined })
}

const unexpectedReply = (operation: string, reply: unknown): StoreRefused =>
  new StoreRefused({ operation, reply: `unexpected reply ${JSON.stringify(reply)?.slice(0, 200) ?? String(reply)}` })

const decodeEntries = (reply: unknown): ReadonlyArray<MailboxEntry> => {
  const entries: Array<MailboxEntry> = []
  for (const entry of asArray(reply) ?? []) {
    const [id, fields] = asArray(entry) ?? []
    if (typeof id !== "string") continue
    const list = asArray(fields) ?? []
    // An entry without our field (written by someone else) is still returned, with an
    // empty payload: skipping it would leave a reader's position stuck before it.
    let payload = ""
    for (let i = 0; i + 1 < list.length; i += 2) {
      if (list[i] === "payload") {
        payload = String(list[i + 1])
        break
      }
    }
    entries.push({ id, payload })
  }
  return entries
}

/**
 * Build a Redis-backed store in the current scope. Waits for both connections to be
 * ready, at most `connectTimeout`; the connections close when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<Store.Service, StoreUnavailable | InvalidConfig, Scope.Scope | LeaseholdConfig> =>
  Effect.gen(function* () {
    const settings = yield* LeaseholdConfig
    const target = yield* resolveTarget(options, settings)
    const endpoint = target.endpoint
    const clustered = target.cluster
    const keys = makeKeys(settings.keyPrefix)
    const lockMs = millis(settings.lockExpiration)
    const tokenMs = millis(settings.tokenExpiration)
    const commandTimeoutMs = millis(settings.commandTimeout)
    const connectTimeoutMs = millis(settings.connectTimeout)
    const timeouts = { commandTimeoutMs, connectTimeoutMs }
    const mapError = (operation: string) => toStoreError(endpoint, operation)
    const keyspace = socketKeyspace(keys, endpoint.db)

    // --- connection health ----------------------------------------------------------
    // ioredis reports through events; they update this record synchronously, and a fiber
    // mirrors it into the SubscriptionRef (event listeners cannot run effects).
    const health = {
      command: false,
      epoch: 0,
      lastError: undefined as string | undefined
    }
    const subscribers = new Map<string, Subscriber>()
    const subscribersReady = () => {
      if (subscribers.size === 0) return false
      for (const subscriber of subscribers.values()) if (!subscriber.ready) return false
      return true
    }
    const snapshot = (): ConnectionStatus => ({ ready: health.command && subscribersReady(), epoch: health.epoch })
    const statusRef = yield* SubscriptionRef.make<ConnectionStatus>(snapshot())
    const statusEvents = yield* Queue.unbounded<void>()
    const syncStatus = Effect.gen(function* () {
      const current = yield* SubscriptionRef.get(statusRef)
      const next = snapshot()
      if (current.ready === next.ready && current.epoch === next.epoch) return
      yield* SubscriptionRef.set(statusRef, next)
      yield* Effect.logDebug(
        next.ready
          ? `RedisStore: connected to ${endpoint.safeUrl} (epoch ${next.epoch})`
          : `RedisStore: connection to ${endpoint.safeUrl} lost${health.lastError === undefined ? "" : `: ${health.lastError}`}`
      )
    })
    yield* Queue.take(statusEvents).pipe(
      // Events that pile up meanwhile collapse into one update: the epoch still counts each.
      Effect.zipRight(Queue.takeAll(statusEvents)),
      Effect.zipRight(syncStatus),
      Effect.forever,
      Effect.interruptible,
      Effect.forkScoped
    )
    const statusChanged = () => {
      statusEvents.unsafeOffer(undefined)
    }
    const onError = (error: Error) => {
      health.lastError = scrub(endpoint, error.message)
    }
    const notConnected = (operation: string, timeoutMs: number) => () =>
      new StoreUnavailable({
        operation,
        reason: `not connected to ${endpoint.safeUrl} within ${timeoutMs}ms${
          health.lastError === undefined ? "" : ` (last error: ${health.lastError})`
        }`
      })

    // --- subscriptions --------------------------------------------------------------
    const channels = new Map<string, Channel>()
    let socketWatch: SocketWatch | undefined
    /** A channel's listeners are told it is lost; the next subscribe starts a new one. */
    const failChannel = (channel: Channel, error: StoreUnavailable) => {
      Deferred.unsafeDone(channel.confirmed, Effect.fail(error))
      for (const mailbox of channel.subscribers) mailbox.unsafeDone(Exit.fail(error))
      if (channels.get(channel.name) === channel) channels.delete(channel.name)
    }
    const failSocketWatch = (watch: SocketWatch, error: StoreUnavailable) => {
      Deferred.unsafeDone(watch.confirmed, Effect.fail(error))
      for (const mailbox of watch.subscribers) mailbox.unsafeDone(Exit.fail(error))
      if (socketWatch === watch) socketWatch = undefined
    }

    /** The server forgets a lost connection's subscriptions: so do we. */
    const dropSubscriptions = (subscriber: Subscriber) => {
      subscriber.generation++
      const error = new StoreUnavailable({
        operation: "subscribe",
        reason: `subscriber connection to ${subscriber.node === "" ? endpoint.safeUrl : subscriber.node} lost`
      })
      for (const channel of [...channels.values()]) if (channel.subscriber === subscriber) failChannel(channel, error)
      if (socketWatch?.parts.some((part) => part.subscriber === subscriber)) failSocketWatch(socketWatch, error)
    }

    /**
     * After the cluster client re-read its slot table. A shard channel whose slot moved to
     * another master is lost: the server unsubscribes it when the slot leaves, and what is
     * published now goes to the new master. The socket watch must cover the masters as
     * they are now. A subscriber to a node that is no longer a master is closed: it would
     * try to reconnect for ever, and the store would never be ready again. Whatever was
     * lost fails its listeners with `StoreUnavailable` and counts as a new epoch, so that
     * their loops subscribe again at once, on the right nodes.
     */
    const onTopology = () => {
      if (clustered === undefined || closed) return
      const current = new Set(masters().map(nodeKey))
      // a table being rebuilt (no master known) says nothing yet
      if (current.size === 0) return
      const error = new StoreUnavailable({ operation: "subscribe", reason: `the cluster's slots moved` })
      let changed = false
      // Nodes that serve a live channel's slot keep their subscriber, even when the table
      // does not list them as masters (ioredis keeps the last owner of a slot nobody serves).
      const owners = new Set<string>()
      for (const channel of [...channels.values()]) {
        const owner = slotMaster(command as Cluster, channel.slot)
        if (owner === undefined) continue
        owners.add(owner)
        // an owner that is not a master of the table is no better than the one we have
        if (owner === channel.subscriber.node || !current.has(owner)) continue
        failChannel(channel, error)
        changed = true
      }
      const watch = socketWatch
      if (
        watch !== undefined &&
        (watch.parts.length !== current.size || watch.parts.some((part) => !current.has(part.subscriber.node)))
      ) {
        failSocketWatch(watch, error)
        changed = true
      }
      for (const [node, subscriber] of [...subscribers]) {
        if (current.has(node) || owners.has(node)) continue
        subscribers.delete(node)
        dropSubscriptions(subscriber)
        subscriber.connection.disconnect()
        changed = true
      }
      if (!changed) return
      // as at the start, every master has its subscriber: the store is ready once they are
      for (const node of current) if (!subscribers.has(node)) openSubscriber(node, clustered.nodeEndpoint(node))
      health.epoch++
      statusChanged()
    }
    const onSocketEvent = (pattern: string, name: string, message: string) => {
      if (pattern !== keyspace.pattern || socketWatch === undefined) return
      const event = keyspace.event(name, message)
      if (event === undefined) return
      for (const mailbox of socketWatch.subscribers) mailbox.unsafeOffer(event)
    }
    const onSignal = (name: string, message: string) => {
      const channel = channels.get(name)
      if (channel === undefined) return
      const signal = decodeSignal(message)
      if (signal === undefined) return
      for (const mailbox of channel.subscribers) mailbox.unsafeOffer(signal)
    }

    // --- connections ----------------------------------------------------------------
    /** Follow a connection's state: each `ready` is a new epoch; `close` and `end` are down. */
    const track = (connection: Redis | Cluster, set: (ready: boolean) => void) => {
      connection.on("ready", () => {
        set(true)
        health.epoch++
        statusChanged()
      })
      const down = () => {
        set(false)
        statusChanged()
      }
      connection.on("close", down)
      connection.on("end", down)
    }
    let closed = false
    const command: Redis | Cluster = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const connection =
          clustered === undefined
            ? openConnection(endpoint, connectionOptions("command", timeouts), onError)
            : openCluster(clustered.seeds, clusterOptions(endpoint, "command", timeouts), onError)
        defineAll(connection, Scripts.all, clustered === undefined ? singleServer : clusterDialect)
        track(connection, (ready) => {
          health.command = ready
        })
        // A cluster client opens a node's connection on its first command, and without an
        // offline queue refuses the commands that arrive while it is still connecting:
        // connect each node as soon as the client learns of it.
        connection.on("+node", (node: Redis) => {
          if (node.status === "wait") node.connect().catch(() => undefined)
        })
        if (clustered !== undefined) connection.on("refresh", () => onTopology())
        return connection
      }),
      (connection) => closeConnection(connection, commandTimeoutMs)
    )
    const commands = command as unknown as CommandConnection

    const openSubscriber = (node: string, nodeEndpoint: Endpoint): Subscriber => {
      const connection = openConnection(nodeEndpoint, connectionOptions("subscriber", timeouts), onError)
      const subscriber: Subscriber = { node, connection, ready: false, generation: 0 }
      track(connection, (ready) => {
        subscriber.ready = ready
        if (!ready) dropSubscriptions(subscriber)
      })
      connection.on("pmessage", onSocketEvent)
      connection.on(clustered === undefined ? "message" : "smessage", onSignal)
      subscribers.set(node, subscriber)
      return subscriber
    }
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        return Effect.forEach(subscribers.values(), (s) => closeConnection(s.connection, commandTimeoutMs), {
          concurrency: "unbounded",
          discard: true
        })
      })
    )

    /** The masters the cluster client knows of now; a cluster client that is not ready knows none. */
    const masters = (): ReadonlyArray<Redis> => (clustered === undefined ? [] : (command as Cluster).nodes("master"))

    /** The subscriber connection of a node (cluster), opened on first use. */
    const nodeSubscriber = (node: string): Effect.Effect<Subscriber, StoreUnavailable> =>
      Effect.suspend(() => {
        const existing = subscribers.get(node)
        if (existing !== undefined) return Effect.succeed(existing)
        if (closed || clustered === undefined) {
          return Effect.fail(new StoreUnavailable({ operation: "subscribe", reason: "the store is closed" }))
        }
        return Effect.succeed(openSubscriber(node, clustered.nodeEndpoint(node)))
      })

    /** The node serving a key's (or a shard channel's) slot, as `host:port`. */
    const slotNode = (operation: string, key: string): Effect.Effect<string, StoreUnavailable> =>
      Effect.suspend(() => {
        const node = slotMaster(command as Cluster, keySlot(key))
        return node === undefined
          ? Effect.fail(new StoreUnavailable({ operation, reason: `no node of ${endpoint.safeUrl} serves ${key}` }))
          : Effect.succeed(node)
      })

    /** The subscriber connection a channel is subscribed on. */
    const subscriberFor = (name: string): Effect.Effect<Subscriber, StoreUnavailable> =>
      clustered === undefined
        ? Effect.sync(() => subscribers.get("")!)
        : Effect.flatMap(slotNode("subscribe", name), nodeSubscriber)

    /** Every subscriber connection keyspace notifications need: the only one, or one per master. */
    const allSubscribers: Effect.Effect<ReadonlyArray<Subscriber>, StoreUnavailable> = Effect.suspend(() =>
      clustered === undefined
        ? Effect.succeed([subscribers.get("")!])
        : Effect.forEach(masters(), (master) => nodeSubscriber(nodeKey(master)))
    )

    /** A cluster's MOVED reply on a connection of ours: the slot table is stale. */
    const onClusterError = (cause: unknown) => {
      if (clustered !== undefined && cause instanceof Error && /^(MOVED|ASK)\b/.test(cause.message)) {
        ;(command as Cluster).refreshSlotsCache()
      }
    }

    // Blocking reads get their own connection, opened on first use (on a cluster, to the
    // node owning the mailbox): a blocked command would stall every command queued
    // behind it on a shared connection.
    let blocking: { readonly node: string; readonly connection: Redis } | undefined
    let blockingClientId: number | undefined
    const blockingPermit = yield* Effect.makeSemaphore(1)
    const blockingConnection = (key: string): Effect.Effect<Redis, StoreUnavailable> =>
      Effect.gen(function* () {
        const node = clustered === undefined ? "" : yield* slotNode("mailboxRead", key)
        if (blocking !== undefined && blocking.node === node) return blocking.connection
        // The mailbox moved to another node: the old connection serves nothing now.
        if (blocking !== undefined) blocking.connection.disconnect()
        blocking = undefined
        blockingClientId = undefined
        // A read after the store's scope closed must not open a connection nobody closes.
        if (closed)
          return yield* Effect.fail(new StoreUnavailable({ operation: "mailboxRead", reason: "the store is closed" }))
        const nodeEndpoint = clustered === undefined ? endpoint : clustered.nodeEndpoint(node)
        const connection = openConnection(nodeEndpoint, connectionOptions("blocking", timeouts), onError)
        connection.on("ready", () => {
          connection.client("ID").then(
            (id) => {
              if (blocking?.connection === connection) blockingClientId = id
            },
            () => undefined
          )
        })
        connection.on("close", () => {
          if (blocking?.connection === connection) blockingClientId = undefined
        })
        blocking = { node, connection }
        return connection
      })
    // No QUIT here: it would queue behind a blocked read. Nothing on this connection is
    // worth waiting for.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        blocking?.connection.disconnect()
      })
    )

    if (clustered === undefined) {
      openSubscriber("", endpoint)
      yield* Effect.all(
        [
          awaitReady(command, connectTimeoutMs, notConnected("connect", connectTimeoutMs)),
          awaitReady(subscribers.get("")!.connection, connectTimeoutMs, notConnected("connect", connectTimeoutMs))
        ],
        { concurrency: 2, discard: true }
      )
    } else {
      // The masters are known once the cluster client is ready; each gets its subscriber.
      yield* Effect.gen(function* () {
        yield* awaitReady(command, connectTimeoutMs, notConnected("connect", connectTimeoutMs))
        const all = yield* allSubscribers
        yield* Effect.forEach(
          [...masters(), ...all.map((s) => s.connection)],
          (connection) => awaitReady(connection, connectTimeoutMs, notConnected("connect", connectTimeoutMs)),
          { concurrency: "unbounded", discard: true }
        )
      }).pipe(
        Effect.timeoutFail({ duration: connectTimeoutMs, onTimeout: notConnected("connect", connectTimeoutMs) }),
        withLiveClock
      )
    }
    yield* syncStatus

    // The cluster client re-reads its slot table on a MOVED reply; this re-reads it every
    // 5 s too, so that slots that moved with no command of ours touching them are noticed
    // (`onTopology`). Not ioredis' `slotsRefreshInterval`: its timer can outlive the client.
    if (clustered !== undefined) {
      yield* Effect.sleep(Duration.seconds(5)).pipe(
        Effect.zipRight(
          Effect.async<void>((resume) => {
            ;(command as Cluster).refreshSlotsCache(() => resume(Effect.void))
          })
        ),
        Effect.forever,
        withLiveClock,
        Effect.interruptible,
        Effect.forkScoped
      )
    }

    // --- command helper -------------------------------------------------------------
    /**
     * Run one command. On a connection that is not ready (Redis away, or reconnecting)
     * wait for it, but never longer than the command timeout in all.
     */
    const run = <A>(operation: string, f: (connection: CommandConnection) => Promise<A>) => {
      const attempt = Effect.tryPromise({
        try: () => f(commands),
        catch: (cause) => {
          onClusterError(cause)
          return mapError(operation)(cause)
        }
      })
      return Effect.suspend(() =>
        command.status === "ready"
          ? attempt
          : awaitReady(command, commandTimeoutMs, notConnected(operation, commandTimeoutMs)).pipe(
              Effect.zipRight(attempt),
              Effect.timeoutFail({ duration: commandTimeoutMs, onTimeout: notConnected(operation, commandTimeoutMs) }),
              withLiveClock
            )
      )
    }

    /** Call a script with named keys and arguments; a reply of another shape is `StoreRefused`. */
    const runScript = <K extends string, A extends string, R>(
      operation: string,
      script: Script<K, A, R>,
      input: Input<K, A>
    ): Effect.Effect<R, StoreError> =>
      Effect.flatMap(
        run(operation, (c) => invoke(c, script, input)),
        (reply) => {
          const decoded = script.decode(reply)
          return decoded === undefined ? Effect.fail(unexpectedReply(operation, reply)) : Effect.succeed(decoded)
        }
      )

    /**
     * Single-key commands as one batch, each settled on its own: a pipeline on a single
     * server; on a cluster, where a pipeline must not span nodes, each command routed alone.
     */
    const runBatch = (operation: string, batch: ReadonlyArray<readonly [name: string, ...args: Array<string>]>) =>
      run(operation, (c): Promise<ReadonlyArray<[Error | null, unknown]> | null> => {
        if (clustered === undefined) return (command as Redis).pipeline(batch.map((entry) => [...entry])).exec()
        const byName = c as unknown as Record<string, (...args: Array<string>) => Promise<unknown>>
        return settleEach(
          batch.map(
            ([name, ...args]) =>
              () =>
                byName[name]!(...args)
          )
        )
      })

    /** One command on one node, failing within the command timeout when the node is away. */
    const runOn =
      (connection: Redis) =>
      <A>(operation: string, f: (connection: Redis) => Promise<A>): Effect.Effect<A, StoreError> =>
        Effect.tryPromise({ try: () => f(connection), catch: mapError(operation) }).pipe(
          Effect.timeoutFail({ duration: commandTimeoutMs, onTimeout: notConnected(operation, commandTimeoutMs) }),
          withLiveClock
        )

    /** What scans and per-node settings run on: the only server, or every master of a cluster. */
    const nodes = (): ReadonlyArray<Node> =>
      clustered === undefined
        ? [{ name: endpoint.safeUrl, run: (operation, f) => run(operation, () => f(command as Redis)) }]
        : masters().map((master) => ({ name: nodeKey(master), run: runOn(master) }))

    const remaining = (pttl: unknown): number => {
      const value = Number(pttl)
      if (value >= 0) return value
      // -1: a lock without TTL, written by someone else; waiters re-check within a lock expiration.
      return value === -1 ? lockMs : 0
    }

    // --- lock -----------------------------------------------------------------------
    /** The ARGV of a lock script's waiter part: instance id ("" for none), register flag, contended message. */
    const waiterArgs = (options: WaiterOptions | undefined) =>
      options === undefined
        ? { instanceId: "", register: "0", contended: "" }
        : {
            instanceId: options.instanceId,
            register: options.register === true ? "1" : "0",
            contended: encodeSignal({ _tag: "Contended", instanceId: options.instanceId })
          }

    const tryAcquire = Effect.fnUntraced(function* (
      token: string,
      lockId: string,
      slices: ReadonlyArray<string>,
      options?: WaiterOptions
    ) {
      yield* validateTokenAndInstance(token, options?.instanceId)
      yield* validateSliceNames(slices)
      const reply = yield* runScript("tryAcquire", Scripts.tryAcquire, {
        keys: { lock: keys.lock(token), fence: keys.fence(token), waiters: keys.waiters(token) },
        restKeys: slices.map((name) => keys.slice(token, name)),
        args: { lockId, lockMs, tokenMs, channel: keys.signal(token), ...waiterArgs(options) }
      })
      if (reply._tag === "Held") return { _tag: "Held", remainingMs: remaining(reply.pttl) } satisfies AcquireResult
      if (reply.values.length !== slices.length) return yield* Effect.fail(unexpectedReply("tryAcquire", reply))
      return {
        _tag: "Acquired",
        fence: reply.fence,
        values: reply.values.map(Option.fromNullable),
        contenders: reply.contenders
      } satisfies AcquireResult
    })

    const release = Effect.fnUntraced(function* (token: string, lockId: string, options?: WaiterOptions) {
      yield* validateTokenAndInstance(token, options?.instanceId)
      return yield* runScript("release", Scripts.release, {
        keys: { lock: keys.lock(token), waiters: keys.waiters(token) },
        args: { lockId, channel: keys.signal(token), releasedMessage: released(lockId), lockMs, ...waiterArgs(options) }
      })
    })

    const writeIfHolder = Effect.fnUntraced(function* (
      token: string,
      lockId: string,
      entries: ReadonlyArray<SliceEntry>
    ) {
      yield* validateToken(token)
      yield* validateSliceNames(entries.map(([name]) => name))
      const reply = yield* runScript("writeIfHolder", Scripts.writeIfHolder, {
        keys: { lock: keys.lock(token), fence: keys.fence(token) },
        restKeys: entries.map(([name]) => keys.slice(token, name)),
        args: { lockId, tokenMs },
        restArgs: entries.map(([, value]) => value)
      })
      if (reply._tag === "Lost") {
        return yield* Effect.fail(new LockLost({ token, lockId, holder: Option.fromNullable(reply.holder) }))
      }
    })

    const commitAndRelease = Effect.fnUntraced(function* (
      token: string,
      lockId: string,
      entries: ReadonlyArray<SliceEntry>,
      options?: WaiterOptions
    ) {
      yield* validateTokenAndInstance(token, options?.instanceId)
      yield* validateSliceNames(entries.map(([name]) => name))
      const reply = yield* runScript("commitAndRelease", Scripts.commitAndRelease, {
        keys: { lock: keys.lock(token), fence: keys.fence(token), waiters: keys.waiters(token) },
        restKeys: entries.map(([name]) => keys.slice(token, name)),
        args: {
          lockId,
          tokenMs,
          channel: keys.signal(token),
          releasedMessage: released(lockId),
          lockMs,
          ...waiterArgs(options)
        },
        restArgs: entries.map(([, value]) => value)
      })
      if (reply._tag === "Lost") {
        return yield* Effect.fail(new LockLost({ token, lockId, holder: Option.fromNullable(reply.holder) }))
      }
      return reply.contenders
    })

    const extend = Effect.fnUntraced(function* (token: string, lockId: string, slices: ReadonlyArray<string> = []) {
      yield* validateToken(token)
      yield* validateSliceNames(slices)
      return yield* runScript("extend", Scripts.extend, {
        keys: { lock: keys.lock(token), fence: keys.fence(token) },
        restKeys: slices.map((name) => keys.slice(token, name)),
        args: { lockId, lockMs, tokenMs }
      })
    })

    const holder = Effect.fnUntraced(function* (token: string) {
      yield* validateToken(token)
      const reply = yield* runScript("holder", Scripts.holder, {
        keys: { lock: keys.lock(token), fence: keys.fence(token) },
        args: {}
      })
      if (reply._tag === "Free") return Option.none<LockHolder>()
      if (reply.fence !== null && !Number.isSafeInteger(Number(reply.fence))) {
        return yield* Effect.fail(
          new StoreRefused({ operation: "holder", reply: "ERR value is not an integer or out of range" })
        )
      }
      return Option.some<LockHolder>({
        lockId: reply.lockId,
        // The fence lives as long as the slices; a lock outliving it reports 0.
        fence: reply.fence === null ? 0 : Number(reply.fence),
        remainingMs: remaining(reply.pttl)
      })
    })

    // --- waiters --------------------------------------------------------------------
    const registerWaiter = Effect.fnUntraced(function* (token: string, instanceId: string) {
      yield* validateTokens(token, instanceId)
      yield* runScript("registerWaiter", Scripts.registerWaiter, {
        keys: { waiters: keys.waiters(token) },
        args: {
          instanceId,
          lockMs,
          channel: keys.signal(token),
          contended: encodeSignal({ _tag: "Contended", instanceId })
        }
      })
    })

    const deregisterWaiter = Effect.fnUntraced(function* (token: string, instanceId: string) {
      yield* validateTokens(token, instanceId)
      yield* runScript("deregisterWaiter", Scripts.deregisterWaiter, {
        keys: { waiters: keys.waiters(token) },
        args: { instanceId }
      })
    })

    const otherContenders = Effect.fnUntraced(function* (token: string, instanceId: string) {
      yield* validateTokens(token, instanceId)
      return yield* runScript("otherContenders", Scripts.otherContenders, {
        keys: { waiters: keys.waiters(token) },
        args: { instanceId }
      })
    })

    const waiters = Effect.fnUntraced(function* (token: string) {
      yield* validateToken(token)
      return yield* runScript("waiters", Scripts.waiters, { keys: { waiters: keys.waiters(token) }, args: {} })
    })

    // --- slices ---------------------------------------------------------------------
    const readSlices = Effect.fnUntraced(function* (token: string, names: ReadonlyArray<string>) {
      yield* validateToken(token)
      yield* validateSliceNames(names)
      if (names.length === 0) return []
      const values = yield* runScript("readSlices", Scripts.readSlices, {
        keys: { fence: keys.fence(token) },
        restKeys: names.map((name) => keys.slice(token, name)),
        args: { tokenMs }
      })
      return names.map((_, i) => Option.fromNullable(values[i]))
    })

    // --- signals --------------------------------------------------------------------
    const publish = Effect.fnUntraced(function* (token: string, signal: Signal) {
      yield* validateTokenAndInstance(token, signalInstance(signal))
      const channel = keys.signal(token)
      yield* run("publish", (c) =>
        clustered === undefined ? c.publish(channel, encodeSignal(signal)) : c.spublish(channel, encodeSignal(signal))
      )
    })

    /** Join the channel's local subscribers; the first one sends SUBSCRIBE (SSUBSCRIBE on a cluster). */
    const join = (
      name: string,
      subscriber: Subscriber,
      mailbox: Mailbox.Mailbox<Signal, StoreUnavailable>
    ): Channel => {
      let channel = channels.get(name)
      if (channel === undefined) {
        const created: Channel = {
          name,
          slot: clustered === undefined ? 0 : keySlot(name),
          subscriber,
          generation: subscriber.generation,
          confirmed: Deferred.unsafeMake<void, StoreError>(FiberId.none),
          subscribers: new Set(),
          refs: 0
        }
        channels.set(name, created)
        // ioredis resolves SUBSCRIBE once the server confirmed it.
        const sent =
          clustered === undefined ? subscriber.connection.subscribe(name) : subscriber.connection.ssubscribe(name)
        sent.then(
          () => Deferred.unsafeDone(created.confirmed, Effect.void),
          (cause) => {
            onClusterError(cause)
            Deferred.unsafeDone(created.confirmed, Effect.fail(mapError("subscribe")(cause)))
            // A refused SUBSCRIBE must not stay cached: the next subscriber tries again.
            if (channels.get(name) === created) channels.delete(name)
          }
        )
        channel = created
      }
      channel.refs++
      channel.subscribers.add(mailbox)
      return channel
    }

    /** Leave the channel; the last one out sends UNSUBSCRIBE, unless the server already forgot it. */
    const leave = (channel: Channel, mailbox: Mailbox.Mailbox<Signal, StoreUnavailable>): Effect.Effect<void> =>
      Effect.suspend(() => {
        channel.subscribers.delete(mailbox)
        mailbox.unsafeDone(Exit.void)
        channel.refs--
        if (channel.refs > 0) return Effect.void
        if (channels.get(channel.name) === channel) channels.delete(channel.name)
        // A newer entry (this one's SUBSCRIBE failed) owns the server's subscription now.
        else if (channels.has(channel.name)) return Effect.void
        const { connection } = channel.subscriber
        if (channel.generation !== channel.subscriber.generation || connection.status !== "ready") return Effect.void
        const sent = () =>
          clustered === undefined ? connection.unsubscribe(channel.name) : connection.sunsubscribe(channel.name)
        return Effect.promise(() => sent().catch(() => undefined)).pipe(
          Effect.timeoutOption(commandTimeoutMs),
          withLiveClock,
          Effect.asVoid
        )
      })

    const subscribe = Effect.fnUntraced(function* (token: string) {
      yield* validateToken(token)
      const name = keys.signal(token)
      const subscriber = yield* subscriberFor(name)
      yield* awaitReady(subscriber.connection, commandTimeoutMs, notConnected("subscribe", commandTimeoutMs))
      const mailbox = yield* Mailbox.make<Signal, StoreUnavailable>()
      const channel = yield* Effect.acquireRelease(
        Effect.sync(() => join(name, subscriber, mailbox)),
        (channel) => leave(channel, mailbox)
      )
      yield* Deferred.await(channel.confirmed).pipe(
        Effect.timeoutFail({
          duration: commandTimeoutMs,
          onTimeout: () =>
            new StoreUnavailable({ operation: "subscribe", reason: "no confirmation within the command timeout" })
        }),
        withLiveClock
      )
      return Mailbox.toStream(mailbox)
    })

    // --- socket records -------------------------------------------------------------
    /** A claim's keys and arguments, alone or in a batch. */
    const claimInput = (token: string, record: SocketRecord) => ({
      keys: { socket: keys.socket(token) },
      args: { record: encodeSocketRecord(record), tokenMs }
    })

    /** A claim's reply: claimed, or taken by the record there (which may be corrupt). */
    const claimResult = (
      operation: string,
      token: string,
      reply: unknown
    ): Either.Either<ClaimResult, CorruptValue | StoreRefused> => {
      const claimed = Scripts.claimSocket.decode(reply)
      if (claimed === undefined) return Either.left(unexpectedReply(operation, reply))
      if (claimed._tag === "Claimed") return Either.right(claimed)
      return Either.map(
        decodeSocketRecord(keys.socket(token), claimed.raw),
        (record): ClaimResult => ({ _tag: "Taken", record })
      )
    }

    const claimSocket = Effect.fnUntraced(function* (token: string, record: SocketRecord) {
      yield* validateTokenAndInstance(token, record.instanceId)
      const reply = yield* run("claimSocket", (c) => invoke(c, Scripts.claimSocket, claimInput(token, record)))
      return yield* claimResult("claimSocket", token, reply)
    })

    const readSocket = Effect.fnUntraced(function* (token: string) {
      yield* validateToken(token)
      const key = keys.socket(token)
      const raw = yield* run("readSocket", (c) => c.get(key))
      if (raw === null) return Option.none<SocketRecord>()
      return Option.some(yield* decodeSocketRecord(key, raw))
    })

    const deleteSocketIfOwner = Effect.fnUntraced(function* (token: string, record: SocketRecord) {
      yield* validateTokenAndInstance(token, record.instanceId)
      return yield* runScript("deleteSocketIfOwner", Scripts.deleteSocketIfOwner, {
        keys: { socket: keys.socket(token) },
        args: { instanceId: record.instanceId, connectionId: record.connectionId }
      })
    })

    const refreshSocket = Effect.fnUntraced(function* (token: string, record: SocketRecord) {
      yield* validateTokenAndInstance(token, record.instanceId)
      return yield* runScript("refreshSocket", Scripts.refreshSocket, {
        keys: { socket: keys.socket(token) },
        args: { instanceId: record.instanceId, connectionId: record.connectionId, tokenMs }
      })
    })

    /** One SCAN page of one node, then the records of its keys in one batched round trip. */
    const scanPage = (node: Node, cursor: string) =>
      Effect.gen(function* () {
        const [next, found] = yield* node.run("scanSockets", (c) =>
          c.scan(cursor, "MATCH", keys.socketPattern, "COUNT", 500)
        )
        const candidates = found.flatMap((key) => {
          const token = keys.socketToken(key)
          return token !== undefined && isValidToken(token) ? [[key, token] as const] : []
        })
        const records: Array<readonly [token: string, record: SocketRecord]> = []
        if (candidates.length > 0) {
          const replies = yield* runBatch(
            "scanSockets",
            candidates.map(([key]) => ["get", key] as const)
          )
          for (let i = 0; i < candidates.length; i++) {
            const [key, token] = candidates[i]!
            const [error, raw] = replies?.[i] ?? [null, null]
            if (error !== null) {
              yield* Effect.logWarning(`RedisStore.scanSockets: skipping ${key}: ${scrub(endpoint, error.message)}`)
              continue
            }
            // Gone between SCAN and GET: the socket disconnected or its record expired.
            if (typeof raw !== "string") continue
            const decoded = decodeSocketRecord(key, raw)
            if (Either.isLeft(decoded)) {
              yield* Effect.logWarning(`RedisStore.scanSockets: skipping ${decoded.left.message}`)
              continue
            }
            records.push([token, decoded.right])
          }
        }
        return [Chunk.unsafeFromArray(records), next] as const
      })

    /** Every node's keys, node after node; a cluster's masters as the client knows them when the scan starts. */
    const scanSockets: Stream.Stream<readonly [token: string, record: SocketRecord], StoreError> = Stream.suspend(
      () => {
        const all = nodes()
        if (all.length === 0) return Stream.fail(notConnected("scanSockets", 0)())
        return Stream.paginateChunkEffect({ node: 0, cursor: "0" }, ({ node, cursor }) =>
          Effect.map(scanPage(all[node]!, cursor), ([records, next]) => {
            if (next !== "0") return [records, Option.some({ node, cursor: next })] as const
            return [
              records,
              node + 1 < all.length ? Option.some({ node: node + 1, cursor: "0" }) : Option.none()
            ] as const
          })
        )
      }
    )

    /** Each claim is its own script (one slot each); batched, they cost one round trip (per node). */
    const claimSockets = Effect.fnUntraced(function* (
      claims: ReadonlyArray<readonly [token: string, record: SocketRecord]>
    ) {
      for (const [token, record] of claims) yield* validateTokenAndInstance(token, record.instanceId)
      if (claims.length === 0) return []
      const replies = yield* runBatch(
        "claimSockets",
        claims.map(([token, record]) => commandLine(Scripts.claimSocket, claimInput(token, record)))
      )
      const results: Array<Either.Either<ClaimResult, CorruptValue | StoreRefused>> = []
      for (let i = 0; i < claims.length; i++) {
        const [error, reply] = replies?.[i] ?? [null, null]
        if (error !== null) {
          const mapped = mapError("claimSockets")(error)
          // A lost connection fails the whole batch; a refused step (a key of another
          // type) is that record's own failure.
          if (mapped._tag === "StoreUnavailable") return yield* Effect.fail(mapped)
          results.push(Either.left(mapped))
          continue
        }
        results.push(claimResult("claimSockets", claims[i]![0], reply))
      }
      return results
    })

    /** CONFIG GET, then CONFIG SET only when a needed flag is missing; any error reply means refused. */
    const enableOn = (node: Node): Effect.Effect<SocketEventsSetting, StoreUnavailable> =>
      Effect.gen(function* () {
        const reply = yield* node.run("enableSocketEvents", (c) => c.config("GET", "notify-keyspace-events"))
        const list = asArray(reply)
        const current = typeof list?.[1] === "string" ? list[1] : ""
        const missing = missingFlags(current)
        if (missing === "") return { _tag: "Enabled", flags: current } as const
        const flags = `${current}${missing}`
        yield* node.run("enableSocketEvents", (c) => c.config("SET", "notify-keyspace-events", flags))
        return { _tag: "Enabled", flags } as const
      }).pipe(
        Effect.catchTag("StoreRefused", (refused) =>
          Effect.succeed<SocketEventsSetting>({ _tag: "Refused", reply: refused.reply })
        )
      )

    /** Keyspace notifications are per node: a cluster enables them on every master, and is refused if one refuses. */
    const enableSocketEvents: Effect.Effect<SocketEventsSetting, StoreUnavailable> = Effect.suspend(() => {
      const all = nodes()
      if (all.length === 0) return Effect.fail(notConnected("enableSocketEvents", 0)())
      return Effect.map(
        Effect.forEach(all, enableOn, { concurrency: "unbounded" }),
        (settings) => settings.find((setting) => setting._tag === "Refused") ?? settings[0]!
      )
    })

    /**
     * The first listener sends PSUBSCRIBE (on every master of a cluster: keyspace events are
     * published on the node whose key changed); a refused one is not kept, so the next
     * listener tries again.
     */
    const joinSocketWatch = (
      on: ReadonlyArray<Subscriber>,
      mailbox: Mailbox.Mailbox<SocketEvent, StoreUnavailable>
    ): SocketWatch => {
      let watch = socketWatch
      if (watch === undefined) {
        const created: SocketWatch = {
          parts: on.map((subscriber) => ({ subscriber, generation: subscriber.generation })),
          confirmed: Deferred.unsafeMake<void, StoreError>(FiberId.none),
          subscribers: new Set()
        }
        socketWatch = created
        Promise.all(on.map((subscriber) => subscriber.connection.psubscribe(keyspace.pattern))).then(
          () => Deferred.unsafeDone(created.confirmed, Effect.void),
          (cause) => {
            Deferred.unsafeDone(created.confirmed, Effect.fail(mapError("socketEvents")(cause)))
            if (socketWatch === created) socketWatch = undefined
          }
        )
        watch = created
      }
      watch.subscribers.add(mailbox)
      return watch
    }

    const leaveSocketWatch = (
      watch: SocketWatch,
      mailbox: Mailbox.Mailbox<SocketEvent, StoreUnavailable>
    ): Effect.Effect<void> =>
      Effect.suspend(() => {
        watch.subscribers.delete(mailbox)
        mailbox.unsafeDone(Exit.void)
        if (watch.subscribers.size > 0 || socketWatch !== watch) return Effect.void
        socketWatch = undefined
        const live = watch.parts.filter(
          ({ subscriber, generation }) =>
            subscriber.generation === generation && subscriber.connection.status === "ready"
        )
        return Effect.forEach(
          live,
          ({ subscriber }) =>
            Effect.promise(() => subscriber.connection.punsubscribe(keyspace.pattern).catch(() => undefined)).pipe(
              Effect.timeoutOption(commandTimeoutMs),
              withLiveClock
            ),
          { concurrency: "unbounded", discard: true }
        )
      })

    const socketEvents = Effect.gen(function* () {
      const on = yield* allSubscribers
      if (on.length === 0) return yield* Effect.fail(notConnected("socketEvents", commandTimeoutMs)())
      yield* Effect.forEach(
        on,
        (s) => awaitReady(s.connection, commandTimeoutMs, notConnected("socketEvents", commandTimeoutMs)),
        { concurrency: "unbounded", discard: true }
      )
      const mailbox = yield* Mailbox.make<SocketEvent, StoreUnavailable>()
      const watch = yield* Effect.acquireRelease(
        Effect.sync(() => joinSocketWatch(on, mailbox)),
        (watch) => leaveSocketWatch(watch, mailbox)
      )
      yield* Deferred.await(watch.confirmed).pipe(
        Effect.timeoutFail({
          duration: commandTimeoutMs,
          onTimeout: () =>
            new StoreUnavailable({ operation: "socketEvents", reason: "no confirmation within the command timeout" })
        }),
        withLiveClock
      )
      return Mailbox.toStream(mailbox)
    })

    // --- mailboxes ------------------------------------------------------------------
    const mailboxAppend = Effect.fnUntraced(function* (
      instanceId: string,
      payload: string,
      options: { readonly maxLen: number; readonly ttlMs: number }
    ) {
      yield* validateToken(instanceId)
      const ttlMs = Math.max(1, Math.ceil(options.ttlMs))
      return yield* runScript("mailboxAppend", Scripts.mailboxAppend, {
        keys: { mailbox: keys.mailbox(instanceId) },
        args: { maxLen: options.maxLen, payload, ttlMs }
      })
    })

    /** Ask the server to end a blocking read whose caller went away, so the connection is free again. */
    const unblock = () => {
      if (blockingClientId === undefined || blocking === undefined) return
      const node = blocking.node
      // The UNBLOCK goes to the node the read blocks on.
      const via = clustered === undefined ? (command as Redis) : masters().find((master) => nodeKey(master) === node)
      if (via !== undefined && via.status === "ready") via.client("UNBLOCK", blockingClientId).catch(() => undefined)
    }

    const readBlocking = (key: string, afterId: string, count: number, blockMs: number) =>
      blockingPermit.withPermits(1)(
        Effect.gen(function* () {
          const connection = yield* blockingConnection(key)
          yield* awaitReady(connection, commandTimeoutMs, notConnected("mailboxRead", commandTimeoutMs))
          const reply = yield* Effect.tryPromise({
            try: () => connection.xread("COUNT", count, "BLOCK", blockMs, "STREAMS", key, afterId),
            catch: mapError("mailboxRead")
          }).pipe(
            Effect.onInterrupt(() => Effect.sync(unblock)),
            Effect.timeout(blockMs + commandTimeoutMs),
            withLiveClock,
            Effect.catchTag("TimeoutException", () =>
              // No reply long after the block ended: the connection is dead without
              // knowing it. Start a fresh one rather than queue behind the lost read.
              Effect.sync(() => connection.disconnect(true)).pipe(
                Effect.zipRight(
                  Effect.fail(new StoreUnavailable({ operation: "mailboxRead", reason: "no reply to a blocking read" }))
                )
              )
            )
          )
          if (reply === null) return []
          const [stream] = reply
          return decodeEntries(stream?.[1])
        })
      )

    const mailboxRead = Effect.fnUntraced(function* (
      instanceId: string,
      afterId: string,
      options: { readonly count: number; readonly blockMs?: number }
    ) {
      yield* validateToken(instanceId)
      const count = Math.floor(options.count)
      if (!(count >= 1)) return []
      const key = keys.mailbox(instanceId)
      // `(` makes the start exclusive (Redis 6.2+); "(0-0" reads from the very start.
      const reply = yield* run("mailboxRead", (c) => c.xrange(key, `(${afterId}`, "+", "COUNT", count))
      const entries = decodeEntries(reply)
      const blockMs = options.blockMs === undefined ? 0 : Math.ceil(options.blockMs)
      if (entries.length > 0 || !(blockMs >= 1)) return entries
      // XREAD from the same id cannot miss an entry appended since the XRANGE.
      return yield* readBlocking(key, afterId, count, blockMs)
    })

    const mailboxTrim = Effect.fnUntraced(function* (instanceId: string, maxLen: number) {
      yield* validateToken(instanceId)
      yield* run("mailboxTrim", (c) => c.xtrim(keys.mailbox(instanceId), "MAXLEN", maxLen))
    })

    const mailboxExpire = Effect.fnUntraced(function* (instanceId: string, ttlMs: number) {
      yield* validateToken(instanceId)
      yield* run("mailboxExpire", (c) => c.pexpire(keys.mailbox(instanceId), Math.max(1, Math.ceil(ttlMs))))
    })

    const mailboxLength = Effect.fnUntraced(function* (instanceId: string) {
      yield* validateToken(instanceId)
      return yield* run("mailboxLength", (c) => c.xlen(keys.mailbox(instanceId)))
    })

    const mailboxSetCursor = Effect.fnUntraced(function* (instanceId: string, id: string, ttlMs: number) {
      yield* validateToken(instanceId)
      yield* run("mailboxSetCursor", (c) =>
        c.set(keys.mailboxCursor(instanceId), id, "PX", Math.max(1, Math.ceil(ttlMs)))
      )
    })

    const mailboxCursor = Effect.fnUntraced(function* (instanceId: string) {
      yield* validateToken(instanceId)
      const raw = yield* run("mailboxCursor", (c) => c.get(keys.mailboxCursor(instanceId)))
      return Option.fromNullable(raw)
    })

    const tokenKeys = Effect.fnUntraced(function* (token: string) {
      yield* validateToken(token)
      // Every key of the token shares its hash tag: on a cluster they all live on one master.
      const owner = clustered === undefined ? "" : yield* slotNode("tokenKeys", keys.tokenHead(token))
      const node = nodes().find((candidate) => clustered === undefined || candidate.name === owner)
      if (node === undefined) return yield* Effect.fail(notConnected("tokenKeys", commandTimeoutMs)())
      const found = new Set<string>()
      let cursor = "0"
      do {
        const [next, page] = yield* node.run("tokenKeys", (c) =>
          c.scan(cursor, "MATCH", keys.tokenPattern(token), "COUNT", 1000)
        )
        for (const key of page) found.add(key)
        cursor = next
      } while (cursor !== "0")
      if (found.size === 0) return []
      const names = [...found].sort()
      const described = yield* runScript("tokenKeys", Scripts.describeKeys, { keys: {}, restKeys: names, args: {} })
      const head = keys.tokenHead(token)
      const infos: Array<KeyInfo> = []
      for (const [i, { pttl, size, type }] of described.entries()) {
        // Expired or deleted between the scan and the script.
        if (type === "none") continue
        infos.push({
          name: names[i]!.slice(head.length),
          kind: type === "string" ? type : type === "zset" ? "set" : "other",
          size,
          ttlMs: pttl >= 0 ? Option.some(pttl) : Option.none()
        })
      }
      return infos
    })

    const service: Store.Service = {
      kind: "redis",
      tryAcquire,
      release,
      commitAndRelease,
      extend,
      holder,
      registerWaiter,
      deregisterWaiter,
      otherContenders,
      waiters,
      readSlices,
      writeIfHolder,
      publish,
      subscribe,
      status: SubscriptionRef.get(statusRef),
      statusChanges: statusRef.changes,
      claimSocket,
      readSocket,
      deleteSocketIfOwner,
      refreshSocket,
      scanSockets,
      claimSockets,
      enableSocketEvents,
      socketEvents,
      mailboxAppend,
      mailboxRead,
      mailboxTrim,
      mailboxExpire,
      mailboxLength,
      mailboxSetCursor,
      mailboxCursor,
      tokenKeys
    }
    return service
  })

/**
 * The Redis store as a layer. The URL comes from `options.url`, else from the
 * `redisUrl` of `LeaseholdConfig` (neither: `InvalidConfig`). Building fails with
 * `StoreUnavailable` when Redis cannot be reached within `connectTimeout`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options = {}): Layer.Layer<Store, StoreUnavailable | InvalidConfig, LeaseholdConfig> =>
  Layer.scoped(Store, make(options))
