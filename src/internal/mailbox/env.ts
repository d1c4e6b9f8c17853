/**
 * What the sending and the reading half of a worker's mailbox share: the environment
 * `Mailbox.make` builds once (the store, the token manager, the envelope codec, the
 * append settings), the metrics both count, and delivery to a socket of this worker.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import type * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type { InvalidUpdate, Options } from "../../Mailbox.js"
import type { Store } from "../../Store.js"
import type { TokenManager } from "../../TokenManager.js"
import { isValidToken } from "../validate.js"
import type { Calls } from "./calls.js"

/**
 * Updates appended to a mailbox.
 *
 * @internal
 */
export const sent = Metric.counter("leasehold_mailbox_sent_total", {
  description: "updates appended to the mailbox of the worker holding the socket",
  incremental: true
})

/**
 * Updates handed to `deliver` (on the worker holding the socket).
 *
 * @internal
 */
export const delivered = Metric.counter("leasehold_mailbox_delivered_total", {
  description: "updates handed to a socket",
  incremental: true
})

/**
 * Updates read by a worker that no longer held the socket and passed on to the one that does.
 *
 * @internal
 */
export const forwarded = Metric.counter("leasehold_mailbox_forwarded_total", {
  description: "updates forwarded to the socket's new owner",
  incremental: true
})

/**
 * Updates dropped, by `reason`: `no-owner`, `not-owner` (already forwarded once), `overflow`,
 * `undecodable`, `deliver-failed`, `forward-failed` (the store refused the lookup or the append),
 * `duplicate` (a copy of an update already delivered: its append was retried), `taken-over`
 * (its socket's record was taken over by another worker, which sent the tab its state).
 *
 * @internal
 */
export const dropped = Metric.counter("leasehold_mailbox_dropped_total", {
  description: "updates dropped, by reason",
  incremental: true
})

/**
 * Updates waiting in the outboxes of this process.
 *
 * @internal
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
  | "taken-over"

export const drop = (reason: DropReason) => Metric.update(Metric.withAttributes(dropped, { reason: reason }), 1)

export const envelopeOf = <A, I>(schema: Schema.Codec<A, I>) =>
  Schema.fromJsonString(
    Schema.Struct({
      token: Schema.String.check(Schema.makeFilter((token) => isValidToken(token) || "not a valid token")),
      update: Schema.toCodecJson(schema),
      forwarded: Schema.Boolean.pipe(Schema.withDecodingDefaultType(Effect.succeed(false))),
      // The sending instance and its number for this update: an append that reached the
      // store although its caller saw it fail is sent again, and the reader drops the copy.
      from: Schema.optional(Schema.String),
      seq: Schema.optional(Schema.Number)
    })
  )

/** An update as it travels, with its token and sender. */
export type Envelope<A, I> = ReturnType<typeof envelopeOf<A, I>>["Type"]

/**
 * The environment of one mailbox, built once by `Mailbox.make`.
 *
 * @internal
 */
export interface MailboxContext<A, I, R> {
  readonly options: Options<A, I, R>
  /** The calls this worker waits for, and how it serves those it receives (`calls.ts`). */
  readonly calls: Calls
  readonly store: Store.Service
  readonly tokens: TokenManager.Service
  readonly instanceId: string
  readonly context: Context.Context<R>
  readonly encode: (envelope: Envelope<A, I>) => Result.Result<string, Schema.SchemaError>
  /** The update encoded alone (its schema, then JSON; no envelope): whether it can be sent at all. */
  readonly check: (update: A) => Result.Result<unknown, Schema.SchemaError>
  readonly decode: (payload: string) => Result.Result<Envelope<A, I>, Schema.SchemaError>
  /** The last caller's context `deliver` merged the mailbox's into (`provided`). */
  readonly merged: Merged
  /** The options of every append to a mailbox. */
  readonly append: { readonly maxLen: number; readonly ttlMs: number }
  /** The error of an update the schema refuses (made by `Mailbox`, which defines it). */
  readonly invalidUpdate: (token: string, reason: string) => InvalidUpdate
}

/** The last context `deliver` merged the mailbox's into, and the merge. */
export interface Merged {
  from: Context.Context<unknown> | undefined
  to: Context.Context<unknown> | undefined
}

/**
 * The update to the app's `deliver`, run with the mailbox's context merged into its fiber's
 * (`Effect.updateContext`: the fiber's context set, and set back when the delivery ends,
 * however it ends). The merge made last is kept: a socket's updates come from
 * the same fiber, with the same context (so one caller's context stays reachable until
 * another's replaces it). A failed delivery is logged and counted.
 */
export const deliver = <A, I, R>(env: MailboxContext<A, I, R>, token: string, update: A): Effect.Effect<void> =>
  Effect.updateContext<void, never, unknown, unknown>(
    Effect.matchCauseEffect(env.options.deliver(token, update) as Effect.Effect<void>, {
      onSuccess: () => Metric.update(delivered, 1),
      onFailure: (cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.andThen(
              Effect.logWarning(`mailbox: delivery to token ${token} failed`, Cause.squash(cause)),
              drop("deliver-failed")
            )
    }),
    (previous: Context.Context<unknown>) => {
      const { merged } = env
      if (merged.from !== previous) {
        merged.from = previous
        merged.to = Context.merge(previous, env.context)
      }
      return merged.to!
    }
  ) as Effect.Effect<void>

/**
 * A failure after which an update is appended again: the store could not be reached, or
 * (with `minReplicasAck`) its replicas did not acknowledge the append in time. Either way
 * the entry may be in the mailbox already; the reader drops the copy by its number.
 *
 * @internal
 */
export const retried = <E extends { readonly _tag: string }>(
  error: E
): error is Extract<E, { readonly _tag: "StoreUnavailable" | "NotAcknowledged" }> =>
  error._tag === "StoreUnavailable" || error._tag === "NotAcknowledged"
