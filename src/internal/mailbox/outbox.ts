/**
 * The sending half of a worker's mailbox: `send`, which delivers an update to a socket of
 * this worker or appends it to the mailbox of the worker that holds the socket, and the
 * bounded outbox that keeps updates, in order, while the store cannot be reached, emptied
 * by the `mailbox-outbox` loop once it is back.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import type * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { InvalidUpdate, SendOutcome } from "../../Mailbox.js"
import type { ConnectionStatus, SocketRecord, Store } from "../../Store.js"
import type { AcknowledgedError, InvalidInstanceId, InvalidToken, StoreRefused } from "../../StoreError.js"
import { describeParseError } from "../parse.js"
import { tokenError } from "../validate.js"
import { deliver, drop, type MailboxContext, outboxSize, retried, sent } from "./env.js"

interface Pending {
  readonly token: string
  readonly update: unknown
  /** This sender's number for the update, taken when it is sent: a retry appends exactly the same entry. */
  readonly seq: number
  /** The envelope with that number, encoded once, when first needed: a local delivery needs none. */
  payload: string | undefined
}

/** Encode the envelope of `pending` (kept in it); why the update cannot be, if it cannot. */
const encodeEnvelope = <A, I, R>(env: MailboxContext<A, I, R>, pending: Pending): Schema.SchemaError | undefined => {
  const encoded = env.encode({
    token: pending.token,
    update: pending.update as A,
    forwarded: false,
    from: env.instanceId,
    seq: pending.seq
  })
  if (Result.isFailure(encoded)) return encoded.failure
  pending.payload = encoded.success
  return undefined
}

/** The envelope of `pending`, encoded on first use (`send` checked that it encodes: a failure here is a defect). */
const payloadOf = <A, I, R>(env: MailboxContext<A, I, R>, pending: Pending): string => {
  if (pending.payload !== undefined) return pending.payload
  const error = encodeEnvelope(env, pending)
  if (error !== undefined) throw new Error(`mailbox: an update checked when sent does not encode: ${error.message}`)
  return pending.payload!
}

/**
 * The state of the sender, built once by `Mailbox.make`.
 *
 * Ordering rule: while anything waits in the outbox, every new update queues behind it;
 * the drainer removes an update only once it is appended, so nothing overtakes it.
 *
 * @internal
 */
export interface Sender {
  readonly capacity: number
  readonly restoreGraceMs: number
  readonly outbox: Array<Pending>
  nextSeq: number
  readonly wake: Queue.Queue<void>
  overflowing: boolean
  /**
   * After an outage the owners write their records back as soon as they reconnect; a
   * store that lost its data has none until then. So a buffered update whose socket has
   * no record waits (with every update behind it) until `restoreGrace` after the first
   * such answer, and only then is dropped.
   */
  graceEndsAt: number | undefined
  /** The latest epoch of the store's connections the sender has seen, from its first ready status on. */
  epoch: number | undefined
  /**
   * When the store's connection last became ready again. A store that restarted without
   * persistence has no socket records until their owners reconnect and write them back,
   * and a send that waited for the connection meanwhile is answered by it: until
   * `restoreGrace` after this, an update sent straight to a socket without a record is
   * kept in the outbox and waits for the record as a buffered one does.
   */
  backAt: number | undefined
}

/**
 * Note a status of the store. The first ready one sets the epoch; a later epoch is a return,
 * even while another connection is still coming back (a command answered by a restarted
 * server is one).
 */
const observe = (sender: Sender, status: ConnectionStatus, now: number): void => {
  if (sender.epoch === undefined) {
    if (status.ready) sender.epoch = status.epoch
  } else if (status.epoch > sender.epoch) {
    sender.backAt = now
    sender.epoch = status.epoch
  }
}

/** Follow the store's connection status into `sender` (forked by `Mailbox.make` for its lifetime). */
export const followStatus = (store: Store.Service, sender: Sender): Effect.Effect<void> =>
  Stream.runForEach(store.statusChanges, (status) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => observe(sender, status, now)))
  )

const enqueue = (sender: Sender, pending: Pending): Effect.Effect<SendOutcome> =>
  Effect.suspend(() => {
    const { outbox, capacity, wake } = sender
    if (outbox.length >= capacity) {
      const first = !sender.overflowing
      sender.overflowing = true
      return Effect.andThen(
        first
          ? Effect.logWarning(`mailbox: outbox full (${capacity} updates): dropping updates until the store returns`)
          : Effect.void,
        Effect.as(drop("overflow"), "dropped" as const)
      )
    }
    outbox.push(pending)
    return Metric.update(outboxSize, 1).pipe(
      Effect.andThen(Queue.offer(wake, undefined)),
      Effect.as("buffered" as const)
    )
  })

/**
 * A send straight to the store found no record of the socket. Within `restoreGrace` of the
 * store's return the record may be one its owner has not written back yet: the update joins
 * the outbox (and every later one queues behind it). Otherwise it is dropped.
 */
const withoutRecord = <A, I, R>(
  env: MailboxContext<A, I, R>,
  sender: Sender,
  pending: Pending
): Effect.Effect<SendOutcome> =>
  Effect.flatMap(env.store.status, (status) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      // The status is read here too: the follower may not have seen a return that this
      // very send waited for.
      observe(sender, status, now)
      return sender.backAt !== undefined && now < sender.backAt + sender.restoreGraceMs
        ? enqueue(sender, pending)
        : Effect.as(drop("no-owner"), "no-owner" as const)
    })
  )

/**
 * Deliver or append one update. `Unavailable` when the store could not be reached: the
 * caller keeps the update.
 */
const route = <A, I, R>(env: MailboxContext<A, I, R>, pending: Pending) =>
  Effect.flatMap(env.tokens.local(pending.token), (local) => routeFrom(env, pending, local))

