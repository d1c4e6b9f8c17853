/**
 * Every knob of leasehold, read with Effect's `Config` and validated when the layer is built.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Checks from "./internal/config/checks.js"
import * as Environment from "./internal/config/environment.js"

const { defaults } = Environment

/** A variable as a shell sets it (`LEASEHOLD_LOCK_EXPIRATION_MS=500`), an option as code does (`lockExpiration = 500ms`). */
const setting = (knob: string, value: string) =>
  /^[A-Z][A-Z0-9_]*$/.test(knob) ? `${knob}=${value}` : `${knob} = ${value}`

/**
 * A knob whose value is out of range or contradicts another knob.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidConfig extends Schema.TaggedError<InvalidConfig>()("InvalidConfig", {
  knob: Schema.String,
  value: Schema.String,
  other: Schema.optionalKey(Schema.Struct({ knob: Schema.String, value: Schema.String })),
  reason: Schema.String
}) {
  override get message(): string {
    const other = this.other === undefined ? "" : ` (${setting(this.other.knob, this.other.value)})`
    return `invalid configuration: ${setting(this.knob, this.value)} ${this.reason}${other}`
  }
}

/**
 * How a leased modification is acknowledged: after its batch is written (`batch`) or
 * from memory (`memory`, faster, loses acknowledged work if the worker dies).
 *
 * @since 0.1.0
 * @category models
 */
export type LeaseDurability = "batch" | "memory"

/**
 * @since 0.1.0
 * @category models
 */
export interface Settings {
  /** `None`: the embedded memory store. */
  readonly redisUrl: Option.Option<Redacted.Redacted>
  /**
   * `true`: `redisUrl` names seed nodes of a Redis Cluster (`redis://host:port,host:port`);
   * the store discovers the other masters itself.
   */
  readonly redisCluster: boolean
  /**
   * `Some`: the store finds the primary through these Sentinels, `host:port,host:port`, or
   * `redis[s]://[user:password@]host:port,host:port[/db]` for the servers' credentials, TLS
   * and database; `redisUrl` stays unset. Read redacted, as the URL is.
   */
  readonly redisSentinels: Option.Option<Redacted.Redacted>
  /** The master name the Sentinels monitor; required with `redisSentinels`. */
  readonly redisSentinelName: Option.Option<string>
  readonly keyPrefix: string
  readonly lockExpiration: Duration.Duration
  readonly lockWarningThreshold: Duration.Duration
  readonly tokenExpiration: Duration.Duration
  readonly oplock: boolean
  readonly leaseHoldTime: Duration.Duration
  readonly leaseQuantum: Duration.Duration
  readonly leaseDurability: LeaseDurability
  /**
   * How long the group commit of an uncontended lease (`leaseDurability: "batch"`) may wait
   * for those of the worker's other leases: each waits for the next line of a grid of this
   * period, and the commits that meet there leave together, back to back on the command
   * connection, at the cost of up to this much more latency per answer. Default 0: each commit leaves at once.
   */
  readonly leaseCommitWindow: Duration.Duration
  /**
   * How long a lock handed to the next waiting worker stays reserved for it before anyone
   * may take it (a pending grant): what a grantee that died costs the others, plus one
   * re-check. Default: 1 s, or half the lock expiration when that is shorter.
   */
  readonly handoffTimeout: Duration.Duration
  /**
   * How long a worker counts as alive after its last presence refresh (it refreshes every
   * third of it). A record whose owner is absent, or does not answer within this time, is
   * taken over by the worker a tab reconnects to: a tab waits at most this long after its
   * worker died. Default: 3 s, or half the token expiration when that is shorter.
   */
  readonly presenceExpiration: Duration.Duration
  readonly retryDelayInitial: Duration.Duration
  readonly retryDelayMax: Duration.Duration
  /** Add up to 10 % to each retry delay (never above the cap), so workers do not retry in step. */
  readonly retryJitter: boolean
  readonly mailboxMaxLen: number
  /** The largest encoded slice value a modification may write, in bytes; a larger one is refused before any I/O. */
  readonly maxValueBytes: number
  /** `Some`: the embedded store keeps each token's slices in files there and loads them when built. */
  readonly dataDir: Option.Option<string>
  /** How long a change waits before it is written to `dataDir`, so a burst costs one file write. */
  readonly dataFlushInterval: Duration.Duration
  readonly commandTimeout: Duration.Duration
  readonly connectTimeout: Duration.Duration
  /**
   * `0` (the default): a step is acknowledged once the primary has made it. At least 1:
   * every step whose loss would break a promise (a grant and its fence, a group commit, a
   * commit with its release, an update appended to another worker's mailbox) is
   * acknowledged only once this many replicas have it (Redis' `WAIT`); fewer within
   * `replicaAckTimeout` fail it with `NotAcknowledged`, its outcome unknown (an update
   * stays in the sender's outbox and is appended again). Redis only, and not on a Redis Cluster.
   */
  readonly minReplicasAck: number
  /**
   * How long a step waits for `minReplicasAck` replicas before it fails with
   * `NotAcknowledged`. Default: 1 s, or half the lock expiration when that is shorter.
   */
  readonly replicaAckTimeout: Duration.Duration
}

