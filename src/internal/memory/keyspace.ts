/**
 * The data of the embedded store: one map from full key names (exactly as `makeKeys`
 * builds them for Redis) to typed entries with an optional deadline, plus the bookkeeping
 * that lets one sweeper fiber remove expired entries without polling.
 *
 * Everything here is synchronous: an operation of `MemoryStore` is one synchronous block,
 * which is what makes it atomic on a single-threaded runtime.
 *
 * @internal
 */

/** @internal */
export interface StringEntry {
  readonly _tag: "string"
  value: string
  deadline: number | undefined
}

/**
 * A set with a number per member, as a Redis sorted set has its scores: a token's queue (its
 * arrival order) and the queue's deadlines (a member whose deadline has passed no longer
 * counts).
 *
 * @internal
 */
export interface SetEntry {
  readonly _tag: "set"
  readonly members: Map<string, number>
  deadline: number | undefined
}

/** @internal */
export interface StreamItem {
  readonly ms: number
  readonly seq: number
  readonly id: string
  readonly payload: string
}

/** @internal */
export interface StreamEntry {
  readonly _tag: "stream"
  items: Array<StreamItem>
  /** The last id ever generated, kept when items are trimmed away (as Redis does). */
  lastMs: number
  lastSeq: number
  deadline: number | undefined
}

/** @internal */
export type Entry = StringEntry | SetEntry | StreamEntry

/**
 * Thrown by the typed accessors when a key holds another kind of value (possible only
 * through `setRaw`). Operations read before they write, so a throw never leaves half an
 * operation applied; the store turns it into `StoreRefused`, as Redis answers WRONGTYPE.
 *
 * @internal
 */
export class WrongTypeError extends Error {
  constructor(readonly key: string) {
    super("WRONGTYPE Operation against a key holding the wrong kind of value")
  }
}

/** An entry is gone from the moment its deadline is reached. @internal */
export const isExpired = (entry: Entry, now: number): boolean => entry.deadline !== undefined && entry.deadline <= now

/** @internal */
export class Keyspace {
  readonly entries = new Map<string, Entry>()

  /** When the sweeper should next run: at the earliest deadline, but at most once per `minSweepMs`. */
  wakeAt = Number.POSITIVE_INFINITY
  private lastSweep: number
  /** Called when `wakeAt` moves earlier, so a sleeping sweeper re-plans. */
  onWakeAtLowered: (() => void) | undefined = undefined
  /**
   * Called after a key is set, gets a new deadline (`present` true) or is removed, also
   * by expiry (`present` false): the disk copy of the embedded store follows every change
   * through it, whichever operation made it.
   */
  onKeyChanged: ((key: string, present: boolean) => void) | undefined = undefined
  /** Called for every key removed because its deadline passed (Redis' `expired` event). */
  onExpired: ((key: string) => void) | undefined = undefined

  constructor(
    private readonly minSweepMs: number,
    now: number
  ) {
    this.lastSweep = now
  }

  /** The live entry under `key`; an expired one is deleted on the way (lazy removal). */
  get(key: string, now: number): Entry | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (isExpired(entry, now)) {
      this.removeExpired(key)
      return undefined
    }
    return entry
  }

  /** Remove a key whose deadline passed, and report it. */
  removeExpired(key: string): void {
    this.entries.delete(key)
    this.onKeyChanged?.(key, false)
    this.onExpired?.(key)
  }

  getString(key: string, now: number): StringEntry | undefined {
    const entry = this.get(key, now)
    if (entry === undefined || entry._tag === "string") return entry
    throw new WrongTypeError(key)
  }

  getSet(key: string, now: number): SetEntry | undefined {
    const entry = this.get(key, now)
    if (entry === undefined || entry._tag === "set") return entry
    throw new WrongTypeError(key)
  }

  getStream(key: string, now: number): StreamEntry | undefined {
    const entry = this.get(key, now)
    if (entry === undefined || entry._tag === "stream") return entry
    throw new WrongTypeError(key)
  }

  /** `SET key value [PX ttl]`: replaces whatever was there, of any kind. */
  setString(key: string, value: string, deadline: number | undefined): void {
    this.entries.set(key, { _tag: "string", value, deadline })
    if (deadline !== undefined) this.noteDeadline(deadline)
    this.onKeyChanged?.(key, true)
  }

  /** Add an entry that has no deadline yet. */
  insert(key: string, entry: Entry): void {
    this.entries.set(key, entry)
    this.onKeyChanged?.(key, true)
  }

  /** `PEXPIRE`: a deadline already reached deletes the key at once, as in Redis. */
  expire(key: string, entry: Entry, deadline: number, now: number): void {
    if (deadline <= now) {
      this.delete(key)
      return
    }
    entry.deadline = deadline
    this.noteDeadline(deadline)
    this.onKeyChanged?.(key, true)
  }

  delete(key: string): boolean {
    const deleted = this.entries.delete(key)
    if (deleted) this.onKeyChanged?.(key, false)
    return deleted
  }

  /** Delete every expired entry and plan the next sweep. Returns the number of live keys. */
  sweep(now: number): number {
    const planned = this.wakeAt
    let earliest = Number.POSITIVE_INFINITY
    for (const [key, entry] of this.entries) {
      if (entry.deadline === undefined) continue
      if (entry.deadline <= now) this.removeExpired(key)
      else if (entry.deadline < earliest) earliest = entry.deadline
    }
    this.lastSweep = now
    this.wakeAt = earliest === Number.POSITIVE_INFINITY ? earliest : Math.max(earliest, now + this.minSweepMs)
    if (this.wakeAt < planned) this.onWakeAtLowered?.()
    return this.entries.size
  }

  /**
   * A deadline earlier than the planned sweep brings the sweep forward (never closer than
   * `minSweepMs` after the previous one), so an idle store sleeps until something can
   * expire instead of waking on a fixed tick.
   */
  private noteDeadline(deadline: number): void {
    if (deadline >= this.wakeAt) return
    const wakeAt = Math.max(deadline, this.lastSweep + this.minSweepMs)
    if (wakeAt >= this.wakeAt) return
    this.wakeAt = wakeAt
    this.onWakeAtLowered?.()
  }
}

const streamIdPattern = /^(\d+)(?:-(\d+))?$/

/** Parse `<ms>-<seq>` (or `<ms>`, meaning `<ms>-0`); `undefined` when malformed. @internal */
export const parseStreamId = (id: string): { readonly ms: number; readonly seq: number } | undefined => {
  const match = streamIdPattern.exec(id)
  if (match === null) return undefined
  const ms = Number(match[1])
  const seq = match[2] === undefined ? 0 : Number(match[2])
  return Number.isSafeInteger(ms) && Number.isSafeInteger(seq) ? { ms, seq } : undefined
}

/**
 * The next id of a stream, as Redis `XADD *` makes it: the clock's millisecond when it is
 * past the last id, otherwise the last id's millisecond with the next sequence number, so
 * ids increase strictly even when the clock stands still or goes back.
 *
 * @internal
 */
export const nextStreamId = (stream: StreamEntry, now: number): { readonly ms: number; readonly seq: number } =>
  now > stream.lastMs ? { ms: now, seq: 0 } : { ms: stream.lastMs, seq: stream.lastSeq + 1 }

/** Index of the first item with an id strictly greater than `(ms, seq)`. @internal */
export const firstAfter = (items: ReadonlyArray<StreamItem>, ms: number, seq: number): number => {
  let lo = 0
  let hi = items.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    const item = items[mid]!
    if (item.ms < ms || (item.ms === ms && item.seq <= seq)) lo = mid + 1
    else hi = mid
  }
  return lo
}
