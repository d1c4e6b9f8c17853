/**
 * The knobs' defaults, and reading them from the environment (the names of DESIGN §7):
 * what `LeaseholdConfig.config` is. `LeaseholdConfig.resolve` checks what is read.
 *
 * @internal
 */
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import type { Input, LeaseDurability } from "../../LeaseholdConfig.js"

/** @internal */
export const defaults = {
  redisCluster: false,
  keyPrefix: "leasehold",
  lockExpirationMs: 10_000,
  lockWarningThresholdMs: 1_000,
  tokenExpirationS: 3_600,
  oplock: false,
  leaseQuantumMs: 2,
  leaseDurability: "batch" as LeaseDurability,
  handoffTimeoutMs: 1_000,
  presenceExpirationMs: 3_000,
  retryDelayInitialMs: 1_000,
  retryDelayMaxMs: 30_000,
  retryJitter: true,
  mailboxMaxLen: 10_000,
  maxValueBytes: 1_048_576,
  dataFlushIntervalMs: 250,
  commandTimeoutMs: 5_000,
  connectTimeoutMs: 5_000,
  minReplicasAck: 0,
  replicaAckTimeoutMs: 1_000
}

/** A setting read by `config`, with its default and its description. */
const setting = <A>(config: Config.Config<A>, fallback: A, description: string) =>
  config.pipe(Config.withDefault(fallback), Config.withDescription(description))

/** A duration in ms from the environment. */
const ms = (name: string, fallback: number, description: string) => setting(Config.number(name), fallback, description)

/**
 * The knobs as `Config`, with the environment names of DESIGN §7.
 *
 * @internal
 */
