/**
 * The per-token lock of Reflex's Redis state manager with the oplock off, as
 * ../shared/reference/reflex-behaviour.md §5.4 describes it: `SET <key> <id> NX PX` to
 * take it; a caller that finds it held queues locally and waits for the keyspace
 * notification of its deletion (`del`, `expired`, `evicted` on `__keyspace@<db>__:*:lock`),
 * re-checking every lock expiration / 10 (no polling loop); `GETDEL` to release it, then the
 * next local waiter is woken. Only one waiter of a key tries at a time once others queue.
 */
import { randomUUID } from "node:crypto"
import type { Cluster, Redis } from "ioredis"

/** The lock's `PX`, as Reflex's default `redis_lock_expiration`. */
export const lockExpirationMs = 10_000
const recheckMs = lockExpirationMs / 10

interface Waiter {
  woken: boolean
  wake?: (() => void) | undefined
}

/** The keyspace channels of the locks, matched on each master. */
export const lockPattern = "__keyspace@0__:fleet:*:lock"

/** A lock service over `command`; `subscribers` (one per master) carry the keyspace notifications. */
export const make = async (command: Redis | Cluster, subscribers: ReadonlyArray<Redis>) => {
  const waiters = new Map<string, Array<Waiter>>()

  const notifyNext = (key: string) => {
    const next = waiters.get(key)?.find((waiter) => !waiter.woken)
    if (next === undefined) return
    next.woken = true
    next.wake?.()
  }

  for (const subscriber of subscribers) {
    await subscriber.config("SET", "notify-keyspace-events", "K$gxe")
    subscriber.on("pmessage", (_pattern: string, channel: string, event: string) => {
      if (event === "del" || event === "expired" || event === "evicted") {
        notifyNext(channel.slice(channel.indexOf(":") + 1))
      }
    })
  }
  // A connection in subscriber mode takes no other command: CONFIG first, then PSUBSCRIBE.
  await Promise.all(subscribers.map((subscriber) => subscriber.psubscribe(lockPattern)))

  const trySet = async (key: string, id: string) => (await command.set(key, id, "PX", lockExpirationMs, "NX")) === "OK"

  const wait = (waiter: Waiter) =>
    new Promise<void>((resolve) => {
      if (waiter.woken) return resolve()
      const timer = setTimeout(() => {
        waiter.woken = true
        resolve()
      }, recheckMs)
      waiter.wake = () => {
        clearTimeout(timer)
        resolve()
      }
    })

  const acquire = async (key: string, id: string): Promise<void> => {
    // The fast path: nobody of this process queued for the key.
    if ((waiters.get(key)?.length ?? 0) === 0 && (await trySet(key, id))) return
    const waiter: Waiter = { woken: false }
    let list = waiters.get(key)
    if (list === undefined) {
      list = []
      waiters.set(key, list)
    }
    list.push(waiter)
    try {
      while (true) {
        if (list.length === 1 || waiter.woken) {
          waiter.woken = false
          if (await trySet(key, id)) return
        }
        await wait(waiter)
        waiter.wake = undefined
      }
    } finally {
      waiter.woken = true
      list.splice(list.indexOf(waiter), 1)
      if (list.length === 0 && waiters.get(key) === list) waiters.delete(key)
    }
  }

  const release = async (key: string) => {
    await command.getdel(key)
    notifyNext(key)
  }

  /** `body` under the token's lock, released after it whether it succeeded or not. */
  const withLock = async <A>(token: string, body: () => Promise<A>): Promise<A> => {
    const key = `fleet:{${token}}:lock`
    await acquire(key, randomUUID().replaceAll("-", ""))
    try {
      return await body()
    } finally {
      await release(key)
    }
  }
  return { withLock }
}