/**
 * The knobs a caller may set in code; every one has a default.
 *
 * @since 0.1.0
 * @category models
 */
export type Input = {
  readonly [K in keyof Settings]?: Settings[K] extends Duration.Duration ? Duration.Input : Settings[K]
}

/**
 * @since 0.1.0
 * @category tags
 */
export class LeaseholdConfig extends Context.Service<LeaseholdConfig, Settings>()("leasehold/LeaseholdConfig") {}

/**
 * The knobs as `Config`, with the environment names of docs/configuration.md.
 *
 * @since 0.1.0
 * @category config
 */
export const config: Config.Config<Input> = Environment.config

/**
 * Whether the settings name a Redis deployment (a URL or Sentinels); otherwise the
 * embedded memory store serves.
 *
 * @since 0.1.0
 * @category utils
 */
export const usesRedis = (settings: Settings): boolean =>
  Option.isSome(settings.redisUrl) || Option.isSome(settings.redisSentinels)

/**
 * Fill defaults and check every relation between knobs.
 *
 * @since 0.1.0
 * @category constructors
 */
export const resolve = (input: Input = {}): Result.Result<Settings, InvalidConfig> => {
  const [settings, problem] = check(input)
  return problem === undefined ? Result.succeed(settings) : Result.fail(problem)
}

