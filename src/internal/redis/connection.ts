/**
 * ioredis connections for `RedisStore`: options, readiness, error mapping and the
 * scrubbing of secrets from every message that leaves the store.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type { ClusterNode, ClusterOptions, RedisOptions } from "ioredis"
import { Cluster, Redis } from "ioredis"
import { StoreRefused, StoreUnavailable } from "../../StoreError.js"
import { type SentinelTarget, sentinelOptions } from "./sentinel.js"

/**
 * Deadlines on network replies are measured in real time, as the server's TTLs are: a
 * `TestClock` in the caller's fiber must not freeze (or fast-forward) a command timeout.
 *
 * @internal
 */
export const liveClock: Clock.Clock = Clock.Clock.defaultValue()

/** @internal */
export const withLiveClock = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.provideService(effect, Clock.Clock, liveClock)

/**
 * What the store knows about its server, minus the secrets: the URL without userinfo
 * (for messages) and the password (to scrub it from any text that might echo it).
 *
 * @internal
 */
export interface Endpoint {
  readonly url: string
  readonly safeUrl: string
  readonly password: string | undefined
  /** The database index the URL selects (its path, as ioredis reads it); 0 without one. */
  readonly db: number
  /** Set: the server is the primary the Sentinels name, found anew at each connection. */
  readonly sentinel?: SentinelTarget
}

/**
 * Parse and check a Redis URL. `undefined` when it is not a `redis:` / `rediss:` URL;
 * the caller turns that into `InvalidConfig` without echoing the URL.
 *
 * @internal
 */
export const parseEndpoint = (url: string): Endpoint | undefined => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return undefined
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") return undefined
  if (parsed.hostname === "") return undefined
  const password = parsed.password === "" ? undefined : decodeURIComponent(parsed.password)
  const path = parsed.pathname === "/" ? "" : parsed.pathname
  const db = Number.parseInt(path.slice(1), 10)
  return {
    url,
    safeUrl: `${parsed.protocol}//${parsed.host}${path}`,
    password,
    db: Number.isSafeInteger(db) && db >= 0 ? db : 0
  }
}

const userinfoPattern = /([a-z][a-z0-9+.-]*:\/\/)[^@/\s]*@/gi

/**
 * Remove URL userinfo and every occurrence of the password from a text. A password
 * shorter than 3 characters is not searched for: replacing it would mangle the text
 * without protecting anything.
 *
 * @internal
 */
export const scrub = (endpoint: Endpoint, text: string): string => {
  let out = text.replace(userinfoPattern, "$1")
  const password = endpoint.password
  if (password !== undefined && password.length >= 3) out = out.split(password).join("***")
  return out
}

/**
 * A copy of an ioredis error carrying only a scrubbed name and message: ioredis attaches
 * the failed command's arguments to some errors, and an `AUTH` command's arguments hold
 * the password.
 *
 * @internal
 */
export const scrubbedCause = (endpoint: Endpoint, cause: unknown): Error => {
  const error = new Error(scrub(endpoint, cause instanceof Error ? cause.message : String(cause)))
  error.name = cause instanceof Error ? cause.name : "Error"
  error.stack = `${error.name}: ${error.message}`
  return error
}

/**
 * Error replies that mean "not now" rather than "never": the server is loading its data,
 * busy with a script, a replica without its primary, or read-only during a failover; a
 * cluster is down, migrating a slot (`TRYAGAIN`, `ASK`), or has moved it (`MOVED`, on a
 * connection to one node that cannot follow it).
 */
const transientReply = /^(LOADING|BUSY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|READONLY|MOVED|ASK)\b/

const isReplyError = (cause: unknown): cause is Error => cause instanceof Error && cause.name === "ReplyError"

/**
 * ioredis' own messages for "this connection cannot carry a command now", rephrased for
 * a reader who did not configure ioredis.
 */
const describeUnavailable = (message: string): string => {
  if (message.includes("enableOfflineQueue")) return "not connected"
  if (message === "Command timed out") return "no reply within the command timeout"
  if (message.includes("maxRetriesPerRequest") || message.includes("Reached the max retries per request limit")) {
    return "connection lost before the reply"
  }
  if (message.startsWith("Too many Cluster redirections")) {
    return `the cluster kept redirecting or refusing the command (${message.slice(message.indexOf("Last error:"))})`
  }
  return message
}

/**
 * Map any failure of an ioredis call to one of our errors: an error reply is
 * `StoreRefused` (except the transient ones), anything else (timeouts, lost connections,
 * refused sockets) is `StoreUnavailable`.
 *
 * @internal
 */
export const toStoreError =
  (endpoint: Endpoint, operation: string) =>
  (cause: unknown): StoreUnavailable | StoreRefused => {
    const message = scrub(endpoint, cause instanceof Error ? cause.message : String(cause))
    const scrubbed = scrubbedCause(endpoint, cause)
    if (isReplyError(cause) && !transientReply.test(message)) {
      return new StoreRefused({ operation, reply: message, cause: scrubbed })
    }
    return new StoreUnavailable({
      operation,
      reason: `${describeUnavailable(message)} (${endpoint.safeUrl})`,
      cause: scrubbed
    })
  }

/** @internal */
export type ConnectionRole = "command" | "subscriber" | "blocking" | "acknowledged"

