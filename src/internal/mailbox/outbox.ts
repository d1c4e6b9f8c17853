/**
 * The sending half of a worker's mailbox: `send`, which delivers an update to a socket of
 * this worker or appends it to the mailbox of the worker that holds the socket, and the
 * bounded outbox that keeps updates, in order, while the store cannot be reached, emptied
 * by the `mailbox-outbox` loop once it is back.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type { SendOutcome } from "../../Mailbox.js"
import type { InvalidToken, StoreRefused } from "../../StoreError.js"
import { describeParseError } from "../parse.js"
import { validateToken } from "../validate.js"
import { deliver, drop, type Env, outboxSize, sent } from "./env.js"

/**
 * An update that the app's schema cannot encode: nothing was sent.
 *
 * @internal
 */
export class InvalidUpdate extends Data.TaggedError("InvalidUpdate")<{
  readonly token: string
  readonly reason: string
}> {
  override get message(): string {
    return `invalid update for token ${this.token}: ${this.reason}`
  }
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
}

const enqueue = (sender: Sender, pending: Pending): Effect.Effect<SendOutcome> =>
  Effect.suspend(() => {
    const { outbox, capacity, wake } = sender
    if (outbox.length >= capacity) {
      const first = !sender.overflowing
      sender.overflowing = true
      return Effect.zipRight(
        first
          ? Effect.logWarning(`mailbox: outbox full (${capacity} updates): dropping updates until the store returns`)
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
const route = <A, I, R>(env: Env<A, I, R>, pending: Pending) =>
  Effect.gen(function* () {
    const { token, update } = pending
    if (Option.isSome(yield* env.tokens.local(token))) {
      yield* deliver(env, token, update as A)
      return "delivered" as const
    }
    const owner = yield* env.tokens.owner(token)
    if (Option.isNone(owner)) return "no-owner" as const
    yield* env.store.mailboxAppend(owner.value.instanceId, pending.payload, env.append)
    yield* Metric.increment(sent)
    return "sent" as const
  })

/** `Mailbox.send`. */
export const send = <A, I, R>(
  env: Env<A, I, R>,
  sender: Sender,
  token: string,
  update: unknown
): Effect.Effect<SendOutcome, InvalidToken | InvalidUpdate | StoreRefused> =>
  Effect.gen(function* () {
    yield* validateToken(token)
    // Encoding the envelope checks the update against the schema, once for every route.
    const payload = env.encode({
      token,
      update: update as A,
      forwarded: false,
      from: env.instanceId,
      seq: sender.nextSeq
    })
    if (Either.isLeft(payload)) return yield* new InvalidUpdate({ token, reason: describeParseError(payload.left) })
    const pending: Pending = { token, update, payload: payload.right }
    sender.nextSeq++
    if (sender.outbox.length > 0) return yield* enqueue(sender, pending)
    const outcome = yield* route(env, pending).pipe(Effect.catchTag("StoreUnavailable", () => enqueue(sender, pending)))
    if (outcome === "no-owner") yield* drop("no-owner")
    return outcome
  })

type Routed = "delivered" | "sent" | "no-owner" | "refused"

/**
 * The head of the outbox tried again while its socket has no record: every 100 ms until
 * the restore grace ends (the last wait cut to its end), then done with the last outcome.
 */
const untilGraceEnds = (sender: Sender): Schedule.Schedule<Routed, Routed> =>
  Schedule.spaced("100 millis").pipe(
    Schedule.whileInputEffect((outcome: Routed) =>
      Effect.map(
        Clock.currentTimeMillis,
        (now) => outcome === "no-owner" && sender.graceEndsAt !== undefined && now < sender.graceEndsAt
      )
    ),
    Schedule.modifyDelayEffect((_, delay) =>
      Effect.map(Clock.currentTimeMillis, (now) =>
        Duration.min(delay, Duration.millis(Math.max(0, (sender.graceEndsAt ?? now) - now)))
      )
    ),
    Schedule.passthrough
  )

/** One attempt of the `mailbox-outbox` loop, run by the supervisor. */
export const drain = <A, I, R>(env: Env<A, I, R>, sender: Sender, recovered: Effect.Effect<void>) => {
  const { outbox, wake } = sender
  const retryHead = untilGraceEnds(sender)
  const routeHead = (head: Pending) =>
    route(env, head).pipe(
      Effect.catchIf(
        (error) => error._tag !== "StoreUnavailable",
        (error) =>
          Effect.zipRight(
            Effect.logWarning(`mailbox: a buffered update for token ${head.token} was refused: ${error.message}`),
            Effect.as(drop("forward-failed"), "refused" as const)
          )
      ),
      Effect.tap((outcome) =>
        Effect.zipRight(
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
    yield* wake.take
    while (outbox.length > 0) {
      const head = outbox[0]!
      const outcome: Routed = yield* Effect.repeat(routeHead(head), retryHead)
      if (outcome === "no-owner") yield* drop("no-owner")
      outbox.shift()
      yield* Metric.incrementBy(outboxSize, -1)
    }
    sender.overflowing = false
    sender.graceEndsAt = undefined
  }).pipe(
    // Still waiting: wake the next run, after the supervisor's delay.
    Effect.tapError(() => (outbox.length > 0 ? wake.offer(undefined) : Effect.void))
  )
}
