/**
 * The knobs' defaults, and reading them from the environment (the names of docs/configuration.md):
 * what `LeaseholdConfig.config` is. `LeaseholdConfig.resolve` fills the defaults and checks
 * what is read; an error about settings read here names the variables and the values the
 * user set, not the options of code.
 *
 * @internal
 */
import * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import type { Input, LeaseDurability, Settings } from "../../LeaseholdConfig.js"

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
  leaseCommitWindowMs: 0,
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

/** What the user set: each variable's text, as set (no entry: unset). */
export type Texts = Readonly<Record<string, string>>

/**
 * A variable read as text and parsed as leasehold has always parsed it (`Number(text)`, the
 * boolean spellings `true yes on 1` / `false no off 0`, a literal by its exact text), so a
 * setting means the same whatever Effect's own parsers accept. The error names the variable.
 * Unset or empty, it is `undefined`: `LeaseholdConfig.resolve` has the defaults (some derived
 * from other knobs, so they cannot be filled here). Empty is unset whatever the provider:
 * Effect's environment provider reads it so, and one that keeps empty strings (as an app may
 * for its own variables) must not turn `LEASEHOLD_DATA_DIR=` into the working directory or a
 * number into 0.
 */
interface Variable<A> {
  readonly name: string
  readonly parse: (text: string) => A | undefined
  readonly expected: string
  /** The unit of the variable, when it is a duration: how a value is shown in its terms. */
  readonly unit?: "ms" | "s"
  /** Shown without its password. */
  readonly secret?: boolean
}

const variable = <A>(
  name: string,
  expected: string,
  parse: (text: string) => A | undefined,
  extra: { readonly unit?: "ms" | "s"; readonly secret?: boolean } = {}
): Variable<A> => ({ name, expected, parse, ...extra })

const asNumber = (text: string) => {
  const value = Number(text)
  return Number.isNaN(value) ? undefined : value
}
const asInteger = (text: string) => {
  const value = Number(text)
  return Number.isInteger(value) ? value : undefined
}
const truthy = new Set(["true", "yes", "on", "1"])
const falsy = new Set(["false", "no", "off", "0"])
const asBoolean = (text: string) => (truthy.has(text) ? true : falsy.has(text) ? false : undefined)

const ms = (name: string) => variable(name, "a number", asNumber, { unit: "ms" })
const count = (name: string) => variable(name, "an integer", asInteger)
const boolean = (name: string) => variable(name, "a boolean", asBoolean)
const string = (name: string) => variable(name, "a string", (text: string) => text)
const redacted = (name: string) => variable(name, "a URL", (text: string) => Redacted.make(text), { secret: true })
const literal = <const L extends ReadonlyArray<string>>(name: string, literals: L): Variable<L[number]> =>
  variable(name, `one of (${literals.join(", ")})`, (text) => literals.find((literal) => literal === text))

