/**
 * The reading half of a worker's mailbox: the `mailbox` loop, which reads this worker's
 * mailbox from the last id it delivered, drops copies of an update (a retried append),
 * delivers each update to its socket on this worker, and forwards one whose socket moved
 * to the worker that holds it now.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { type MailboxEntry, MailboxStart } from "../../Store.js"
import { describeParseError } from "../parse.js"
import { isCallEntry, receive } from "./calls.js"
import { deliver, drop, type Envelope, forwarded, type MailboxContext, retried } from "./env.js"

/** How many update numbers per sender a reader remembers, to drop copies of an update. */
const dedupeWindow = 10_000

/** How many senders a reader remembers. */
const dedupeSenders = 1_000

/**
 * The updates a reader has seen, per sender, within a window: a copy arrives shortly after
 * the original (a retried append), so a bounded window catches every one.
 */
class Seen {
  // A Set iterates in insertion order: its first entry is the oldest.
  private readonly senders = new Map<string, Set<number>>()

  /** Whether `(from, seq)` was recorded. */
  has(from: string, seq: number): boolean {
    return this.senders.get(from)?.has(seq) === true
  }

  /** Record `(from, seq)`: its copies are dropped from now on. */
  add(from: string, seq: number): void {
    let seen = this.senders.get(from)
    if (seen === undefined) {
      if (this.senders.size >= dedupeSenders) dropOldest(this.senders)
      seen = new Set()
      this.senders.set(from, seen)
    }
    seen.add(seq)
    if (seen.size > dedupeWindow) dropOldest(seen)
  }
}

const dropOldest = <K>(entries: { keys(): Iterator<K>; delete(key: K): boolean }) => {
  const oldest = entries.keys().next()
  if (oldest.done !== true) entries.delete(oldest.value)
}

/**
 * The state of the reader, built once by `Mailbox.make`.
 *
 * @internal
 */
export interface Reader {
  readonly ttlMs: number
  readonly readBlockMs: number
  lastId: string
  readonly seen: Seen
  expiresRefreshedAt: number
  /**
   * The cursor a process before this one under the same instance id left (read at the first
   * attempt): the calls up to it were served by that process, and are not served again.
   */
  servedUpTo: string
  cursorRead: boolean
}

/** A reader that starts at the beginning of the mailbox. */
export const makeReader = (ttlMs: number, readBlockMs: number): Reader => ({
  ttlMs,
  readBlockMs,
  lastId: MailboxStart,
  seen: new Seen(),
  expiresRefreshedAt: Number.NEGATIVE_INFINITY,
  servedUpTo: MailboxStart,
  cursorRead: false
})

const handle = <A, I, R>(env: MailboxContext<A, I, R>, reader: Reader, entry: MailboxEntry) =>
  Effect.suspend(() => {
    if (isCallEntry(entry.payload)) {
      const reading = { store: env.store, append: env.append, seen: reader.seen, servedUpTo: reader.servedUpTo }
      return receive(env.calls, reading, entry.id, entry.payload)
    }
    const decoded = env.decode(entry.payload)
    if (Result.isFailure(decoded)) {
      return Effect.andThen(
        Effect.logWarning(`mailbox: skipping entry ${entry.id}: ${describeParseError(decoded.failure)}`),
        drop("undecodable")
      )
    }
    const { from, seq } = decoded.success
    const handled = pass(env, decoded.success).pipe(
      // Only an unreachable store (or, on a forward, replicas behind) stops the reader: the
      // entry is read again once it is back. Anything else about one entry costs that entry alone.
      Effect.catchIf(
        (error) => !retried(error),
        (error) =>
          Effect.andThen(
            Effect.logWarning(`mailbox: dropping entry ${entry.id}: ${error.message}`),
            drop(error._tag === "InvalidToken" ? "undecodable" : "forward-failed")
          )
      )
    )
    if (from === undefined || seq === undefined) return handled
    if (reader.seen.has(from, seq)) return drop("duplicate")
    // Recorded once handled: an entry whose handling the store cut short (a lookup or a
    // forward that did not reach it) is read again and handled then, not dropped as a copy.
    return Effect.tap(handled, () => Effect.sync(() => reader.seen.add(from, seq)))
  })

/** Deliver an update here, or forward it to the worker that holds its socket now. */
const pass = <A, I, R>(env: MailboxContext<A, I, R>, envelope: Envelope<A, I>) =>
  Effect.gen(function* () {
    const { token, update, from, seq } = envelope
    if (Option.isSome(yield* env.tokens.local(token))) return yield* deliver(env, token, update)
    // Another worker took the token over from this one and sent the tab its state: an
    // update sent here before is not passed on.
    if (yield* env.tokens.isLost(token)) return yield* drop("taken-over")
    if (envelope.forwarded) return yield* drop("not-owner")
    const owner = yield* env.tokens.owner(token, { refresh: true })
    if (Option.isNone(owner) || owner.value.instanceId === env.instanceId) return yield* drop("no-owner")
    const payload = env.encode({ token, update, forwarded: true, from, seq })
    if (Result.isFailure(payload)) return yield* drop("undecodable")
    yield* env.store.mailboxAppend(owner.value.instanceId, payload.success, env.append)
    yield* Metric.update(forwarded, 1)
  })

/** One attempt of the `mailbox` loop, run by the supervisor. */
export const read = <A, I, R>(env: MailboxContext<A, I, R>, reader: Reader, recovered: Effect.Effect<void>) => {
  const { store, instanceId } = env
  const { ttlMs, readBlockMs } = reader
  return Effect.gen(function* () {
    if (!reader.cursorRead) {
      reader.servedUpTo = Option.getOrElse(yield* store.mailboxCursor(instanceId), () => MailboxStart)
      reader.cursorRead = true
    }
    while (true) {
      const now = yield* Clock.currentTimeMillis
      if (now - reader.expiresRefreshedAt >= ttlMs / 4) {
        yield* store.mailboxExpire(instanceId, ttlMs)
        // the cursor lives as long as the mailbox: a process after this one under the same
        // id serves none of the calls up to it again, however long this one read nothing
        if (reader.lastId !== MailboxStart) yield* store.mailboxSetCursor(instanceId, reader.lastId, ttlMs)
        reader.expiresRefreshedAt = now
      }
      const entries = yield* store.mailboxRead(instanceId, reader.lastId, { count: 100, blockMs: readBlockMs })
      yield* recovered
      for (const entry of entries) {
        yield* handle(env, reader, entry)
        reader.lastId = entry.id
      }
      // Where this reader is, for operators (`leasehold inspect instance`).
      if (entries.length > 0) yield* store.mailboxSetCursor(instanceId, reader.lastId, ttlMs)
    }
  })
}
