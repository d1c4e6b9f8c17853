/**
 * Updates for a client, delivered to the worker that holds its socket (DESIGN §8).
 *
 * `send(token, update)` finds the socket's owner and appends the update to the owner's
 * mailbox stream in the store; each worker reads its own mailbox from the last id it
 * delivered, so updates sent while its connection was down arrive after it returns, in
 * order, once each. When the store cannot be reached, `send` keeps updates in a bounded
 * outbox and appends them, in order, once it is back. Updates for a socket on this very
 * worker are delivered at once, without the store.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import { InstanceId } from "./InstanceId.js"
import { describeParseError, parseSafely } from "./internal/parse.js"
import { isValidToken, validateToken } from "./internal/validate.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import { type MailboxEntry, MailboxStart, Store } from "./Store.js"
import type { InvalidToken, StoreRefused } from "./StoreError.js"
import { Supervisor, untilRecovered } from "./Supervisor.js"
import { TokenManager } from "./TokenManager.js"

/**
 * An update that the app's schema cannot encode: nothing was sent.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidUpdate extends Data.TaggedError("InvalidUpdate")<{
  readonly token: string
  readonly reason: string
}> {
  override get message(): string {
    return `invalid update for token ${this.token}: ${this.reason}`
  }
}

/**
 * What became of a sent update.
 *
 * - `delivered`: the socket is on this worker; `deliver` ran.
 * - `sent`: appended to the mailbox of the worker that holds the socket.
 * - `buffered`: the store is unreachable; kept in the outbox and appended, in order, when it returns.
 * - `no-owner`: no worker holds a socket for the token; dropped (and counted).
 * - `dropped`: the outbox is full; dropped (and counted).
 *
 * @since 0.1.0
 * @category models
 */
export type SendOutcome = "delivered" | "sent" | "buffered" | "no-owner" | "dropped"

/**
 * @since 0.1.0
 * @category models
 */
