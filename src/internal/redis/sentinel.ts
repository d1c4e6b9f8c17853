/**
 * Redis Sentinel support for `RedisStore`: the Sentinel list (`host:port,host:port`, or a
 * `redis[s]://[user:password@]host:port,…[/db]` URL for the servers' credentials, TLS and
 * database) and the ioredis options that make a connection find the primary through the
 * Sentinels and follow it when they promote another server.
 *
 * @internal
 */
import type { RedisOptions } from "ioredis"
import type { NodeAddress } from "./cluster.js"
import type { Endpoint } from "./connection.js"

/**
 * Where the primary is found: the Sentinels and the master name they monitor, and what
 * the primary and its replicas are reached with.
 *
 * @internal
 */
export interface SentinelTarget {
  readonly sentinels: ReadonlyArray<NodeAddress>
  readonly name: string
  readonly tls: boolean
  readonly username: string | undefined
}

const listPattern = /^(?:(rediss?):\/\/(?:([^@/?#]*)@)?)?([^/?#@]+)(?:\/(\d*))?$/i
const hostPortPattern = /^(?:\[([0-9a-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/i

/**
 * Parse the Sentinel list. `undefined` when it does not parse (a host without a port, a
 * port out of range, a database that is not a number); the caller turns that into
 * `InvalidConfig` without echoing the list, which may hold a password.
 *
 * @internal
 */
export const parseSentinels = (
  list: string,
  name: string
): { readonly endpoint: Endpoint; readonly target: SentinelTarget } | undefined => {
  const match = listPattern.exec(list.trim())
  if (match === null) return undefined
  const [, scheme = "redis", userinfo, hostList, database] = match
  const sentinels: Array<NodeAddress> = []
  for (const entry of hostList!.split(",")) {
    const address = hostPortPattern.exec(entry.trim())
    if (address === null) return undefined
    const port = Number(address[3])
    if (port < 1 || port > 65535) return undefined
    sentinels.push({ host: address[1] ?? address[2]!, port })
  }
  let username: string | undefined
  let password: string | undefined
  try {
    if (userinfo !== undefined && userinfo !== "") {
      const colon = userinfo.indexOf(":")
      const user = decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(0, colon))
      const secret = colon < 0 ? "" : decodeURIComponent(userinfo.slice(colon + 1))
      username = user === "" ? undefined : user
      password = secret === "" ? undefined : secret
    }
  } catch {
    return undefined
  }
  const db = database === undefined || database === "" ? 0 : Number(database)
  if (!Number.isSafeInteger(db)) return undefined
  const lowerScheme = scheme.toLowerCase()
  const hosts = sentinels.map(({ host, port }) => `${host.includes(":") ? `[${host}]` : host}:${port}`).join(",")
  return {
    endpoint: {
      url: `${lowerScheme}://${hosts}`,
      safeUrl: `${lowerScheme}://${hosts}/${db} (Sentinel master ${name})`,
      password,
      db
    },
    target: { sentinels, name, tls: lowerScheme === "rediss", username }
  }
}

/**
 * A connection's options on Sentinel, from the per-role options a single server's
 * connection has:
 *
 * - The primary's address is asked of the Sentinels at each (re)connection, and its role
 *   is checked once connected (`role: "master"`): a connection never settles on a replica.
 * - `failoverDetector`: each connection listens for `+switch-master` on the Sentinels and
 *   drops at once when a promotion is announced. A primary frozen (or cut off) keeps its
 *   sockets open, and without this a connection to it would wait for replies for ever.
 * - A `READONLY` reply, or a `WAIT` refused on a replica (a connection that reached a
 *   server just demoted, before Sentinel cut its clients), drops the connection, so that it
 *   asks the Sentinels again; the command is not sent again (its caller sees
 *   `StoreUnavailable`, or `NotAcknowledged` for the step before the `WAIT`).
 * - The password and user of the URL are the primary's (and its replicas'): the Sentinels
 *   are reached without credentials, with TLS when the URL says `rediss://`.
 *
 * @internal
 */
export const sentinelOptions = (endpoint: Endpoint, target: SentinelTarget, options: RedisOptions): RedisOptions => ({
  ...options,
  sentinels: target.sentinels.map(({ host, port }) => ({ host, port })),
  name: target.name,
  role: "master",
  db: endpoint.db,
  ...(target.username === undefined ? {} : { username: target.username }),
  ...(endpoint.password === undefined ? {} : { password: endpoint.password }),
  ...(target.tls ? { tls: {}, enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
  failoverDetector: true,
  sentinelRetryStrategy: (attempt) => options.retryStrategy?.(attempt) ?? 250,
  sentinelReconnectStrategy: (attempt) => options.retryStrategy?.(attempt) ?? 250,
  ...(options.connectTimeout === undefined ? {} : { sentinelCommandTimeout: options.connectTimeout }),
  reconnectOnError: (error) =>
    error.message.startsWith("READONLY") || error.message.startsWith("ERR WAIT cannot be used with replica instances")
})
