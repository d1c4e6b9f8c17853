/**
 * The state modules of the fleet's baselines: everything a baseline worker (bench/fleet/baseline.ts)
 * does with a tab's counter, the rest of the server being the same for all of them.
 *
 * - `bare`: the counter in a `Map` of the worker that holds the tab's socket. Nothing durable.
 * - `bare-durable`: the same `Map`, and one `SET` of the new count per event; the event is
 *   answered once Redis replied. The cheapest durable design.
 * - `reflex-style`: Reflex's state manager with the oplock off, per event: the token's lock
 *   (`SET NX PX`, waiting by keyspace notification, bench/fleet/reflexLock.ts), `GET` the
 *   state, `SET` it, release (`GETDEL`). No lease, no group commit. (Reflex's `set_state`
 *   also checks the lock with a `GET` and a `PTTL` per state object before it writes: left
 *   out, which only flatters this baseline.)
 *
 * Every design records which worker holds a tab's socket as Reflex's token manager does
 * (`SET fleet:{T}:socket <worker>` at link, `DEL` at close). An API call arriving at a worker
 * that does not hold the tab's socket is routed as the design would:
 * - `bare` and `bare-durable` keep the count in the owner's memory, so the call goes there:
 *   the worker reads the record (`GET`) and forwards the call over HTTP to the owner
 *   (`POST /internal/bump`), which applies it and pushes the update to its socket;
 * - `reflex-style` keeps the count in Redis, so the worker that got the call applies it
 *   under the lock itself, then reads the record and `PUBLISH`es the update on the owner's
 *   channel (`fleet:w:<worker>`), as Reflex's lost-and-found does; the owner writes it to
 *   the tab's socket.
 */
import * as http from "node:http"
import type { Cluster, Redis } from "ioredis"
import * as ReflexLock from "./reflexLock.js"

/** A tab's counter. */
export interface Count {
  readonly n: number
  readonly v: number
}

/** The names of the baselines. */
export const names = ["bare", "bare-durable", "reflex-style"] as const
export type Name = (typeof names)[number]

/** What the server needs of a design. */
export interface Design {
  /** A bump sent by a tab on a socket this worker holds. */
  readonly socketBump: (token: string, by: number) => Promise<Count>
  /** A bump from the API, on any worker; the owner's socket gets the update. */
  readonly apiBump: (token: string, by: number) => Promise<Count>
  /** A bump forwarded by another worker to this one, the socket's owner. */
  readonly forwardedBump: (token: string, by: number) => Promise<Count>
  /** The tab's counter now (read where the tab's socket is). */
  readonly read: (token: string) => Promise<Count>
  readonly linked: (token: string) => Promise<void>
  readonly unlinked: (token: string) => Promise<void>
}

/** Where a design reaches its peers and the tabs' sockets of this worker. */
export interface Environment {
  readonly name: Name
  readonly workerId: string
  /** Every worker's port, by worker id. */
  readonly peers: ReadonlyMap<string, number>
  readonly redis: Redis | Cluster
  /** One connection per master for keyspace notifications and pub/sub. */
  readonly subscribers: ReadonlyArray<Redis>
  /** Send an update (no `seq`) to the tab's socket on this worker, if it has one. */
  readonly push: (token: string, count: Count) => void
  readonly holds: (token: string) => boolean
}

const zero: Count = { n: 0, v: 0 }
const stateKey = (token: string) => `fleet:{${token}}:s`
const socketKey = (token: string) => `fleet:{${token}}:socket`
const channel = (workerId: string) => `fleet:w:${workerId}`
const tokenExpirationS = 3600

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 })

/** `POST /internal/bump` on a peer: the count it answered. */
const forward = (port: number, token: string, by: number) =>
  new Promise<Count>((resolve, reject) => {
    const request = http.request(
      { host: "127.0.0.1", port, method: "POST", path: `/internal/bump?token=${token}&by=${by}`, agent },
      (response) => {
        let text = ""
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => {
          text += chunk
        })
        response.on("end", () => {
          if (response.statusCode === 200) resolve(JSON.parse(text) as Count)
          else reject(new Error(`forward to ${port}: ${response.statusCode} ${text}`))
        })
      }
    )
    request.on("error", reject)
    request.end()
  })

/** The count in the worker's `Map`, with a `SET` per change when `durable`. */
const inMemory = (env: Environment, durable: boolean): Design => {
  const counts = new Map<string, Count>()
  const apply = async (token: string, by: number) => {
    const count = counts.get(token) ?? zero
    const next = { n: count.n + by, v: count.v + 1 }
    counts.set(token, next)
    if (durable) await env.redis.set(stateKey(token), JSON.stringify(next), "EX", tokenExpirationS)
    return next
  }
  const owned = async (token: string, by: number) => {
    const next = await apply(token, by)
    env.push(token, next)
    return next
  }
  return {
    socketBump: apply,
    forwardedBump: owned,
    apiBump: async (token, by) => {
      if (env.holds(token)) return owned(token, by)
      const owner = await env.redis.get(socketKey(token))
      const port = owner === null || owner === env.workerId ? undefined : env.peers.get(owner)
      return port === undefined ? owned(token, by) : forward(port, token, by)
    },
    read: async (token) => counts.get(token) ?? zero,
    linked: async (token) => {
      await env.redis.set(socketKey(token), env.workerId, "EX", tokenExpirationS)
    },
    unlinked: async (token) => {
      await env.redis.del(socketKey(token))
    }
  }
}

/** Reflex's per-event protocol: the state in Redis, read and written under the token's lock. */
const reflexStyle = async (env: Environment): Promise<Design> => {
  const lock = await ReflexLock.make(env.redis, env.subscribers)
  const apply = (token: string, by: number) =>
    lock.withLock(token, async () => {
      const raw = await env.redis.get(stateKey(token))
      const count = raw === null ? zero : (JSON.parse(raw) as Count)
      const next = { n: count.n + by, v: count.v + 1 }
      await env.redis.set(stateKey(token), JSON.stringify(next), "EX", tokenExpirationS)
      return next
    })
  // The updates other workers publish for this worker's sockets.
  const own = channel(env.workerId)
  const subscriber = env.subscribers[0]!.duplicate()
  await subscriber.subscribe(own)
  subscriber.on("message", (_channel: string, message: string) => {
    const { token, count } = JSON.parse(message) as { token: string; count: Count }
    env.push(token, count)
  })
  return {
    socketBump: apply,
    forwardedBump: apply,
    apiBump: async (token, by) => {
      const next = await apply(token, by)
      if (env.holds(token)) env.push(token, next)
      else {
        const owner = await env.redis.get(socketKey(token))
        if (owner !== null) await env.redis.publish(channel(owner), JSON.stringify({ token, count: next }))
      }
      return next
    },
    read: async (token) => {
      const raw = await env.redis.get(stateKey(token))
      return raw === null ? zero : (JSON.parse(raw) as Count)
    },
    linked: async (token) => {
      await env.redis.set(socketKey(token), env.workerId, "EX", tokenExpirationS)
    },
    unlinked: async (token) => {
      await env.redis.del(socketKey(token))
    }
  }
}

/** The design `env.name` names. */
export const make = (env: Environment): Promise<Design> =>
  env.name === "reflex-style" ? reflexStyle(env) : Promise.resolve(inMemory(env, env.name === "bare-durable"))
