/**
 * Updates for a client, delivered to the worker that holds its socket (docs/delivery.md).
 *
 * `typed(schema)` gives the `send` of updates of the worker's schema:
 *
 * ```ts
 * import { Effect, Schema } from "effect"
 * import { Mailbox } from "leasehold"
 *
 * const Count = Schema.Struct({ n: Schema.Number })
 * const Updates = Mailbox.typed(Count)
 *
 * const notify = (token: string, n: number) => Updates.send(token, { n })
 * ```
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
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import { InstanceId } from "./InstanceId.js"
import * as Calls from "./internal/mailbox/calls.js"
import * as MailboxEnv from "./internal/mailbox/env.js"
import * as Outbox from "./internal/mailbox/outbox.js"
import * as Reader from "./internal/mailbox/reader.js"
import * as Untyped from "./internal/mailbox/untyped.js"
import { parseSafely } from "./internal/parse.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import { Store } from "./Store.js"
import type { InvalidInstanceId, InvalidToken, StoreRefused } from "./StoreError.js"
import { Supervisor, untilRecovered } from "./Supervisor.js"
import { TokenManager } from "./TokenManager.js"

/**
 * An update that the app's schema cannot encode: nothing was sent.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidUpdate extends Schema.TaggedError<InvalidUpdate>()("InvalidUpdate", {
  token: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid update for token ${this.token}: ${this.reason}`
  }
}

/**
 * What became of a sent update.
 *
 * - `delivered`: the socket is on this worker; `deliver` ran.
 * - `sent`: appended to the mailbox of the worker that holds the socket.
 * - `buffered`: the store is unreachable, or came back within `restoreGrace` without the socket's
 *   record; kept in the outbox and appended, in order, when it (or the record) returns.
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
  readonly schema: Schema.Codec<A, I>
  /**
   * Hand an update to the socket of `token`, on the worker that holds it. A failure is
   * logged and counted; it never stops delivery of the next update.
   */
  readonly deliver: (token: string, update: A) => Effect.Effect<unknown, unknown, R>
  /** The most updates the outbox keeps while the store is unreachable (default 10,000). */
  readonly outboxCapacity?: number
  /**
   * How long, once the store is back, a buffered update waits for its socket's record to
   * be written back by its owner before it is dropped as having none (default 5 s). For as
   * long after the store's connection returns, an update sent straight to the store that
   * finds no record is buffered and waits the same way.
   */
  readonly restoreGrace?: Duration.Input
  /** How long one read of the mailbox waits for an entry (default 5 s). */
  readonly readBlock?: Duration.Input
}

/**
 * What a send fails with: a bad token (or, from the store, a bad instance id in a socket's
 * record), an update the schema cannot encode, or a store that refused the append. An
 * unreachable store is no failure: the update waits in the outbox.
 *
 * @since 0.2.0
 * @category errors
 */
