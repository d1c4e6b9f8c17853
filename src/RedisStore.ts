/**
 * `Store` over Redis with ioredis. This module reads the options and assembles the parts
 * under `internal/redis/`: the connections' health (`health`), where commands go
 * (`topology`: one server, or a Cluster), pub/sub (`pubsub`), blocking mailbox reads
 * (`blocking`) and the driver (`driver`: one Lua script per atomic operation, from
 * `scripts/`), behind the checked front every store shares. Keys follow docs/protocol.md; every
 * script touches the keys of one token only, so the layout is Cluster-safe.
 *
 * On a Redis Cluster (`cluster: true`, or `redisCluster` in `LeaseholdConfig`) the command
 * connection is an ioredis `Cluster` client, and there is one subscriber connection per
 * master: signals use sharded pub/sub (SSUBSCRIBE on the node owning the token's slot,
 * SPUBLISH from the scripts), socket-record scans and keyspace notifications cover every
 * master, and a blocking mailbox read runs on a connection to the node owning the mailbox.
 *
 * Behind Sentinel (`sentinels`, or `redisSentinels` in `LeaseholdConfig`) every connection
 * asks the Sentinels for the primary when it connects, checks the server's role, and drops
 * when they announce a promotion (or when a write meets `READONLY`): the command,
 * subscriber and blocking connections all reconnect to the new primary, the subscriptions
 * fail as on any lost connection, and the store is ready again in a new epoch.
 *
 * With `minReplicasAck` at least 1 (`LEASEHOLD_MIN_REPLICAS_ACK`), the steps whose loss
 * would break a promise (grants with their fence, group commits, commits with their
 * release) go on a connection of their own, in batches each followed by one `WAIT`
 * (`internal/redis/acknowledged`); a step whose replicas do not report in time fails with
 * `NotAcknowledged`. On one server with replicas and behind Sentinel; not on a Cluster.
 *
 * The connections reconnect by themselves forever; an operation issued while Redis is
 * away fails with `StoreUnavailable` within the command timeout, and operations work
 * again as soon as Redis is back. Subscription streams fail when the subscriber
 * connection drops (the server forgot the subscriptions); callers subscribe again.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as Environment from "./internal/config/environment.js"
import { makeKeys } from "./internal/keys.js"
import * as Acknowledged from "./internal/redis/acknowledged.js"
import * as Blocking from "./internal/redis/blocking.js"
import { type ClusterEndpoint, parseClusterEndpoint } from "./internal/redis/cluster.js"
import { type Endpoint, parseEndpoint, withLiveClock } from "./internal/redis/connection.js"
import * as RedisDriver from "./internal/redis/driver.js"
import * as Health from "./internal/redis/health.js"
import * as PubSub from "./internal/redis/pubsub.js"
import { parseSentinels } from "./internal/redis/sentinel.js"
import * as Topology from "./internal/redis/topology.js"
import * as Front from "./internal/store/front.js"
import { InvalidConfig, LeaseholdConfig, type Settings } from "./LeaseholdConfig.js"
import { Store } from "./Store.js"
import type { StoreUnavailable } from "./StoreError.js"

/**
 * Where the store connects, given in code (`layer`): a URL, or Sentinels. What is not
 * given here (the `cluster` flag, the master name) comes from `LeaseholdConfig`.
 *
 * @since 0.1.0
 * @category models
 */
export type Options =
  | {
      readonly url: string | Redacted.Redacted
      /**
       * The URL names seed nodes of a Redis Cluster: `redis://[user:password@]host:port[,host:port...]`.
       * Without it, the `redisCluster` of `LeaseholdConfig` decides.
       */
      readonly cluster?: boolean
    }
  | {
      /**
       * Find the primary through Sentinels instead of a URL: `host:port,host:port`, or
       * `redis[s]://[user:password@]host:port,…[/db]`.
       */
      readonly sentinels: string | Redacted.Redacted
      /** The master name the Sentinels monitor; without it, the `redisSentinelName` of `LeaseholdConfig`. */
      readonly sentinelName?: string
    }