/** Each knob's variable; the description is what docs/configuration.md says of it, kept beside it. */
const variables = {
  // Redis URL; unset for the embedded memory store
  redisUrl: redacted("LEASEHOLD_REDIS_URL"),
  // the Redis URL names seed nodes of a Redis Cluster (host:port list after the userinfo)
  redisCluster: boolean("LEASEHOLD_REDIS_CLUSTER"),
  // Sentinels (host:port,host:port, or redis[s]://[user:password@]host:port,...[/db]) through which the store finds the primary
  redisSentinels: redacted("LEASEHOLD_REDIS_SENTINELS"),
  // the master name the Sentinels monitor
  redisSentinelName: string("LEASEHOLD_REDIS_SENTINEL_NAME"),
  // prefix of every Redis key
  keyPrefix: string("LEASEHOLD_KEY_PREFIX"),
  // lock TTL in ms
  lockExpiration: ms("LEASEHOLD_LOCK_EXPIRATION_MS"),
  // a hold longer than this logs a warning (ms, < lock expiration)
  lockWarningThreshold: ms("LEASEHOLD_LOCK_WARNING_THRESHOLD_MS"),
  // TTL of slices and socket records, in seconds
  tokenExpiration: variable("LEASEHOLD_TOKEN_EXPIRATION_S", "a number", asNumber, { unit: "s" }),
  // keep the lock as a lease after a modification
  oplock: boolean("LEASEHOLD_OPLOCK"),
  // how long a lease is held (ms, < lock expiration; default lock expiration / 2)
  leaseHoldTime: ms("LEASEHOLD_LEASE_HOLD_TIME_MS"),
  // how long a contended lease lingers (ms)
  leaseQuantum: ms("LEASEHOLD_LEASE_QUANTUM_MS"),
  // acknowledge leased modifications after their batch is written (batch) or from memory
  leaseDurability: literal("LEASEHOLD_LEASE_DURABILITY", ["batch", "memory"]),
  // how long an uncontended lease's group commit may wait for the worker's others (ms, default 0)
  leaseCommitWindow: ms("LEASEHOLD_LEASE_COMMIT_WINDOW_MS"),
  // how long a lock handed to the next waiting worker is reserved for it (ms, < lock expiration; default 1 s or lock expiration / 2)
  handoffTimeout: ms("LEASEHOLD_HANDOFF_TIMEOUT_MS"),
  // how long a worker counts as alive after its last presence refresh (ms, < token expiration; default 3 s or token expiration / 2)
  presenceExpiration: ms("LEASEHOLD_PRESENCE_EXPIRATION_MS"),
  // first retry delay (ms)
  retryDelayInitial: ms("LEASEHOLD_RETRY_DELAY_INITIAL_MS"),
  // cap of the retry delay (ms)
  retryDelayMax: ms("LEASEHOLD_RETRY_DELAY_MAX_MS"),
  // add up to 10 % random jitter to retry delays
  retryJitter: boolean("LEASEHOLD_RETRY_JITTER"),
  // approximate length cap of each mailbox stream
  mailboxMaxLen: count("LEASEHOLD_MAILBOX_MAXLEN"),
  // largest encoded slice value a modification may write, in bytes
  maxValueBytes: count("LEASEHOLD_MAX_VALUE_BYTES"),
  // directory where the embedded store keeps state; unset (or empty) keeps nothing on disk
  dataDir: string("LEASEHOLD_DATA_DIR"),
  // how long a change waits before the embedded store writes it to the data directory (ms)
  dataFlushInterval: ms("LEASEHOLD_DATA_FLUSH_INTERVAL_MS"),
  // Redis command timeout (ms)
  commandTimeout: ms("LEASEHOLD_COMMAND_TIMEOUT_MS"),
  // Redis connect timeout (ms)
  connectTimeout: ms("LEASEHOLD_CONNECT_TIMEOUT_MS"),
  // replicas that must have a grant or a commit before it is acknowledged (Redis WAIT); 0: the primary alone
  minReplicasAck: count("LEASEHOLD_MIN_REPLICAS_ACK"),
  // how long a grant or a commit waits for its replicas before it fails as not acknowledged (ms, < lock expiration; default 1 s or lock expiration / 2)
  replicaAckTimeout: ms("LEASEHOLD_REPLICA_ACK_TIMEOUT_MS")
} satisfies { readonly [K in keyof Settings]: Variable<unknown> }

type Knob = keyof typeof variables

/** One variable read: its text (for messages) and its value, both absent when unset or empty. */
const read = <A>(v: Variable<A>): Config.Config<Option.Option<readonly [string, A]>> =>
  Config.option(Config.String(v.name)).pipe(
    Config.flatMap((option) => {
      if (Option.isNone(option) || option.value === "") return Config.succeed(Option.none())
      const value = v.parse(option.value)
      return value === undefined
        ? Config.fail(
            new Schema.SchemaError(
              new SchemaIssue.InvalidValue({
                message: `${v.name}: expected ${v.expected} but received ${JSON.stringify(option.value)}`
              })
            )
          )
        : Config.succeed(Option.some([option.value, value] as const))
    })
  )

/** A value given in a variable, as `Input` has it. */
const inputOf = (knob: Knob, value: unknown): unknown =>
  knob === "tokenExpiration"
    ? Duration.seconds(value as number)
    : knob === "redisUrl" || knob === "redisSentinels" || knob === "redisSentinelName" || knob === "dataDir"
      ? Option.some(value)
      : value

/**
 * The knobs as `Config`, with the environment names of docs/configuration.md, and the text of each
 * variable set.
 *
 * @internal
 */
export const configWithTexts: Config.Config<{ readonly input: Input; readonly texts: Texts }> = Config.all(
  Object.fromEntries(Object.entries(variables).map(([knob, v]) => [knob, read(v as Variable<unknown>)]))
).pipe(
  Config.map((values) => {
    const input: Record<string, unknown> = {}
    const texts: Record<string, string> = {}
    for (const [knob, value] of Object.entries(values)) {
      if (Option.isNone(value)) continue
      const [text, parsed] = value.value
      input[knob] = inputOf(knob as Knob, parsed)
      texts[variables[knob as Knob].name] = text
    }
    return { input: input as Input, texts }
  })
)