/** `route`, with this worker's socket of the token looked up already. */
const routeFrom = <A, I, R>(
  env: MailboxContext<A, I, R>,
  pending: Pending,
  local: Option.Option<string>
): Effect.Effect<"delivered" | "sent" | "no-owner", InvalidToken | InvalidInstanceId | AcknowledgedError> => {
  if (Option.isSome(local)) return Effect.as(deliver(env, pending.token, pending.update as A), "delivered" as const)
  // The socket's record read as the entry is appended: one round trip on a single server.
  return env.store.mailboxAppendToOwner(pending.token, payloadOf(env, pending), env.append).pipe(
    Effect.catchTag("CorruptValue", (error) =>
      Effect.as(Effect.logWarning(`socket records: ${error.message}`), Option.none<SocketRecord>())
    ),
    Effect.flatMap((owner) =>
      Option.isNone(owner) ? Effect.succeed("no-owner" as const) : Effect.as(Metric.update(sent, 1), "sent" as const)
    )
  )
}

const invalidUpdate = <A, I, R>(
  env: MailboxContext<A, I, R>,
  token: string,
  error: Schema.SchemaError
): Effect.Effect<never, InvalidUpdate> => Effect.fail(env.invalidUpdate(token, describeParseError(error)))

/**
 * `Mailbox.send`. The update is checked against the schema before anything else is done:
 * encoded in its envelope where it may travel (an outbox that holds updates already, or a
 * socket held elsewhere), or by the schema alone when it is delivered here, where no
 * envelope is needed.
 */
export const send = <A, I, R>(
  env: MailboxContext<A, I, R>,
  sender: Sender,
  token: string,
  update: unknown
): Effect.Effect<SendOutcome, InvalidToken | InvalidInstanceId | InvalidUpdate | StoreRefused> =>
  // Steps chained by hand, not `Effect.gen`: this is on the path of every update.
  Effect.suspend(() => {
    const invalid = tokenError(token)
    if (invalid !== undefined) return Effect.fail(invalid)
    // The number taken and counted in one block: a send that waits in between must not share it.
    // (A refused update leaves a gap, which the readers' duplicate check does not mind.)
    const pending: Pending = { token, update, seq: sender.nextSeq++, payload: undefined }
    if (sender.outbox.length > 0) {
      const error = encodeEnvelope(env, pending)
      if (error !== undefined) return invalidUpdate(env, token, error)
      return enqueue(sender, pending)
    }
    return Effect.flatMap(
      env.tokens.local(token),
      (local): Effect.Effect<SendOutcome, InvalidToken | InvalidInstanceId | InvalidUpdate | StoreRefused> => {
        if (Option.isSome(local)) {
          const checked = env.check(update as A)
          if (Result.isFailure(checked)) return invalidUpdate(env, token, checked.failure)
          return Effect.as(deliver(env, token, update as A), "delivered" as const)
        }
        const error = encodeEnvelope(env, pending)
        if (error !== undefined) return invalidUpdate(env, token, error)
        return routeFrom(env, pending, local).pipe(
          // kept and appended again by the outbox: the store away, or its replicas behind
          Effect.catchIf(retried, () => enqueue(sender, pending)),
          Effect.flatMap((outcome) =>
            outcome === "no-owner" ? withoutRecord(env, sender, pending) : Effect.succeed(outcome)
          )
        )
      }
    )
  })

type Routed = "delivered" | "sent" | "no-owner" | "refused"

/**
 * The head of the outbox tried again while its socket has no record: every 100 ms until
 * the restore grace ends (the last wait cut to its end), then done with the last outcome.
 */
const untilGraceEnds = (sender: Sender): Schedule.Schedule<Routed, Routed> =>
  Schedule.fromStep(
    Effect.succeed((now: number, outcome: Routed) =>
      outcome === "no-owner" && sender.graceEndsAt !== undefined && now < sender.graceEndsAt
        ? Effect.succeed([outcome, Duration.millis(Math.min(100, sender.graceEndsAt - now))] as [
            Routed,
            Duration.Duration
          ])
        : Cause.done(outcome)
    )
  )

/** One attempt of the `mailbox-outbox` loop, run by the supervisor. */
export const drain = <A, I, R>(env: MailboxContext<A, I, R>, sender: Sender, recovered: Effect.Effect<void>) => {
  const { outbox, wake } = sender
  const retryHead = untilGraceEnds(sender)
  const routeHead = (head: Pending) =>
    route(env, head).pipe(
      Effect.catchIf(
        (error) => !retried(error),
        (error) =>
          Effect.andThen(
            Effect.logWarning(`mailbox: a buffered update for token ${head.token} was refused: ${error.message}`),
            Effect.as(drop("forward-failed"), "refused" as const)
          )
      ),
      Effect.tap((outcome) =>
        Effect.andThen(
          recovered,
          outcome === "no-owner"
            ? Effect.flatMap(Clock.currentTimeMillis, (now) =>
                Effect.sync(() => {
                  sender.graceEndsAt ??= now + sender.restoreGraceMs
                })
              )
            : Effect.void
        )
      )
    )
  return Effect.gen(function* () {
    yield* Queue.take(wake)
    while (outbox.length > 0) {
      const head = outbox[0]!
      const outcome: Routed = yield* Effect.repeat(routeHead(head), retryHead)
      if (outcome === "no-owner") yield* drop("no-owner")
      outbox.shift()
      yield* Metric.update(outboxSize, -1)
    }
    sender.overflowing = false
    sender.graceEndsAt = undefined
  }).pipe(
    // Still waiting: wake the next run, after the supervisor's delay.
    Effect.tapError(() => (outbox.length > 0 ? Queue.offer(wake, undefined) : Effect.void))
  )
}