const millis = (duration: Duration.Duration): number => Math.max(1, Math.ceil(Duration.toMillis(duration)))

/** Where the store connects: one server, or a cluster through its seed nodes. */
interface Target {
  readonly endpoint: Endpoint
  readonly cluster: ClusterEndpoint | undefined
}

const reveal = (value: string | Redacted.Redacted): string =>
  Redacted.isRedacted(value) ? String(Redacted.value(value)) : value

/** How a problem with one value of the target is said: the knob it came from, in the user's terms. */
type Say = (problem: Omit<Environment.Problem, "knob">) => InvalidConfig

/** A value of the settings: named as the user set it (a variable, or an option of `LeaseholdConfig`). */
const fromSettings =
  (settings: Settings, knob: string): Say =>
  (problem) =>
    new InvalidConfig(Environment.describe(settings, { ...problem, knob }))

/** A value of `layer`'s options: named as the option. */
const fromOptions =
  (option: string): Say =>
  (problem) =>
    new InvalidConfig({ ...problem, knob: option })

/** The primary as the Sentinels name it. */
const sentinelTarget = (
  list: string,
  name: Option.Option<string>,
  say: { readonly sentinels: Say; readonly sentinelName: Say }
): Effect.Effect<Target, InvalidConfig> => {
  if (Option.isNone(name)) {
    return Effect.fail(say.sentinelName({ value: "(unset)", reason: "must name the master the Sentinels monitor" }))
  }
  const parsed = parseSentinels(list, name.value)
  return parsed === undefined
    ? Effect.fail(
        say.sentinels({
          value: "<redacted>",
          reason:
            "must be host:port[,host:port...] or a redis:// or rediss:// URL listing them, with an optional database number"
        })
      )
    : Effect.succeed({ endpoint: { ...parsed.endpoint, sentinel: parsed.target }, cluster: undefined })
}

/** Where the settings say to connect: Sentinels, else the URL (one server or a Cluster). */
const settingsTarget = (settings: Settings): Effect.Effect<Target, InvalidConfig> => {
  if (Option.isSome(settings.redisSentinels)) {
    return sentinelTarget(reveal(settings.redisSentinels.value), settings.redisSentinelName, {
      sentinels: fromSettings(settings, "redisSentinels"),
      sentinelName: fromSettings(settings, "redisSentinelName")
    })
  }
  const url = fromSettings(settings, "redisUrl")
  return Option.isSome(settings.redisUrl)
    ? urlTarget(reveal(settings.redisUrl.value), settings.redisCluster, url)
    : Effect.fail(url({ value: "(unset)", reason: "must be set to use the Redis store" }))
}

const urlTarget = (url: string, cluster: boolean, say: Say): Effect.Effect<Target, InvalidConfig> => {
  if (cluster) {
    const seeds = parseClusterEndpoint(url)
    return seeds === undefined
      ? Effect.fail(
          say({
            value: "<redacted>",
            reason: "must be a redis:// or rediss:// URL listing host:port seed nodes, without a database other than 0"
          })
        )
      : Effect.succeed({ endpoint: seeds.endpoint, cluster: seeds })
  }
  const endpoint = parseEndpoint(url)
  return endpoint === undefined
    ? Effect.fail(say({ value: "<redacted>", reason: "must be a redis:// or rediss:// URL with a host" }))
    : Effect.succeed({ endpoint, cluster: undefined })
}

/** Given in code: each value named by where it came from, an option or the settings. */
const optionsTarget = (options: Options, settings: Settings): Effect.Effect<Target, InvalidConfig> =>
  "sentinels" in options
    ? sentinelTarget(
        reveal(options.sentinels),
        options.sentinelName !== undefined ? Option.some(options.sentinelName) : settings.redisSentinelName,
        {
          sentinels: fromOptions("sentinels"),
          sentinelName:
            options.sentinelName !== undefined
              ? fromOptions("sentinelName")
              : fromSettings(settings, "redisSentinelName")
        }
      )
    : urlTarget(reveal(options.url), options.cluster ?? settings.redisCluster, fromOptions("url"))

