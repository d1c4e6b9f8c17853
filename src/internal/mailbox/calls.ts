/**
 * Calls between workers over their mailboxes: a worker asks the worker that holds a token's
 * socket to serve a request for that token, and waits for the reply in its own mailbox. A
 * call and its reply are mailbox entries beside the updates, told from them by their first
 * key (an update's envelope begins with its token). `SocketSession.apply` is their user: an
 * event applied where the tab's socket, and so its lease, is, instead of the lease moving.
 *
 * A call is served at most once: the serving worker records it as it does an update (a copy
 * read again is dropped), and the caller never serves it itself. A caller that hears nothing
 * within its bound reports the outcome unknown: the call may be served later (a frozen worker
 * that resumes), never twice.
 *
 * @internal
 */
import { randomUUID } from "node:crypto"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type { SocketRecord, Store } from "../../Store.js"
import type { AcknowledgedError, CorruptValue, InvalidInstanceId, InvalidToken } from "../../StoreError.js"
import { describeParseError, parseSafely } from "../parse.js"
import { drop } from "./env.js"

/**
 * What the serving worker made of a call: its value, or its failure (the request refused,
 * or not applied, or applied with an outcome unknown).
 *
 * @internal
 */
export type Answer =
  | {
      readonly _tag: "Done"
      readonly value: unknown
      /** Where the serving worker sent the update (a `Mailbox.SendOutcome`). */
      readonly delivery: "delivered" | "sent" | "buffered" | "no-owner" | "dropped"
    }
  | {
      readonly _tag: "Failed"
      readonly message: string
      /** The failure's tag: the handler's error, the store's, or `Unanswered`. */
      readonly code: string
      /** The request itself refused (by the app's handler), not the store or the lock. */
      readonly refused: boolean
      readonly applied: false | "unknown"
    }

const AnswerSchema = Schema.Union([
  Schema.Struct({
    _tag: Schema.Literal("Done"),
    value: Schema.Unknown,
    delivery: Schema.Literals(["delivered", "sent", "buffered", "no-owner", "dropped"])
  }),
  Schema.Struct({
    _tag: Schema.Literal("Failed"),
    message: Schema.String,
    code: Schema.String,
    refused: Schema.Boolean,
    applied: Schema.Union([Schema.Literal(false), Schema.Literal("unknown")])
  })
])

const Entry = Schema.fromJsonString(
  Schema.Union([
    Schema.Struct({
      call: Schema.Struct({
        id: Schema.Number,
        from: Schema.String,
        nonce: Schema.String,
        token: Schema.String,
        request: Schema.Unknown
      })
    }),
    Schema.Struct({ reply: Schema.Struct({ id: Schema.Number, nonce: Schema.String, answer: AnswerSchema }) })
  ])
)

const decodeEntry = parseSafely(Schema.decodeUnknownResult(Entry))

/**
 * How a worker serves a call for `token`: set by the socket session of the worker (none
 * set: the call is answered as not applied).
 *
 * @internal
 */
export type Serve = (token: string, request: unknown) => Effect.Effect<Answer>

/**
 * A worker's calls: those it waits for a reply to, and how it serves those it receives.
 *
 * @internal
 */
export interface Calls {
  serve: Serve | undefined
  readonly pending: Map<number, Deferred.Deferred<Answer>>
  next: number
  /**
   * This process's own, beside its instance id: a worker restarted under a fixed id numbers
   * its calls from 1 again, and neither a reply to the process before it nor a reader that
   * served that process's calls takes a new call for an old one.
   */
  readonly nonce: string
  /** The calls being served: a mailbox's reader does not wait for them. */
  readonly serving: FiberSet.FiberSet<void>
}

/** Made by `Mailbox.make`, in its scope. */
export const make = Effect.map(
  FiberSet.make<void>(),
  (serving): Calls => ({ serve: undefined, pending: new Map(), next: 0, nonce: randomUUID(), serving })
)

/** Whether a mailbox entry is a call or a reply, not an update. */
export const isCallEntry = (payload: string): boolean =>
  payload.startsWith('{"call":') || payload.startsWith('{"reply":')

/** The sender key under which a reader records the calls of one process it served (apart from its updates). */
const callsOf = (from: string, nonce: string) => `${from}#${nonce}`

/** What a call entry's reader needs: the store, the append settings, what it has served. */
export interface Reading {
  readonly store: Store.Service
  readonly append: { readonly maxLen: number; readonly ttlMs: number }
  readonly seen: { has(from: string, seq: number): boolean; add(from: string, seq: number): void }
  /**
   * The entry a process before this one (under the same fixed instance id) had read up to,
   * as its stored cursor says: a call at or before it was served by that process.
   */
  readonly servedUpTo: string
}

