/**
 * The knobs' defaults, and reading them from the environment (the names of docs/configuration.md):
 * what `LeaseholdConfig.config` is. `LeaseholdConfig.resolve` checks what is read.
 *
 * @internal
 */
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
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

/**
 * A variable read as text and parsed as leasehold has always parsed it (`Number(text)`, the
 * boolean spellings `true yes on 1` / `false no off 0`, a literal by its exact text), so a
 * setting means the same whatever Effect's own parsers accept. The error names the variable.
 * An empty variable is unset, as Effect's environment provider has it.
 */
const parsed = <A>(name: string, expected: string, parse: (text: string) => A | undefined): Config.Config<A> =>
  Config.String(name).pipe(
    Config.flatMap((text) => {
      const value = parse(text)
      return value === undefined
        ? Config.fail(
            new Schema.SchemaError(
              new SchemaIssue.InvalidValue({
                message: `${name}: expected ${expected} but received ${JSON.stringify(text)}`
              })
            )
          )
        : Config.succeed(value)
    })
  )

const number = (name: string) =>
  parsed(name, "a number", (text) => {
    const value = Number(text)
    return Number.isNaN(value) ? undefined : value
  })

const integer = (name: string) =>
  parsed(name, "an integer", (text) => {
    const value = Number(text)
    return Number.isInteger(value) ? value : undefined
  })

const truthy = new Set(["true", "yes", "on", "1"])
const falsy = new Set(["false", "no", "off", "0"])
const boolean = (name: string) =>
  parsed(name, "a boolean", (text) => (truthy.has(text) ? true : falsy.has(text) ? false : undefined))

const literal = <const L extends ReadonlyArray<string>>(name: string, literals: L): Config.Config<L[number]> =>
  parsed(name, `one of (${literals.join(", ")})`, (text) => literals.find((literal) => literal === text))

/**
 * A setting read by `config`, with its default. The description is what docs/configuration.md
 * says of the variable, kept beside it.
 */
const setting = <A>(config: Config.Config<A>, fallback: A, _description: string) =>
  config.pipe(Config.withDefault(fallback))

/** A duration in ms from the environment. */
const ms = (name: string, fallback: number, description: string) => setting(number(name), fallback, description)

/** An optional setting; the description as in `setting`. */
const optional = <A>(config: Config.Config<A>, _description: string) => Config.option(config)

/**
 * The knobs as `Config`, with the environment names of docs/configuration.md.
 *
 * @internal
 */
