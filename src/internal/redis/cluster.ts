/**
 * Redis Cluster support for `RedisStore`: the seed-list URL, the key-slot function, the
 * ioredis `Cluster` options, and batches of single-key commands that may span nodes.
 *
 * @internal
 */
import type { Cluster, ClusterOptions, Redis } from "ioredis"
import { type ConnectionRole, connectionOptions, type Endpoint, parseEndpoint } from "./connection.js"

/** The number of hash slots of a Redis Cluster. */
const SLOTS = 16384

/** CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes keys with. */
const crcTable: ReadonlyArray<number> = Array.from({ length: 256 }, (_, byte) => {
  let crc = byte << 8
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  return crc
})

const crc16 = (bytes: Uint8Array): number => {
  let crc = 0
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ crcTable[((crc >> 8) ^ byte) & 0xff]!
  return crc
}

const encoder = new TextEncoder()

/**
 * The hash slot of a key or a shard channel: only the part between the first `{` and the
 * next `}` counts when that part is not empty (the hash tag), as the server computes it.
 *
 * @internal
 */
export const keySlot = (key: string): number => {
  const bytes = encoder.encode(key)
  const open = bytes.indexOf(0x7b)
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1)
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % SLOTS
  }
  return crc16(bytes) % SLOTS
}

/** One node address, as ioredis names nodes (`host:port`). */
export interface NodeAddress {
  readonly host: string
  readonly port: number
}

/**
 * A cluster's seed nodes and the secrets they share. `endpoint` describes the whole
 * cluster for messages (`safeUrl` lists every seed) and for scrubbing.
 *
 * @internal
 */
export interface ClusterEndpoint {
  readonly endpoint: Endpoint
  readonly seeds: ReadonlyArray<NodeAddress>
  /** The URL of one node, named `host:port` as ioredis names it, with the seed URL's scheme and credentials. */
  readonly nodeEndpoint: (node: string) => Endpoint
}

const seedUrlPattern = /^(rediss?:)\/\/(?:([^@/?#]*)@)?([^/?#]*)(\/[^?#]*)?$/i

/**
 * Parse `redis://[user:password@]host:port[,host:port...][/0]`. `undefined` when it is not
 * such a URL, when a host does not parse, or when it selects a database other than 0 (a
 * cluster has only database 0).
 *
 * @internal
 */
export const parseClusterEndpoint = (url: string): ClusterEndpoint | undefined => {
  const match = seedUrlPattern.exec(url)
  if (match === null) return undefined
  const [, scheme, userinfo, hostList, path] = match
  const db = path === undefined || path === "" || path === "/" ? "" : path
  if (db !== "" && db !== "/0") return undefined
  const prefix = `${scheme!.toLowerCase()}//${userinfo === undefined ? "" : `${userinfo}@`}`
  const seeds: Array<NodeAddress> = []
  let first: Endpoint | undefined
  for (const host of hostList!.split(",")) {
    const endpoint = parseEndpoint(`${prefix}${host}`)
    if (endpoint === undefined) return undefined
    const parsed = new URL(endpoint.url)
    seeds.push({ host: parsed.hostname, port: parsed.port === "" ? 6379 : Number(parsed.port) })
    first ??= endpoint
  }
  if (first === undefined) return undefined
  return {
    endpoint: {
      url: first.url,
      safeUrl: `${scheme!.toLowerCase()}//${hostList}`,
      password: first.password,
      db: 0
    },
    seeds,
    nodeEndpoint: (node) => {
      const colon = node.lastIndexOf(":")
      const host = node.slice(0, colon)
      // An IPv6 address needs its brackets back in a URL.
      return parseEndpoint(`${prefix}${host.includes(":") ? `[${host}]` : host}${node.slice(colon)}`) ?? first
    }
  }
}

/**
 * The options of the store's `Cluster` client, from the same per-role options as a single
 * server's connections:
 *
 * - No offline queue, and no resending of a command whose connection closed before the
 *   reply (`retryDelayOnFailover: 0`): it may have run, and a second run of a grant or a
 *   commit would answer as if it had not.
 * - `MOVED`/`ASK` (the command did not run) are followed, and `TRYAGAIN`/`CLUSTERDOWN`
 *   retried every 100 ms, at most `maxRedirections` times: a storm that outlasts them
 *   ends as `StoreUnavailable`.
 *
 * @internal
 */
export const clusterOptions = (
  endpoint: Endpoint,
  role: ConnectionRole,
  settings: { readonly commandTimeoutMs: number; readonly connectTimeoutMs: number }
): ClusterOptions => {
  const { enableOfflineQueue: _queue, retryStrategy, ...redisOptions } = connectionOptions(role, settings)
  const url = new URL(endpoint.url)
  return {
    redisOptions: {
      ...redisOptions,
      ...(url.username === "" ? {} : { username: decodeURIComponent(url.username) }),
      ...(endpoint.password === undefined ? {} : { password: endpoint.password }),
      ...(url.protocol === "rediss:" ? { tls: {} } : {})
    },
    enableOfflineQueue: false,
    enableReadyCheck: true,
    retryDelayOnFailover: 0,
    retryDelayOnMoved: 0,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
    maxRedirections: Math.max(2, Math.min(16, Math.ceil(settings.commandTimeoutMs / 100))),
    slotsRefreshTimeout: settings.connectTimeoutMs,
    clusterRetryStrategy: (attempt) => retryStrategy?.(attempt) ?? 250
  }
}

/**
 * The address ioredis keys a node's connection with.
 *
 * @internal
 */
export const nodeKey = (connection: Redis): string => `${connection.options.host}:${connection.options.port}`

/**
 * The master serving a slot (`host:port`, as `nodeKey` names it), from the client's slot
 * table; `undefined` before the table is known or when no node serves the slot.
 *
 * @internal
 */
export const slotMaster = (cluster: Cluster, slot: number): string | undefined => cluster.slots[slot]?.[0]

/**
 * Run single-key commands as one batch and settle each on its own, in the shape of a
 * pipeline's `exec` (`[error, reply]` per command). On a cluster a pipeline must not span
 * nodes, so each command goes on its own; ioredis writes them without waiting for replies,
 * so the batch still costs one round trip per node.
 *
 * @internal
 */
export const settleEach = (
  commands: ReadonlyArray<() => Promise<unknown>>
): Promise<Array<[error: Error | null, reply: unknown]>> =>
  Promise.all(
    commands.map((run) =>
      run().then(
        (reply): [Error | null, unknown] => [null, reply],
        (error): [Error | null, unknown] => [error instanceof Error ? error : new Error(String(error)), null]
      )
    )
  )
