/**
 * The embedded store's key names, each made once per token. A key built anew on every step
 * is a new string, which the key space's `Map` hashes anew (its whole length) at every
 * lookup; the same string object keeps its hash. So a token's keys, and what `tokenKey`
 * reads from a key, are kept here, for at most `maxTokens` tokens (past that the cache
 * starts over: it only saves work, it never decides anything).
 *
 * @internal
 */
import type { Keys } from "../keys.js"

interface TokenKeys {
  lock?: string
  fence?: string
  queue?: string
  queueDeadlines?: string
  queueIds?: string
  signal?: string
  socket?: string
  readonly slices: Map<string, string>
}

/**
 * `key` as one flat string of the engine's string table. A key built by concatenation is a
 * chain of its parts (one object per part joined, several per key), all kept as long as
 * the key is: as a property name it is stored whole and once, and the chain goes. (A
 * property name that reads as an array index would come back as a number's string: a
 * key always has its prefix and a colon, never that.)
 */
const interned = (key: string): string => Object.keys({ [key]: 0 })[0] ?? key

/** Slice names kept per token: an app has a few; more are built each time. */
const maxSlices = 64

/**
 * `keys`, with the per-token names and `tokenKey`'s answers kept.
 *
 * @internal
 */
export const cachedKeys = (keys: Keys, maxTokens = 10_000): Keys => {
  let byToken = new Map<string, TokenKeys>()
  // `null`: not a key of a token
  let parsed = new Map<string, readonly [token: string, name: string] | null>()
  const of = (token: string): TokenKeys => {
    let entry = byToken.get(token)
    if (entry === undefined) {
      if (byToken.size >= maxTokens) byToken = new Map()
      entry = { slices: new Map() }
      byToken.set(token, entry)
    }
    return entry
  }
  /** A key made from the token alone, kept in the token's entry. */
  const named =
    (kind: Exclude<keyof TokenKeys, "slices">) =>
    (token: string): string => {
      const entry = of(token)
      let key = entry[kind]
      if (key === undefined) {
        key = interned(keys[kind](token))
        entry[kind] = key
      }
      return key
    }
  return {
    ...keys,
    lock: named("lock"),
    fence: named("fence"),
    queue: named("queue"),
    queueDeadlines: named("queueDeadlines"),
    queueIds: named("queueIds"),
    signal: named("signal"),
    socket: named("socket"),
    slice: (token, name) => {
      const { slices } = of(token)
      const known = slices.get(name)
      if (known !== undefined) return known
      if (slices.size >= maxSlices) return keys.slice(token, name)
      const key = interned(keys.slice(token, name))
      slices.set(name, key)
      return key
    },
    tokenKey: (key) => {
      const known = parsed.get(key)
      if (known !== undefined) return known ?? undefined
      const parts = keys.tokenKey(key)
      if (parsed.size >= maxTokens * 4) parsed = new Map()
      parsed.set(key, parts ?? null)
      return parts
    }
  }
}
