/**
 * The example's own settings, read with `Config` from the environment. leasehold's knobs
 * (`LEASEHOLD_*`) are read by leasehold (`Worker.layerFromEnv`); only the data directory
 * gets a default here (`leaseholdEnvironment`), so that `npm start` keeps every tab's
 * counter across restarts.
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"

/** Settings of one app process. */
export interface AppSettings {
  readonly port: number
  /** Unset: every interface. */
  readonly host: Option.Option<string>
  /** Worker processes; more than one forks them with `node:cluster`. */
  readonly workers: number
  /** Whether `LEASEHOLD_REDIS_URL` or `LEASEHOLD_REDIS_SENTINELS` is set (workers cannot share the embedded store). */
  readonly redis: boolean
  /**
   * Whether each HTTP request gets a server span (`HTTP_TRACING`, default off). The
   * platform makes one per request by default; with no tracer installed to export them
   * that is pure cost (docs/configuration.md has the figures).
   */
  readonly httpTracing: boolean
  /**
   * The largest WebSocket message a client may send, in bytes (`MAX_FRAME_BYTES`, default
   * 64 KiB). A frame announcing more is answered with a close frame, code 1009, before its
   * payload is read.
   */
  readonly maxFrameBytes: number
  /** The largest HTTP request body, in bytes (`MAX_BODY_BYTES`, default 64 KiB): above it, 413. */
  readonly maxBodyBytes: number
  /** The longest request target (path and query string), in bytes (`MAX_URL_BYTES`, default 8 KiB): above it, 414. */
  readonly maxUrlBytes: number
}

/** The data directory `npm start` uses when `LEASEHOLD_DATA_DIR` is not set. */
export const defaultDataDir = ".leasehold"

/** `MAX_FRAME_BYTES` when unset: 64 KiB, a thousand times the largest frame the page sends. */
export const defaultMaxFrameBytes = 65_536

/** `MAX_BODY_BYTES` when unset: 64 KiB (the API reads no body; a route that did would be bounded by it). */
export const defaultMaxBodyBytes = 65_536

/** `MAX_URL_BYTES` when unset: 8 KiB (a token is at most 128 characters). */
export const defaultMaxUrlBytes = 8_192

/** `config`, refused with `message` unless `valid`. */
const checked = <A>(config: Config.Config<A>, message: string, valid: (value: A) => boolean): Config.Config<A> =>
  config.pipe(
    Config.flatMap((value) =>
      valid(value)
        ? Config.succeed(value)
        : Config.fail(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message })))
    )
  )

/**
 * A bound in bytes: a whole number from 1 up. The description is what docs/configuration.md
 * says of the variable, kept beside it.
 */
const bytes = (name: string, fallback: number, _description: string) =>
  checked(
    Config.Int(name).pipe(Config.withDefault(fallback)),
    `${name} must be a whole number of bytes above 0`,
    (n) => n >= 1
  )

/** The settings, from the environment (each variable's description beside it). */
export const appConfig: Config.Config<AppSettings> = Config.all({
  // HTTP port
  port: Config.Port("PORT").pipe(Config.withDefault(3000)),
  // interface to listen on; unset: all
  host: Config.option(Config.String("HOST")),
  // worker processes (node:cluster when more than 1)
  workers: checked(
    Config.Int("WORKERS").pipe(Config.withDefault(1)),
    "WORKERS must be between 1 and 64",
    (n) => n >= 1 && n <= 64
  ),
  // whether leasehold will be on Redis: a URL or Sentinels set and not empty, as leasehold reads them
  redis: Config.all([
    Config.option(Config.String("LEASEHOLD_REDIS_URL")),
    Config.option(Config.String("LEASEHOLD_REDIS_SENTINELS"))
  ]).pipe(Config.map((targets) => targets.some((target) => Option.isSome(target) && target.value !== ""))),
  // a server span per HTTP request (for an installed tracer); default off
  httpTracing: Config.Boolean("HTTP_TRACING").pipe(Config.withDefault(false)),
  maxFrameBytes: bytes(
    "MAX_FRAME_BYTES",
    defaultMaxFrameBytes,
    "largest WebSocket message from a client (else close 1009)"
  ),
  maxBodyBytes: bytes("MAX_BODY_BYTES", defaultMaxBodyBytes, "largest HTTP request body (else 413)"),
  maxUrlBytes: bytes("MAX_URL_BYTES", defaultMaxUrlBytes, "longest HTTP request target, path and query (else 414)")
})

/**
 * How the app reads its settings: from the process's environment, where a variable set but
 * empty is set (`LEASEHOLD_DATA_DIR=` keeps nothing on disk), not unset as Effect's default
 * reading of the environment has it.
 */
export const environment = (env?: Record<string, string>): ConfigProvider.ConfigProvider =>
  ConfigProvider.fromEnv(env === undefined ? { preserveEmptyStrings: true } : { env, preserveEmptyStrings: true })

/**
 * How leasehold reads its variables in this app: from the process's environment, with
 * `LEASEHOLD_DATA_DIR` (the directory of the embedded store's files) `.leasehold` unless it
 * is set. Set but empty, it keeps nothing on disk, as leasehold reads an empty variable.
 */
export const leaseholdEnvironment = (env?: Record<string, string>): ConfigProvider.ConfigProvider =>
  environment(env).pipe(ConfigProvider.orElse(ConfigProvider.fromUnknown({ LEASEHOLD_DATA_DIR: defaultDataDir })))

/** The settings of this process, from its environment. */
export const loadSettings: Effect.Effect<AppSettings, Config.ConfigError> = Effect.suspend(() =>
  appConfig.parse(environment())
)

/** `WORKERS` above 1 without Redis: the workers would each have their own embedded store. */
export class ClusterNeedsRedis extends Data.TaggedError("ClusterNeedsRedis")<{ readonly workers: number }> {
  override get message(): string {
    return (
      `WORKERS=${this.workers} needs LEASEHOLD_REDIS_URL: each worker process would have its own embedded ` +
      "store, so a tab's state would depend on which worker served it. Set LEASEHOLD_REDIS_URL " +
      "(e.g. redis://127.0.0.1:6379), or run one worker."
    )
  }
}
