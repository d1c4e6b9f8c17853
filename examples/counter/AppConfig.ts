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

/** The data directory `npm start` uses when `LEASEHOLD_DATA_DIR` is not set. */
export const defaultDataDir = ".leasehold"

/** `config`, refused with `message` unless `valid`. */
const checked = <A>(config: Config.Config<A>, message: string, valid: (value: A) => boolean): Config.Config<A> =>
  config.pipe(
    Config.flatMap((value) =>
      valid(value)
        ? Config.succeed(value)
        : Config.fail(new Schema.SchemaError(new SchemaIssue.InvalidValue({ message })))
    )
  )

/** A bound in bytes: a whole number from 1 up. */
const bytes = (name: string, fallback: number) =>
  checked(
    Config.Int(name).pipe(Config.withDefault(fallback)),
    `${name} must be a whole number of bytes above 0`,
    (n) => n >= 1
  )

/** The settings of one app process, from the environment (each variable's description beside it). */
export const appConfig = Config.all({
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
  // a server span per HTTP request (docs/configuration.md has its cost); default off
  httpTracing: Config.Boolean("HTTP_TRACING").pipe(Config.withDefault(false)),
  // largest WebSocket message from a client, the session's frame cap (64 KiB: 1,000 times a bump)
  maxFrameBytes: bytes("MAX_FRAME_BYTES", 65_536),
  // largest HTTP request body, else 413 (64 KiB: the API reads none)
  maxBodyBytes: bytes("MAX_BODY_BYTES", 65_536),
  // longest HTTP request target, path and query, else 414 (8 KiB: a token is at most 128 characters)
  maxUrlBytes: bytes("MAX_URL_BYTES", 8_192)
})

/** Settings of one app process. */
export type AppSettings = Config.Success<typeof appConfig>

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