export const config: Config.Config<Input> = Config.all({
  redisUrl: optional(Config.Redacted("LEASEHOLD_REDIS_URL"), "Redis URL; unset for the embedded memory store"),
  redisCluster: setting(
    boolean("LEASEHOLD_REDIS_CLUSTER"),
    defaults.redisCluster,
    "the Redis URL names seed nodes of a Redis Cluster (host:port list after the userinfo)"
  ),
  redisSentinels: optional(
    Config.Redacted("LEASEHOLD_REDIS_SENTINELS"),
    "Sentinels (host:port,host:port, or redis[s]://[user:password@]host:port,...[/db]) through which the store finds the primary"
  ),
  redisSentinelName: optional(Config.String("LEASEHOLD_REDIS_SENTINEL_NAME"), "the master name the Sentinels monitor"),
  keyPrefix: setting(Config.String("LEASEHOLD_KEY_PREFIX"), defaults.keyPrefix, "prefix of every Redis key"),
  lockExpiration: ms("LEASEHOLD_LOCK_EXPIRATION_MS", defaults.lockExpirationMs, "lock TTL in ms"),
  lockWarningThreshold: ms(
    "LEASEHOLD_LOCK_WARNING_THRESHOLD_MS",
    defaults.lockWarningThresholdMs,
    "a hold longer than this logs a warning (ms, < lock expiration)"
  ),
  tokenExpiration: setting(
    number("LEASEHOLD_TOKEN_EXPIRATION_S"),
    defaults.tokenExpirationS,
    "TTL of slices and socket records, in seconds"
  ).pipe(Config.map((s) => Duration.seconds(s))),
  oplock: setting(boolean("LEASEHOLD_OPLOCK"), defaults.oplock, "keep the lock as a lease after a modification"),
  leaseHoldTime: optional(
    number("LEASEHOLD_LEASE_HOLD_TIME_MS"),
    "how long a lease is held (ms, < lock expiration; default lock expiration / 2)"
  ),
  leaseQuantum: ms("LEASEHOLD_LEASE_QUANTUM_MS", defaults.leaseQuantumMs, "how long a contended lease lingers (ms)"),
  leaseDurability: setting(
    literal("LEASEHOLD_LEASE_DURABILITY", ["batch", "memory"]),
    defaults.leaseDurability,
    "acknowledge leased modifications after their batch is written (batch) or from memory"
  ),
  handoffTimeout: optional(
    number("LEASEHOLD_HANDOFF_TIMEOUT_MS"),
    "how long a lock handed to the next waiting worker is reserved for it (ms, < lock expiration; default 1 s or lock expiration / 2)"
  ),
  presenceExpiration: ms(
    "LEASEHOLD_PRESENCE_EXPIRATION_MS",
    defaults.presenceExpirationMs,
    "how long a worker counts as alive after its last presence refresh (ms, < token expiration)"
  ),
  retryDelayInitial: ms("LEASEHOLD_RETRY_DELAY_INITIAL_MS", defaults.retryDelayInitialMs, "first retry delay (ms)"),
  retryDelayMax: ms("LEASEHOLD_RETRY_DELAY_MAX_MS", defaults.retryDelayMaxMs, "cap of the retry delay (ms)"),
  retryJitter: setting(
    boolean("LEASEHOLD_RETRY_JITTER"),
    defaults.retryJitter,
    "add up to 10 % random jitter to retry delays"
  ),
  mailboxMaxLen: setting(
    integer("LEASEHOLD_MAILBOX_MAXLEN"),
    defaults.mailboxMaxLen,
    "approximate length cap of each mailbox stream"
  ),
  maxValueBytes: setting(
    integer("LEASEHOLD_MAX_VALUE_BYTES"),
    defaults.maxValueBytes,
    "largest encoded slice value a modification may write, in bytes"
  ),
  dataDir: optional(
    Config.String("LEASEHOLD_DATA_DIR"),
    "directory where the embedded store keeps state; unset keeps nothing on disk"
  ),
  dataFlushInterval: ms(
    "LEASEHOLD_DATA_FLUSH_INTERVAL_MS",
    defaults.dataFlushIntervalMs,
    "how long a change waits before the embedded store writes it to the data directory (ms)"
  ),
  commandTimeout: ms("LEASEHOLD_COMMAND_TIMEOUT_MS", defaults.commandTimeoutMs, "Redis command timeout (ms)"),
  connectTimeout: ms("LEASEHOLD_CONNECT_TIMEOUT_MS", defaults.connectTimeoutMs, "Redis connect timeout (ms)"),
  minReplicasAck: setting(
    integer("LEASEHOLD_MIN_REPLICAS_ACK"),
    defaults.minReplicasAck,
    "replicas that must have a grant or a commit before it is acknowledged (Redis WAIT); 0: the primary alone"
  ),
  replicaAckTimeout: optional(
    number("LEASEHOLD_REPLICA_ACK_TIMEOUT_MS"),
    "how long a grant or a commit waits for its replicas before it fails as not acknowledged (ms, < lock expiration; default 1 s or lock expiration / 2)"
  )
}).pipe(
  Config.map(({ handoffTimeout, leaseHoldTime, replicaAckTimeout, ...rest }): Input => {
    const input: { -readonly [K in keyof Input]: Input[K] } = { ...rest }
    if (Option.isSome(replicaAckTimeout)) input.replicaAckTimeout = replicaAckTimeout.value
    if (Option.isSome(leaseHoldTime)) input.leaseHoldTime = leaseHoldTime.value
    if (Option.isSome(handoffTimeout)) input.handoffTimeout = handoffTimeout.value
    return input
  })
)