/**
 * Options shared by every connection of a store.
 *
 * - No offline queue, and no resending of unanswered commands after a reconnect: a
 *   command either runs on a live connection or fails; it never runs later, after its
 *   caller gave up (a late `tryAcquire` would hold a lock nobody knows about).
 * - `maxRetriesPerRequest: 0` rejects the commands in flight as soon as the connection
 *   drops, instead of leaving them to the command timeout.
 * - A short reconnect delay, forever: operations work again right after Redis returns.
 * - No automatic resubscription: the store fails its subscription streams when the
 *   subscriber connection drops, and callers subscribe again
 *   (docs/design.md#no-lost-wake-up, #supervised-loops).
 *
 * @internal
 */
export const connectionOptions = (
  role: ConnectionRole,
  settings: { readonly commandTimeoutMs: number; readonly connectTimeoutMs: number }
): RedisOptions => ({
  // A blocking read waits longer than any command may; it carries its own deadline.
  commandTimeout: role === "blocking" ? undefined : settings.commandTimeoutMs,
  connectTimeout: settings.connectTimeoutMs,
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  autoResubscribe: false,
  maxRetriesPerRequest: 0,
  retryStrategy: (attempt) => Math.min(50 * attempt, 250),
  connectionName: `leasehold:${role}`
})

/**
 * Open a connection (on Sentinel: to the primary the Sentinels name). It starts connecting at once; the 'error' listener is attached in
 * the same tick, so a refused connection is never reported as an unhandled error event.
 *
 * @internal
 */
export const openConnection = (endpoint: Endpoint, options: RedisOptions, onError: (error: Error) => void): Redis => {
  const connection =
    endpoint.sentinel === undefined
      ? new Redis(endpoint.url, options)
      : new Redis(sentinelOptions(endpoint, endpoint.sentinel, options))
  connection.on("error", onError)
  if (endpoint.sentinel !== undefined) reviveOnEnd(connection, options)
  // Every command waiting for the connection to be ready listens for "ready": during an
  // outage there are many, and that is not a leak.
  connection.setMaxListeners(0)
  return connection
}

/** Connections the store closes on purpose: they stay closed. */
const closedByUs = new WeakSet<Redis | Cluster>()

/**
 * Close a connection for good, now (no QUIT).
 *
 * @internal
 */
export const endConnection = (connection: Redis | Cluster): void => {
  closedByUs.add(connection)
  connection.disconnect()
}

/**
 * A Sentinel connection that a promotion's announcement cuts while it is asking the
 * Sentinels for the primary gives up for good (ioredis ends it, "Connection is closed"):
 * connect it again, after a retry delay, unless the store closed it.
 */
const reviveOnEnd = (connection: Redis, options: RedisOptions) => {
  let attempt = 0
  connection.on("ready", () => {
    attempt = 0
  })
  connection.on("end", () => {
    if (closedByUs.has(connection)) return
    setTimeout(() => {
      if (closedByUs.has(connection) || connection.status !== "end") return
      connection.connect().catch(() => undefined)
    }, options.retryStrategy?.(++attempt) ?? 250).unref()
  })
}

/**
 * Open a cluster client on its seed nodes; as `openConnection`, errors go to `onError`
 * (a cluster reports its nodes' errors apart).
 *
 * @internal
 */
export const openCluster = (
  seeds: ReadonlyArray<ClusterNode>,
  options: ClusterOptions,
  onError: (error: Error) => void
): Cluster => {
  const cluster = new Cluster([...seeds], options)
  cluster.setMaxListeners(0)
  cluster.on("error", onError)
  cluster.on("node error", onError)
  return cluster
}

/**
 * Close a connection: QUIT lets replies in flight arrive, `disconnect` then stops the
 * reconnect loop whatever QUIT did (it fails at once on a connection that is down).
 *
 * @internal
 */
export const closeConnection = (connection: Redis | Cluster, timeoutMs: number): Effect.Effect<void> =>
  Effect.promise(() => {
    closedByUs.add(connection)
    return connection.quit().catch(() => undefined)
  }).pipe(
    Effect.timeoutOption(timeoutMs),
    withLiveClock,
    Effect.ensuring(Effect.sync(() => connection.disconnect())),
    Effect.asVoid
  )

/**
 * Wait until the connection is ready, at most `timeoutMs`.
 *
 * @internal
 */
export const awaitReady = (
  connection: Redis | Cluster,
  timeoutMs: number,
  onTimeout: () => StoreUnavailable
): Effect.Effect<void, StoreUnavailable> =>
  Effect.suspend(() => {
    if (connection.status === "ready") return Effect.void
    if (connection.status === "end") return Effect.fail(onTimeout())
    // The deadline is a timer inside the wait, not an interruption: it ends the wait inside
    // an uninterruptible caller too (a lease's flush, a release), and an interruption sent to
    // such a caller still never cuts its cleanup short. (Network deadlines run on live time,
    // as everywhere in this store.)
    return Effect.callback<void, StoreUnavailable>((resume) => {
      const onReady = () => {
        clearTimeout(timer)
        resume(Effect.void)
      }
      const timer = setTimeout(() => {
        connection.off("ready", onReady)
        resume(Effect.fail(onTimeout()))
      }, timeoutMs)
      connection.once("ready", onReady)
      return Effect.sync(() => {
        clearTimeout(timer)
        connection.off("ready", onReady)
      })
    })
  })