export type SendError = InvalidToken | InvalidInstanceId | InvalidUpdate | StoreRefused

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Mailbox {
  /**
   * The worker's mailbox. Updates are sent with the `send` of `typed(schema)`, typed by
   * the schema the worker was built with.
   *
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /** Updates waiting in the outbox. */
    readonly buffered: Effect.Effect<number>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Mailbox extends Context.Service<Mailbox, Mailbox.Service>()("leasehold/Mailbox") {}

/**
 * The `send` of updates of one schema.
 *
 * @since 0.2.0
 * @category models
 */
export interface Typed<A> {
  /**
   * Send an update to the socket of `token`, wherever it is. Fails only on bad input or a
   * store that refused the append; an unreachable store buffers the update instead.
   */
  readonly send: (token: string, update: A) => Effect.Effect<SendOutcome, SendError, Mailbox>
  /** `send` with the worker's mailbox looked up once, for a caller that sends many. */
  readonly sender: Effect.Effect<(token: string, update: A) => Effect.Effect<SendOutcome, SendError>, never, Mailbox>
}

/**
 * Sending typed by `schema`, the schema the worker was built with (`Worker` options'
 * `schema`): an update of another shape does not compile. The worker's own schema encodes
 * it, as every update, when it is sent.
 *
 * @since 0.2.0
 * @category accessors
 */
export const typed = <A, I>(_schema: Schema.Codec<A, I>): Typed<A> => ({
  send: (token, update) => Effect.flatMap(Mailbox, (mailbox) => Untyped.sendOf(mailbox)(token, update)),
  sender: Effect.map(Mailbox, Untyped.sendOf)
})

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
export const sent = MailboxEnv.sent

/**
 * Updates handed to `deliver` (on the worker holding the socket).
 *
 * @since 0.1.0
 * @category metrics
 */
export const delivered = MailboxEnv.delivered

/**
 * Updates read by a worker that no longer held the socket and passed on to the one that does.
 *
 * @since 0.1.0
 * @category metrics
 */
export const forwarded = MailboxEnv.forwarded

/**
 * Updates dropped, by `reason`: `no-owner`, `not-owner` (already forwarded once), `overflow`,
 * `undecodable`, `deliver-failed`, `forward-failed` (the store refused the lookup or the append),
 * `duplicate` (a copy of an update already delivered: its append was retried), `taken-over`
 * (the socket's record was taken over by another worker, which sent the tab its state).
 *
 * @since 0.1.0
 * @category metrics
 */
export const dropped = MailboxEnv.dropped

/**
 * Updates waiting in the outboxes of this process.
 *
 * @since 0.1.0
 * @category metrics
 */
export const outboxSize = MailboxEnv.outboxSize

/** How long a mailbox outlives its last reader: a worker that is gone leaves none behind. */
const mailboxTtl = (tokenExpiration: Duration.Duration) => Duration.toMillis(tokenExpiration)

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
    const envelope = MailboxEnv.envelopeOf(options.schema)
    const encode = parseSafely(Schema.encodeResult(envelope))
    const decode = parseSafely(Schema.decodeResult(envelope))
    // the update alone through the same schema and JSON as its envelope: refused the same way
    const updateJson = Schema.fromJsonString(Schema.toCodecJson(options.schema))
    const check = parseSafely(Schema.encodeResult(updateJson))
    const capacity = Math.max(1, options.outboxCapacity ?? 10_000)
    const readBlockMs = Math.max(1, Duration.toMillis(Duration.fromInputUnsafe(options.readBlock ?? "5 seconds")))
    const restoreGraceMs = Duration.toMillis(Duration.fromInputUnsafe(options.restoreGrace ?? "5 seconds"))
    const ttlMs = mailboxTtl(config.tokenExpiration)
    const append = { maxLen: config.mailboxMaxLen, ttlMs }
    const calls = yield* Calls.make
    const env: MailboxEnv.MailboxContext<A, I, R> = {
      options,
      calls,
      store,
      tokens,
      instanceId,
      context,
      encode,
      check,
      decode,
      merged: { from: undefined, to: undefined },
      append,
      invalidUpdate: (token, reason) => new InvalidUpdate({ token, reason })
    }

    // --- the outbox (internal/mailbox/outbox.ts) ----------------------------------------
    const sender: Outbox.Sender = {
      capacity,
      restoreGraceMs,
      outbox: [],
      nextSeq: 0,
      wake: yield* Queue.sliding<void>(1),
      overflowing: false,
      graceEndsAt: undefined,
      epoch: undefined,
      backAt: undefined
    }

    // --- the reader (internal/mailbox/reader.ts) ----------------------------------------
    const reader = Reader.makeReader(ttlMs, readBlockMs)

    yield* supervisor.run(readerLoop, (recovered) => Reader.read(env, reader, recovered), untilRecovered())
    yield* Effect.forkScoped(Effect.interruptible(Outbox.followStatus(store, sender)))
    yield* supervisor.run(outboxLoop, (recovered) => Outbox.drain(env, sender, recovered), untilRecovered())
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() =>
        sender.outbox.length === 0
          ? Effect.void
          : Effect.andThen(
              Effect.logWarning(`mailbox: closing with ${sender.outbox.length} updates still waiting for the store`),
              Metric.update(outboxSize, -sender.outbox.length)
            )
      )
    )

    // the untyped send and the calls, found by the service (`typed`, `SocketSession.apply`):
    // the public service types neither
    const service = Mailbox.of({ buffered: Effect.sync(() => sender.outbox.length) })
    return Untyped.register(service, {
      send: (token, update) => Outbox.send(env, sender, token, update),
      caller: { calls, sending: { store, instanceId, append } }
    })
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
  Layer.effect(Mailbox, make(options))