/**
 * The knobs as `Config`, with the environment names of docs/configuration.md.
 *
 * @internal
 */
export const config: Config.Config<Input> = Config.map(configWithTexts, ({ input }) => input)

/** One URL, or one `host:port` of a list, as it may be shown: only what a parse found. */
const shownUrl = (part: string): string => {
  const text = part.trim()
  if (/^[A-Za-z0-9.-]+:\d+$/.test(text)) return text
  try {
    const url = new URL(text)
    if (url.hostname === "") return "<redacted>"
    const user =
      url.username === "" && url.password === "" ? "" : `${url.username}${url.password === "" ? "" : ":<redacted>"}@`
    const path = url.pathname === "/" ? "" : url.pathname
    return `${url.protocol}//${user}${url.host}${path}${url.search === "" ? "" : "?<redacted>"}`
  } catch {
    // A text that does not parse is shown as nothing: a password with a `/`, `,` or `@`
    // in it is what makes a URL fail to parse.
    return "<redacted>"
  }
}

/**
 * A URL without its password: `redis://user:secret@host` shows as `redis://user:<redacted>@host`,
 * each URL of a list of Sentinels too; a query (which may carry a password) shows as
 * `?<redacted>`, and a text that does not parse as `<redacted>`.
 *
 * @internal
 */
export const withoutPassword = (text: string): string => text.split(",").map(shownUrl).join(",")

/** What a knob's value is, in its variable's terms: as the user set it, else `(unset)` or the default used. */
const shown = (knob: Knob, texts: Texts, settings: Settings | undefined): string => {
  const v: Variable<unknown> = variables[knob]
  const text = texts[v.name]
  if (text !== undefined) return v.secret === true ? withoutPassword(text) : text
  const value = settings?.[knob]
  if (value === undefined || Option.isOption(value)) return "(unset)"
  if (Duration.isDuration(value)) {
    const millis = Duration.toMillis(value)
    return `(unset: ${v.unit === "s" ? millis / 1000 : millis})`
  }
  return `(unset: ${String(value)})`
}

/** Where an `InvalidConfig` about settings read from the environment has its words. */
export interface Problem {
  readonly knob: string
  readonly value: string
  readonly reason: string
  readonly other?: { readonly knob: string; readonly value: string }
}

const knobPattern = new RegExp(`\\b(${Object.keys(variables).join("|")})\\b`, "g")

/**
 * A problem found in settings, said in the terms of the variables they were read from: the
 * variable and the text the user set (a URL without its password), `(unset)`, or the default
 * used (`(unset: 1000)`); the options named in its reason become variables too. A knob that
 * is not one of the settings (`shutdownTimeout`) stays as it is.
 *
 * @internal
 */
export const inVariables = (problem: Problem, texts: Texts, settings: Settings | undefined): Problem => {
  const name = (knob: string, value: string) =>
    knob in variables
      ? { knob: variables[knob as Knob].name, value: shown(knob as Knob, texts, settings) }
      : { knob, value }
  const reason = problem.reason.replace(knobPattern, (knob) => variables[knob as Knob].name)
  const main = name(problem.knob, problem.value)
  return problem.other === undefined
    ? { ...main, reason }
    : { ...main, reason, other: name(problem.other.knob, problem.other.value) }
}

/** The texts of the settings read from the environment, by the settings built from them. */
const origins = new WeakMap<Settings, Texts>()

/**
 * Remember that these settings were read from the environment, with the texts set.
 *
 * @internal
 */
export const remember = (settings: Settings, texts: Texts): Settings => {
  origins.set(settings, texts)
  return settings
}

/**
 * A problem with these settings, said in the variables' terms when they were read from the
 * environment, else in the options' terms as given.
 *
 * @internal
 */
export const describe = (settings: Settings, problem: Problem): Problem => {
  const texts = origins.get(settings)
  return texts === undefined ? problem : inVariables(problem, texts, settings)
}

/**
 * The variable a knob is read from, when these settings were read from the environment.
 *
 * @internal
 */
export const variableOf = (settings: Settings, knob: Knob): string | undefined =>
  origins.has(settings) ? variables[knob].name : undefined

/**
 * Each knob's variable, by the knob's name.
 *
 * @internal
 */
export const variableNames: { readonly [K in Knob]: string } = Object.fromEntries(
  Object.entries(variables).map(([knob, v]) => [knob, v.name])
) as { readonly [K in Knob]: string }