export interface Options<A, I, R> {
  /** How updates travel: each is encoded with it when sent and decoded when read. */
  readonly schema: Schema.Schema<A, I>
  /**
   * Hand an update to the socket of `token`, on the worker that holds it. A failure is
   * logged and counted; it never stops delivery of the next update.
   */
  readonly deliver: (token: string, update: A) => Effect.Effect<unknown, unknown, R>
  /** The most updates the outbox keeps while the store is unreachable (default 10,000). */
  readonly outboxCapacity?: number
  /**
   * How long, once the store is back, a buffered update waits for its socket's record to
   * be written back by its owner before it is dropped as having none (default 5 s).
   */
  readonly restoreGrace?: Duration.DurationInput
  /** How long one read of the mailbox waits for an entry (default 5 s). */
  readonly readBlock?: Duration.DurationInput
}

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Mailbox {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /**
     * Send an update to the socket of `token`, wherever it is. Fails only on bad input or
     * a store that refused the append; an unreachable store buffers the update instead.
     */
    readonly send: (
      token: string,
      update: unknown
    ) => Effect.Effect<SendOutcome, InvalidToken | InvalidUpdate | StoreRefused>
    /** Updates waiting in the outbox. */
    readonly buffered: Effect.Effect<number>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Mailbox extends Context.Tag("leasehold/Mailbox")<Mailbox, Mailbox.Service>() {}

/**
 * The name of the supervised loop that reads this worker's mailbox.
 *
 * @since 0.1.0
 * @category constants
 */
export const readerLoop = "mailbox"

/**
 * The name of the supervised loop that empties the outbox once the store is back.
 *
 * @since 0.1.0
 * @category constants
 */
export const outboxLoop = "mailbox-outbox"

/**
 * Updates appended to a mailbox.
 *
 * @since 0.1.0
 * @category metrics
 */
export const sent = Metric.counter("leasehold_mailbox_sent_total", {
  description: "updates appended to the mailbox of the worker holding the socket",
  incremental: true
})

/**
 * Updates handed to `deliver` (on the worker holding the socket).
 *
 * @since 0.1.0
 * @category metrics
 */
export const delivered = Metric.counter("leasehold_mailbox_delivered_total", {
  description: "updates handed to a socket",
  incremental: true
})

/**
 * Updates read by a worker that no longer held the socket and passed on to the one that does.
 *
 * @since 0.1.0
 * @category metrics
 */
export const forwarded = Metric.counter("leasehold_mailbox_forwarded_total", {
  description: "updates forwarded to the socket's new owner",
  incremental: true
})

/**
 * Updates dropped, by `reason`: `no-owner`, `not-owner` (already forwarded once), `overflow`,
 * `undecodable`, `deliver-failed`, `forward-failed` (the store refused the lookup or the append),
 * `duplicate` (a copy of an update already delivered: its append was retried).
 *
 * @since 0.1.0
 * @category metrics
 */
export const dropped = Metric.counter("leasehold_mailbox_dropped_total", {
  description: "updates dropped, by reason",
  incremental: true
})

/**
 * Updates waiting in the outboxes of this process.
 *
 * @since 0.1.0
 * @category metrics
 */
export const outboxSize = Metric.gauge("leasehold_mailbox_outbox_size", {
  description: "updates waiting for the store to return"
})

type DropReason =
  | "no-owner"
  | "not-owner"
  | "overflow"
  | "undecodable"
  | "deliver-failed"
  | "forward-failed"
  | "duplicate"

const drop = (reason: DropReason) => Metric.increment(Metric.tagged(dropped, "reason", reason))

/** How long a mailbox outlives its last reader: a worker that is gone leaves none behind. */
const mailboxTtl = (tokenExpiration: Duration.Duration) => Duration.toMillis(tokenExpiration)

const envelopeOf = <A, I>(schema: Schema.Schema<A, I>) =>
  Schema.parseJson(
    Schema.Struct({
      token: Schema.String.pipe(Schema.filter((token) => isValidToken(token) || "not a valid token")),
      update: schema,
      forwarded: Schema.optionalWith(Schema.Boolean, { default: () => false }),
      // The sending instance and its number for this update: an append that reached the
      // store although its caller saw it fail is sent again, and the reader drops the copy.
      from: Schema.optional(Schema.String),
      seq: Schema.optional(Schema.Number)
    })
  )

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

  /** `true` the first time `(from, seq)` is offered. */
  offer(from: string, seq: number): boolean {
    let seen = this.senders.get(from)
    if (seen === undefined) {
      if (this.senders.size >= dedupeSenders) dropOldest(this.senders)
      seen = new Set()
      this.senders.set(from, seen)
    }
    if (seen.has(seq)) return false
    seen.add(seq)
    if (seen.size > dedupeWindow) dropOldest(seen)
    return true
  }
}

const dropOldest = <K>(entries: { keys(): Iterator<K>; delete(key: K): boolean }) => {
  const oldest = entries.keys().next()
  if (oldest.done !== true) entries.delete(oldest.value)
}