export const config: Config.Config<Input> = Config.all({
  redisUrl: Config.option(Config.redacted("LEASEHOLD_REDIS_URL")).pipe(
    Config.withDescription("Redis URL; unset for the embedded memory store")
  ),
  redisCluster: setting(
    Config.boolean("LEASEHOLD_REDIS_CLUSTER"),
    defaults.redisCluster,
    "the Redis URL names seed nodes of a Redis Cluster (host:port list after the userinfo)"
  ),
  redisSentinels: Config.option(Config.redacted("LEASEHOLD_REDIS_SENTINELS")).pipe(
    Config.withDescription(
      "Sentinels (host:port,host:port, or redis[s]://[user:password@]host:port,...[/db]) through which the store finds the primary"
    )
  ),
  redisSentinelName: Config.option(Config.string("LEASEHOLD_REDIS_SENTINEL_NAME")).pipe(
    Config.withDescription("the master name the Sentinels monitor")
  ),
  keyPrefix: Config.string("LEASEHOLD_KEY_PREFIX").pipe(
    Config.withDefault(defaults.keyPrefix),
    Config.withDescription("prefix of every Redis key")
  ),
  lockExpiration: ms("LEASEHOLD_LOCK_EXPIRATION_MS", defaults.lockExpirationMs, "lock TTL in ms"),
  lockWarningThreshold: ms(
    "LEASEHOLD_LOCK_WARNING_THRESHOLD_MS",
    defaults.lockWarningThresholdMs,
    "a hold longer than this logs a warning (ms, < lock expiration)"
  ),
  tokenExpiration: Config.number("LEASEHOLD_TOKEN_EXPIRATION_S").pipe(
    Config.withDefault(defaults.tokenExpirationS),
    Config.withDescription("TTL of slices and socket records, in seconds"),
    Config.map((s) => Duration.seconds(s))
  ),
  oplock: setting(Config.boolean("LEASEHOLD_OPLOCK"), defaults.oplock, "keep the lock as a lease after a modification"),
  leaseHoldTime: Config.option(Config.number("LEASEHOLD_LEASE_HOLD_TIME_MS")).pipe(
    Config.withDescription("how long a lease is held (ms, < lock expiration; default lock expiration / 2)")
  ),
  leaseQuantum: ms("LEASEHOLD_LEASE_QUANTUM_MS", defaults.leaseQuantumMs, "how long a contended lease lingers (ms)"),
  leaseDurability: Config.literal(
    "batch",
    "memory"
  )("LEASEHOLD_LEASE_DURABILITY").pipe(
    Config.withDefault(defaults.leaseDurability),
    Config.withDescription("acknowledge leased modifications after their batch is written (batch) or from memory")
  ),
  handoffTimeout: Config.option(Config.number("LEASEHOLD_HANDOFF_TIMEOUT_MS")).pipe(
    Config.withDescription(
      "how long a lock handed to the next waiting worker is reserved for it (ms, < lock expiration; default 1 s or lock expiration / 2)"
    )
  ),
  presenceExpiration: ms(
    "LEASEHOLD_PRESENCE_EXPIRATION_MS",
    defaults.presenceExpirationMs,
    "how long a worker counts as alive after its last presence refresh (ms, < token expiration)"
  ),
  retryDelayInitial: ms("LEASEHOLD_RETRY_DELAY_INITIAL_MS", defaults.retryDelayInitialMs, "first retry delay (ms)"),
  retryDelayMax: ms("LEASEHOLD_RETRY_DELAY_MAX_MS", defaults.retryDelayMaxMs, "cap of the retry delay (ms)"),
  retryJitter: setting(
    Config.boolean("LEASEHOLD_RETRY_JITTER"),
    defaults.retryJitter,
    "add up to 10 % random jitter to retry delays"
  ),
  mailboxMaxLen: setting(
    Config.integer("LEASEHOLD_MAILBOX_MAXLEN"),
    defaults.mailboxMaxLen,
    "approximate length cap of each mailbox stream"
  ),
  maxValueBytes: setting(
    Config.integer("LEASEHOLD_MAX_VALUE_BYTES"),
    defaults.maxValueBytes,
    "largest encoded slice value a modification may write, in bytes"
  ),
  dataDir: Config.option(Config.string("LEASEHOLD_DATA_DIR")).pipe(
    Config.withDescription("directory where the embedded store keeps state; unset keeps nothing on disk")
  ),
  dataFlushInterval: ms(
    "LEASEHOLD_DATA_FLUSH_INTERVAL_MS",
    defaults.dataFlushIntervalMs,
    "how long a change waits before the embedded store writes it to the data directory (ms)"
  ),
  commandTimeout: ms("LEASEHOLD_COMMAND_TIMEOUT_MS", defaults.commandTimeoutMs, "Redis command timeout (ms)"),
  connectTimeout: ms("LEASEHOLD_CONNECT_TIMEOUT_MS", defaults.connectTimeoutMs, "Redis connect timeout (ms)"),
  minReplicasAck: setting(
    Config.integer("LEASEHOLD_MIN_REPLICAS_ACK"),
    defaults.minReplicasAck,
    "replicas that must have a grant or a commit before it is acknowledged (Redis WAIT); 0: the primary alone"
  ),
  replicaAckTimeout: Config.option(Config.number("LEASEHOLD_REPLICA_ACK_TIMEOUT_MS")).pipe(
    Config.withDescription(
      "how long a grant or a commit waits for its replicas before it fails as not acknowledged (ms, < lock expiration; default 1 s or lock expiration / 2)"
    )
  )
}).pipe(
  Config.map(
    ({ handoffTimeout, leaseHoldTime, replicaAckTimeout, ...rest }): Input => ({
      ...rest,
      ...Option.match(replicaAckTimeout, { onNone: () => ({}), onSome: (ms) => ({ replicaAckTimeout: ms }) }),
      ...Option.match(leaseHoldTime, { onNone: () => ({}), onSome: (ms) => ({ leaseHoldTime: ms }) }),
      ...Option.match(handoffTimeout, { onNone: () => ({}), onSome: (ms) => ({ handoffTimeout: ms }) })
    })
  )
)