/** Every knob not given, its default: some follow the lock's or the token's expiration. */
const withDefaults = (input: Input): Settings => {
  const dur = (value: Duration.Input | undefined, fallbackMs: number) =>
    value === undefined ? Duration.millis(fallbackMs) : Duration.fromInputUnsafe(value)
  const lockExpiration = dur(input.lockExpiration, defaults.lockExpirationMs)
  const tokenExpiration = dur(input.tokenExpiration, defaults.tokenExpirationS * 1000)
  return {
    redisUrl: input.redisUrl ?? Option.none(),
    redisCluster: input.redisCluster ?? defaults.redisCluster,
    redisSentinels: input.redisSentinels ?? Option.none(),
    redisSentinelName: input.redisSentinelName ?? Option.none(),
    keyPrefix: input.keyPrefix ?? defaults.keyPrefix,
    lockExpiration,
    lockWarningThreshold: dur(input.lockWarningThreshold, defaults.lockWarningThresholdMs),
    tokenExpiration,
    oplock: input.oplock ?? defaults.oplock,
    leaseHoldTime:
      input.leaseHoldTime === undefined
        ? Duration.millis(Math.floor(Duration.toMillis(lockExpiration) / 2))
        : Duration.fromInputUnsafe(input.leaseHoldTime),
    leaseQuantum: dur(input.leaseQuantum, defaults.leaseQuantumMs),
    leaseDurability: input.leaseDurability ?? defaults.leaseDurability,
    leaseCommitWindow: dur(input.leaseCommitWindow, defaults.leaseCommitWindowMs),
    handoffTimeout:
      input.handoffTimeout === undefined
        ? Duration.millis(Math.min(defaults.handoffTimeoutMs, Math.floor(Duration.toMillis(lockExpiration) / 2)))
        : Duration.fromInputUnsafe(input.handoffTimeout),
    presenceExpiration:
      input.presenceExpiration === undefined
        ? Duration.millis(Math.min(defaults.presenceExpirationMs, Math.floor(Duration.toMillis(tokenExpiration) / 2)))
        : Duration.fromInputUnsafe(input.presenceExpiration),
    retryDelayInitial: dur(input.retryDelayInitial, defaults.retryDelayInitialMs),
    retryDelayMax: dur(input.retryDelayMax, defaults.retryDelayMaxMs),
    retryJitter: input.retryJitter ?? defaults.retryJitter,
    mailboxMaxLen: input.mailboxMaxLen ?? defaults.mailboxMaxLen,
    maxValueBytes: input.maxValueBytes ?? defaults.maxValueBytes,
    dataDir: input.dataDir ?? Option.none(),
    dataFlushInterval: dur(input.dataFlushInterval, defaults.dataFlushIntervalMs),
    commandTimeout: dur(input.commandTimeout, defaults.commandTimeoutMs),
    connectTimeout: dur(input.connectTimeout, defaults.connectTimeoutMs),
    minReplicasAck: input.minReplicasAck ?? defaults.minReplicasAck,
    replicaAckTimeout:
      input.replicaAckTimeout === undefined
        ? Duration.millis(Math.min(defaults.replicaAckTimeoutMs, Math.floor(Duration.toMillis(lockExpiration) / 2)))
        : Duration.fromInputUnsafe(input.replicaAckTimeout)
  }
}

/** The settings with their defaults filled, and the first problem with them. */
const check = (input: Input): readonly [Settings, InvalidConfig | undefined] => {
  const settings = withDefaults(input)
  const problem = Checks.firstProblem(input, settings)
  return [settings, problem === undefined ? undefined : new InvalidConfig(problem)]
}

/**
 * Settings from code, validated when the layer is built; every knob not given has its
 * default (`layer({})`: all of them). An `InvalidConfig` names the options as given.
 *
 * @since 0.2.0
 * @category layers
 */
export const layer = (input: Input): Layer.Layer<LeaseholdConfig, InvalidConfig> =>
  Layer.effect(
    LeaseholdConfig,
    Effect.suspend(() => Effect.fromResult(resolve(input)))
  )

/**
 * Settings from a `Config`: a whole `Config<Input>`, or a record of a `Config` per knob
 * (`{ lockExpiration: Config.Duration("LOCK_TTL") }`), validated when the layer is built.
 * An `InvalidConfig` names the options (the `Config` knows its own names); `layerFromEnv`
 * reads leasehold's own variables and names them.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerConfig = (
  config: Config.Wrap<Input>
): Layer.Layer<LeaseholdConfig, InvalidConfig | Config.ConfigError> =>
  Layer.effect(
    LeaseholdConfig,
    Effect.flatMap(Config.unwrap(config), (input) => Effect.fromResult(resolve(input)))
  )

/**
 * Settings from the `LEASEHOLD_*` variables (`config`), read from the current
 * `ConfigProvider` (the environment unless the app provides another), validated when the
 * layer is built. An empty variable is unset. Every `InvalidConfig` about these settings,
 * from this layer or from a store built on them, names the variable and the value the user
 * set (a URL without its password), or the default used when the variable is unset.
 *
 * @since 0.2.0
 * @category layers
 */
export const layerFromEnv: Layer.Layer<LeaseholdConfig, InvalidConfig | Config.ConfigError> = Layer.effect(
  LeaseholdConfig,
  Effect.flatMap(Environment.configWithTexts, ({ input, texts }) => {
    const [settings, problem] = check(input)
    return problem === undefined
      ? Effect.succeed(Environment.remember(settings, texts))
      : Effect.fail(new InvalidConfig(Environment.inVariables(problem, texts, settings)))
  })
)