/** Whether stream entry id `a` comes after `b` (ids `ms-seq`). */
export const isAfter = (a: string, b: string): boolean => {
  const [aMs = 0, aSeq = 0] = a.split("-").map(Number)
  const [bMs = 0, bSeq = 0] = b.split("-").map(Number)
  return aMs !== bMs ? aMs > bMs : aSeq > bSeq
}

const noSession: Answer = {
  _tag: "Failed",
  message: "the worker holding the socket serves no socket session",
  code: "NoSession",
  refused: false,
  applied: false
}

/**
 * A call or a reply read from this worker's mailbox. A call is served in a fiber of its own,
 * and its reply appended to the caller's mailbox; a reply completes the call waiting for it
 * (one whose caller gave up is dropped).
 *
 * @internal
 */
export const receive = (calls: Calls, reading: Reading, entryId: string, payload: string): Effect.Effect<void> =>
  Effect.suspend(() => {
    const decoded = decodeEntry(payload)
    if (Result.isFailure(decoded)) {
      return Effect.andThen(
        Effect.logWarning(`mailbox: skipping a call: ${describeParseError(decoded.failure)}`),
        drop("undecodable")
      )
    }
    const entry = decoded.success
    if ("reply" in entry) {
      const { id, nonce, answer } = entry.reply
      // a reply to the process before this one, under the same id, is not this one's
      const waiting = nonce === calls.nonce ? calls.pending.get(id) : undefined
      if (waiting === undefined) return Effect.void
      calls.pending.delete(id)
      Deferred.doneUnsafe(waiting, Effect.succeed(answer))
      return Effect.void
    }
    const { id, from, nonce, token, request } = entry.call
    // served by the process before this one under the same id: not counted as a drop
    if (!isAfter(entryId, reading.servedUpTo)) return Effect.void
    // a copy (its append retried)
    if (reading.seen.has(callsOf(from, nonce), id)) return drop("duplicate")
    reading.seen.add(callsOf(from, nonce), id)
    const served = calls.serve === undefined ? Effect.succeed(noSession) : calls.serve(token, request)
    const reply = Effect.flatMap(served, (answer) =>
      reading.store.mailboxAppend(from, JSON.stringify({ reply: { id, nonce, answer } }), reading.append)
    ).pipe(
      Effect.catch((error) =>
        Effect.logWarning(`mailbox: the reply to a call from ${from} not sent: ${error.message}`)
      ),
      Effect.asVoid
    )
    return Effect.asVoid(FiberSet.run(calls.serving, reply))
  })

/**
 * How a call ended on the caller's side: the serving worker's answer, or `None` when the
 * token has no socket (nothing sent: the caller serves the request itself).
 *
 * @internal
 */
export type Called = Option.Option<{ readonly owner: SocketRecord; readonly answer: Answer }>

/**
 * Send `request` for `token` to the worker holding its socket and wait, at most `timeout`,
 * for its answer. No answer within it: `Failed`, of outcome unknown. A failure of the append
 * is the store's: the call may have been appended all the same (`StoreUnavailable`,
 * `NotAcknowledged`).
 *
 * @internal
 */
export const call = (
  calls: Calls,
  sending: { readonly store: Store.Service; readonly instanceId: string; readonly append: Reading["append"] },
  token: string,
  request: unknown,
  timeout: Duration.Duration
): Effect.Effect<Called, InvalidToken | InvalidInstanceId | CorruptValue | AcknowledgedError> => {
  const id = ++calls.next
  const reply = Deferred.makeUnsafe<Answer>()
  const payload = JSON.stringify({ call: { id, from: sending.instanceId, nonce: calls.nonce, token, request } })
  return Effect.acquireUseRelease(
    Effect.sync(() => calls.pending.set(id, reply)),
    () =>
      Effect.flatMap(sending.store.mailboxAppendToOwner(token, payload, sending.append), (owner) =>
        Option.isNone(owner)
          ? Effect.succeed(Option.none())
          : Effect.map(
              Effect.timeoutOrElse(Deferred.await(reply), {
                duration: timeout,
                orElse: () =>
                  Effect.succeed<Answer>({
                    _tag: "Failed",
                    message: `the worker holding the socket of token ${token} did not answer within ${Duration.format(timeout)}`,
                    code: "Unanswered",
                    refused: false,
                    applied: "unknown"
                  })
              }),
              (answer) => Option.some({ owner: owner.value, answer })
            )
      ),
    () => Effect.sync(() => calls.pending.delete(id))
  )
}

/** A worker's calls, with what sending one needs. */
export interface Caller {
  readonly calls: Calls
  readonly sending: Parameters<typeof call>[1]
}