interface Pending {
  readonly token: string
  readonly update: unknown
  /**
   * The envelope, encoded once when the update is sent: it carries this sender's number for
   * the update, so that a retry appends exactly the same entry.
   */
  readonly payload: string
}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make = <A, I, R>(options: Options<A, I, R>) =>
  Effect.gen(function* () {
    const store = yield* Store
    const tokens = yield* TokenManager
    const supervisor = yield* Supervisor
    const config = yield* LeaseholdConfig
    const instanceId = yield* InstanceId
    const context = yield* Effect.context<R>()
    const envelope = envelopeOf(options.schema)
    const encode = parseSafely(envelope, Schema.encodeEither(envelope))
    const decode = parseSafely(envelope, Schema.decodeEither(envelope))
    const capacity = Math.max(1, options.outboxCapacity ?? 10_000)
    const readBlockMs = Math.max(1, Duration.toMillis(Duration.decode(options.readBlock ?? "5 seconds")))
    const restoreGraceMs = Duration.toMillis(Duration.decode(options.restoreGrace ?? "5 seconds"))
    const ttlMs = mailboxTtl(config.tokenExpiration)
    const append = { maxLen: config.mailboxMaxLen, ttlMs }

    const deliver = (token: string, update: A): Effect.Effect<void> =>
      options.deliver(token, update).pipe(
        Effect.provide(context),
        Effect.matchCauseEffect({
          onSuccess: () => Metric.increment(delivered),
          onFailure: (cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause as Cause.Cause<never>)
              : Effect.zipRight(
                  Effect.logWarning(`mailbox: delivery to token ${token} failed`, Cause.squash(cause)),
                  drop("deliver-failed")
                )
        })
      )

    // --- the outbox -------------------------------------------------------------------
    // Ordering rule: while anything waits in the outbox, every new update queues behind it;
    // the drainer removes an update only once it is appended, so nothing overtakes it.
    const outbox: Array<Pending> = []
    let nextSeq = 0
    const wake = yield* Queue.sliding<void>(1)
    let overflowing = false

    const enqueue = (pending: Pending): Effect.Effect<SendOutcome> =>
      Effect.suspend(() => {
        if (outbox.length >= capacity) {
          const first = !overflowing
          overflowing = true
          return Effect.zipRight(
            first
              ? Effect.logWarning(
                  `mailbox: outbox full (${capacity} updates): dropping updates until the store returns`
                )
              : Effect.void,
            Effect.as(drop("overflow"), "dropped" as const)
          )
        }
        outbox.push(pending)
        return Metric.increment(outboxSize).pipe(Effect.zipRight(wake.offer(undefined)), Effect.as("buffered" as const))
      })

    /**
     * Deliver or append one update. `Unavailable` when the store could not be reached: the
     * caller keeps the update.
     */
    const route = (pending: Pending) =>
      Effect.gen(function* () {
        const { token, update } = pending
        if (Option.isSome(yield* tokens.local(token))) {
          yield* deliver(token, update as A)
          return "delivered" as const
        }
        const owner = yield* tokens.owner(token)
        if (Option.isNone(owner)) return "no-owner" as const
        yield* store.mailboxAppend(owner.value.instanceId, pending.payload, append)
        yield* Metric.increment(sent)
        return "sent" as const
      })

    const send: Mailbox.Service["send"] = (token, update) =>
      Effect.gen(function* () {
        yield* validateToken(token)
        // Encoding the envelope checks the update against the schema, once for every route.
        const payload = encode({ token, update: update as A, forwarded: false, from: instanceId, seq: nextSeq })
        if (Either.isLeft(payload)) return yield* new InvalidUpdate({ token, reason: describeParseError(payload.left) })
        const pending: Pending = { token, update, payload: payload.right }
        nextSeq++
        if (outbox.length > 0) return yield* enqueue(pending)
        const outcome = yield* route(pending).pipe(Effect.catchTag("StoreUnavailable", () => enqueue(pending)))
        if (outcome === "no-owner") yield* drop("no-owner")
        return outcome
      })

    // After an outage the owners write their records back as soon as they reconnect; a
    // store that lost its data has none until then. So a buffered update whose socket has
    // no record waits (with every update behind it) until `restoreGrace` after the first
    // such answer, and only then is dropped.
    let graceEndsAt: number | undefined

    const drain = (recovered: Effect.Effect<void>) =>
      Effect.gen(function* () {
        yield* wake.take
        while (outbox.length > 0) {
          const head = outbox[0]!
          const outcome = yield* route(head).pipe(
            Effect.catchIf(
              (error) => error._tag !== "StoreUnavailable",
              (error) =>
                Effect.zipRight(
                  Effect.logWarning(`mailbox: a buffered update for token ${head.token} was refused: ${error.message}`),
                  Effect.as(drop("forward-failed"), "refused" as const)
                )
            )
          )
          yield* recovered
          if (outcome === "no-owner") {
            const now = yield* Clock.currentTimeMillis
            graceEndsAt ??= now + restoreGraceMs
            if (now < graceEndsAt) {
              yield* Effect.sleep(Duration.millis(Math.min(100, graceEndsAt - now)))
              continue
            }
            yield* drop("no-owner")
          }
          outbox.shift()
          yield* Metric.incrementBy(outboxSize, -1)
        }
        overflowing = false
        graceEndsAt = undefined
      }).pipe(
        // Still waiting: wake the next run, after the supervisor's delay.
        Effect.tapError(() => (outbox.length > 0 ? wake.offer(undefined) : Effect.void))
      )

    // --- the reader -------------------------------------------------------------------
    let lastId = MailboxStart
    const seen = new Seen()
    let expiresRefreshedAt = Number.NEGATIVE_INFINITY

    const handle = (entry: MailboxEntry) =>
      Effect.gen(function* () {
        const decoded = decode(entry.payload)
        if (Either.isLeft(decoded)) {
          yield* Effect.logWarning(`mailbox: skipping entry ${entry.id}: ${describeParseError(decoded.left)}`)
          return yield* drop("undecodable")
        }
        const { token, update, from, seq } = decoded.right
        if (from !== undefined && seq !== undefined && !seen.offer(from, seq)) return yield* drop("duplicate")
        if (Option.isSome(yield* tokens.local(token))) return yield* deliver(token, update)
        if (decoded.right.forwarded) return yield* drop("not-owner")
        const owner = yield* tokens.owner(token, { refresh: true })
        if (Option.isNone(owner) || owner.value.instanceId === instanceId) return yield* drop("no-owner")
        const payload = encode({ token, update, forwarded: true, from, seq })
        if (Either.isLeft(payload)) return yield* drop("undecodable")
        yield* store.mailboxAppend(owner.value.instanceId, payload.right, append)
        yield* Metric.increment(forwarded)
      }).pipe(
        // Only an unreachable store stops the reader (the entry is read again once it is
        // back); anything else about one entry costs that entry alone.
        Effect.catchIf(
          (error) => error._tag !== "StoreUnavailable",
          (error) =>
            Effect.zipRight(
              Effect.logWarning(`mailbox: dropping entry ${entry.id}: ${error.message}`),
              drop(error._tag === "InvalidToken" ? "undecodable" : "forward-failed")
            )
        )
      )

    const read = (recovered: Effect.Effect<void>) =>
      Effect.gen(function* () {
        while (true) {
          const now = yield* Clock.currentTimeMillis
          if (now - expiresRefreshedAt >= ttlMs / 4) {
            yield* store.mailboxExpire(instanceId, ttlMs)
            expiresRefreshedAt = now
          }
          const entries = yield* store.mailboxRead(instanceId, lastId, { count: 100, blockMs: readBlockMs })
          yield* recovered
          for (const entry of entries) {
            yield* handle(entry)
            lastId = entry.id
          }
          // Where this reader is, for operators (`leasehold inspect instance`).
          if (entries.length > 0) yield* store.mailboxSetCursor(instanceId, lastId, ttlMs)
        }
      })

    yield* supervisor.run(readerLoop, read, untilRecovered())
    yield* supervisor.run(outboxLoop, drain, untilRecovered())
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() =>
        outbox.length === 0
          ? Effect.void
          : Effect.zipRight(
              Effect.logWarning(`mailbox: closing with ${outbox.length} updates still waiting for the store`),
              Metric.incrementBy(outboxSize, -outbox.length)
            )
      )
    )

    return Mailbox.of({ send, buffered: Effect.sync(() => outbox.length) })
  }).pipe(Effect.annotateLogs({ module: "Mailbox" }))

/**
 * This worker's mailbox: reads and delivers its updates, and sends to the others.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = <A, I, R>(
  options: Options<A, I, R>
): Layer.Layer<Mailbox, never, Store | TokenManager | Supervisor | LeaseholdConfig | InstanceId | R> =>
  Layer.scoped(Mailbox, make(options))