/**
 * Build a Redis-backed store in the current scope. Waits for both connections to be
 * ready, at most `connectTimeout`; the connections close when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  options?: Options
): Effect.Effect<Store.Service, StoreUnavailable | InvalidConfig, Scope.Scope | LeaseholdConfig> =>
  Effect.gen(function* () {
    const settings = yield* LeaseholdConfig
    const { cluster, endpoint } = yield* options === undefined
      ? settingsTarget(settings)
      : optionsTarget(options, settings)
    if (settings.minReplicasAck > 0 && cluster !== undefined) {
      return yield* Effect.fail(
        new InvalidConfig(
          Environment.describe(settings, {
            knob: "minReplicasAck",
            value: String(settings.minReplicasAck),
            reason: "is not supported on a Redis Cluster: one WAIT cannot cover writes spread over many masters",
            other: { knob: "cluster", value: "true" }
          })
        )
      )
    }
    const keys = makeKeys(settings.keyPrefix)
    const timeouts = {
      commandTimeoutMs: millis(settings.commandTimeout),
      connectTimeoutMs: millis(settings.connectTimeout)
    }
    const health = yield* Health.make(endpoint)
    const topology = yield* Topology.make(endpoint, cluster, timeouts, health)
    const keyspaceHead = `__keyspace@${endpoint.db}__:`
    const pubsub = yield* PubSub.make(endpoint, topology, health, timeouts, {
      pattern: `${keyspaceHead}${keys.socketPattern}`,
      key: (channel) => (channel.startsWith(keyspaceHead) ? channel.slice(keyspaceHead.length) : undefined)
    })
    const blocking = yield* Blocking.make(endpoint, topology, health, timeouts)
    const acknowledged =
      settings.minReplicasAck > 0
        ? yield* Acknowledged.make(
            endpoint,
            { ...timeouts, replicas: settings.minReplicasAck, timeoutMs: millis(settings.replicaAckTimeout) },
            health
          )
        : undefined

    // Ready when the command connection and a subscriber for every master are.
    const { connectTimeoutMs } = timeouts
    // Named as the user set them: the variables when the settings came from the environment.
    const timeoutVariable = Environment.variableOf(settings, "connectTimeout")
    const targetVariable =
      options === undefined
        ? Environment.variableOf(settings, Option.isSome(settings.redisSentinels) ? "redisSentinels" : "redisUrl")
        : undefined
    const notConnected = health.notConnected("connect", connectTimeoutMs, {
      ...(targetVariable === undefined ? {} : { target: targetVariable }),
      ...(timeoutVariable === undefined ? {} : { timeout: timeoutVariable })
    })
    yield* topology
      .connected(connectTimeoutMs, notConnected)
      .pipe(
        Effect.andThen(pubsub.connected(connectTimeoutMs, notConnected)),
        Effect.andThen(acknowledged?.connected(connectTimeoutMs, notConnected) ?? Effect.void),
        Effect.timeoutOrElse({ duration: connectTimeoutMs, orElse: () => Effect.failSync(notConnected) }),
        withLiveClock
      )
    yield* health.sync

    return Front.make(RedisDriver.make(settings, { endpoint, keys, health, topology, pubsub, blocking, acknowledged }))
  })

/**
 * The Redis store where `LeaseholdConfig` says: `redisSentinels` (with `redisSentinelName`),
 * else `redisUrl` (a Cluster's seed nodes with `redisCluster`); neither: `InvalidConfig`.
 * Building fails with `StoreUnavailable` when Redis cannot be reached within `connectTimeout`.
 * For a target given in code, `layer(options)`.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerFromSettings: Layer.Layer<Store, StoreUnavailable | InvalidConfig, LeaseholdConfig> = Layer.effect(
  Store,
  make()
)

/**
 * The Redis store at a URL or behind Sentinels given in code; its other settings (timeouts,
 * key prefix, and the `cluster` flag or master name when not given) from `LeaseholdConfig`.
 * Where `LeaseholdConfig` names the target too, `layerFromSettings`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options: Options): Layer.Layer<Store, StoreUnavailable | InvalidConfig, LeaseholdConfig> =>
  Layer.effect(Store, make(options))
