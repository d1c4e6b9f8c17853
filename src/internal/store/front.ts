/**
 * The checked front of every store: turns a backend's `Driver` into the `Store` service.
 * Everything a backend would otherwise repeat lives here, once:
 *
 * - validation, before any I/O: tokens, slice names, instance ids (also those inside a
 *   socket record or a `Contended` signal), so user input never becomes part of a key;
 * - encoding: signals, notices and socket records to their wire strings, and back, with
 *   messages that are not signals (or not notices about the token) ignored and corrupt
 *   records reported as `CorruptValue`;
 * - a lost lock as `LockLost`, naming the holder found;
 * - normalized numbers (whole milliseconds; a read's count whole; `maxLen` as given);
 * - the scan's warnings for records it skips, and the filter on socket events.
 *
 * This module holds the lock, the queue, signals, presence and the one-step modification,
 * and assembles the service; the socket records are in `socketPart.ts`, the mailboxes in
 * `mailboxPart.ts`, the way every part runs a step in `checked.ts`.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Filter from "effect/Filter"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { PresenceMessage, Signal, Store } from "../../Store.js"
import { LockLost } from "../../StoreError.js"
import {
  decodeNotice,
  decodePresenceMessage,
  decodeSignal,
  decodeTokenNotice,
  encodeNotice,
  encodePresenceMessage,
  encodeSignal
} from "../codec.js"
import * as Operations from "../operations/index.js"
import {
  claimError,
  instanceIdError,
  instanceIdsError,
  lockIdError,
  signalInstance,
  sliceNamesError,
  tokenAndInstanceError,
  tokenError
} from "../validate.js"
import { checked, stepOf, wholeMs } from "./checked.js"
import type { Driver, Guarded, NoticeMessages } from "./driver.js"
import { mailboxPart } from "./mailboxPart.js"
import { socketPart } from "./socketPart.js"

/** The message of a release: it names the lock released, so a subscriber can tell whose release it was. */
const released = (lockId: string) => encodeSignal({ _tag: "Released", lockId })

const guarded = <A>(token: string, lockId: string, outcome: Guarded<A>): Effect.Effect<A, LockLost> =>
  outcome._tag === "Done"
    ? Effect.succeed(outcome.value)
    : Effect.fail(new LockLost({ token, lockId, holder: outcome.holder }))

/** The lock and the slices written under it. */
const lockPart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    tryAcquire: (token, lockId, slices) => step(Operations.tryAcquire, { token, lockId, slices }),
    release: (token, lockId) => step(Operations.release, { token, lockId, released: released(lockId) }),
    commitAndRelease: (token, lockId, entries) =>
      Effect.flatMap(
        step(Operations.commitAndRelease, { token, lockId, entries, released: released(lockId) }),
        (outcome) => guarded(token, lockId, outcome)
      ),
    extend: (token, lockId, slices = [], options) =>
      step(Operations.extend, { token, lockId, slices, claim: options?.claim }),
    holder: (token) => step(Operations.holder, { token }),

    readSlices: (token, names) => step(Operations.readSlices, { token, names }),
    writeIfHolder: (token, lockId, entries, options) =>
      Effect.flatMap(
        step(Operations.writeIfHolder, {
          token,
          lockId,
          entries,
          claim: options?.claim,
          instanceId: options?.instanceId,
          extend: options?.extend === true
        }),
        (outcome) => guarded(token, lockId, outcome)
      )
  } satisfies Partial<Store.Service>
}

/** The notices the queue steps of `token` publish, in their wire form. */
const noticeMessages = (token: string): NoticeMessages => ({
  granted: encodeNotice(token, { _tag: "Granted" }),
  contended: encodeNotice(token, { _tag: "Contended" })
})

/** A release's arguments. */
const releaseArgs = (
  token: string,
  lockId: string,
  options: {
    readonly instanceId: string
    readonly requeue?: boolean
    readonly queueAs?: string
    readonly carry?: ReadonlyArray<string>
  }
): Operations.ReleaseQueuedArgs => ({
  token,
  lockId,
  instanceId: options.instanceId,
  requeue: options.requeue === true,
  queueAs: options.queueAs,
  carry: options.carry ?? [],
  notices: noticeMessages(token)
})

/** The queue of waiting workers and the hand-off of the lock (docs/protocol.md#the-queue-hand-off). */
const queuePart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    acquireQueued: (token, lockId, slices, options) =>
      step(Operations.acquireQueued, {
        token,
        lockId,
        slices,
        instanceId: options.instanceId,
        claim: options.claim,
        notices: noticeMessages(token)
      }),
    releaseQueued: (token, lockId, options) => step(Operations.releaseQueued, releaseArgs(token, lockId, options)),
    commitAndReleaseQueued: (token, lockId, entries, options) =>
      Effect.flatMap(
        step(Operations.commitAndReleaseQueued, {
          ...releaseArgs(token, lockId, options),
          entries,
          claim: options.claim
        }),
        (outcome) => guarded(token, lockId, outcome)
      ),
    leaveQueue: (token, instanceId, lockId) =>
      step(Operations.leaveQueue, { token, instanceId, lockId, notices: noticeMessages(token) }),
    queueLength: (token, instanceId) => step(Operations.queueLength, { token, instanceId }),
    queue: (token) => step(Operations.queue, { token }),
    notices: (token, instanceId) =>
      checked(tokenError(token) ?? instanceIdError(instanceId), () =>
        Effect.map(driver.notices(token, instanceId), (messages) =>
          // The channel may carry other tokens' notices (one channel per worker on a single server).
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodeNotice(token, message)))
          )
        )
      ),
    noticeChannel: (token, instanceId) => driver.noticeChannel(token, instanceId),
    channelNotices: (token, instanceId) =>
      checked(tokenError(token) ?? instanceIdError(instanceId), () =>
        Effect.map(driver.notices(token, instanceId), (messages) =>
          // what is not a notice (published by someone else) is ignored
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodeTokenNotice(message)))
          )
        )
      )
  } satisfies Partial<Store.Service>
}

/** Signals on a token's channel, and the connection status. */
const signalPart = (driver: Driver) =>
  ({
    publish: (token, signal: Signal) =>
      checked(tokenAndInstanceError(token, signalInstance(signal)), () => driver.publish(token, encodeSignal(signal))),
    subscribe: (token) =>
      checked(tokenError(token), () =>
        Effect.map(driver.subscribe(token), (messages) =>
          // A message that is not a signal (published by someone else) is ignored.
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodeSignal(message)))
          )
        )
      ),
    status: driver.status,
    statusChanges: driver.statusChanges
  }) satisfies Partial<Store.Service>

/** What is wrong with the instance ids a presence message names (its token too, for a question). */
const presenceMessageError = (instanceId: string, message: PresenceMessage) =>
  message._tag === "Ask"
    ? (instanceIdsError(instanceId, message.from) ?? tokenError(message.token))
    : instanceIdError(instanceId)

/** Presence: the entry with its TTL, and the worker's channel of questions and answers. */
const presencePart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    refreshPresence: (instanceId, ttlMs) => step(Operations.refreshPresence, { instanceId, ttlMs: wholeMs(ttlMs) }),
    isPresent: (instanceId) => checked(instanceIdError(instanceId), () => driver.isPresent(instanceId)),
    removePresence: (instanceId) => checked(instanceIdError(instanceId), () => driver.removePresence(instanceId)),
    sendPresence: (instanceId, message) =>
      checked(presenceMessageError(instanceId, message), () =>
        driver.presencePublish(instanceId, encodePresenceMessage(message))
      ),
    presenceMessages: (instanceId) =>
      checked(instanceIdError(instanceId), () =>
        Effect.map(driver.presenceMessages(instanceId), (messages) =>
          Stream.filterMap(
            messages,
            Filter.fromPredicateOption((message) => Option.fromNullishOr(decodePresenceMessage(message)))
          )
        )
      )
  } satisfies Partial<Store.Service>
}

/**
 * The whole modification in one step, where the backend runs it: the slices checked, and
 * what `decide` writes refused (a defect, nothing written) unless it is among them.
 */
const stepPart = (driver: Driver): Store.Stepping => {
  const step = driver.modifyInStep
  if (step === undefined) return {}
  return {
    modifyInStep: (token, slices, decide, options) =>
      checked(tokenError(token) ?? sliceNamesError(slices), () => {
        const when = options?.when
        return step(
          token,
          slices,
          (values, fence) => {
            const entries = decide(values, fence)
            for (const [name] of entries) {
              if (!slices.includes(name)) throw new Error(`modifyInStep: slice ${name} was not read by the step`)
            }
            return entries
          },
          {
            when:
              when === undefined
                ? undefined
                : () => {
                    const asked = when()
                    const holder = asked?.holder
                    const invalid =
                      holder === undefined ? undefined : (lockIdError(holder.lockId) ?? claimError(holder.claim))
                    if (invalid !== undefined) throw new Error(`modifyInStep: ${invalid.message}`)
                    return asked
                  },
            written: options?.written,
            notices: noticeMessages(token)
          }
        )
      })
  }
}

/**
 * The `Store` service over `driver`.
 *
 * @internal
 */
export const make = (driver: Driver): Store.Service => ({
  kind: driver.kind,
  ...stepPart(driver),
  ...lockPart(driver),
  ...queuePart(driver),
  ...signalPart(driver),
  ...socketPart(driver),
  ...presencePart(driver),
  ...mailboxPart(driver),
  tokenKeys: (token) => checked(tokenError(token), () => driver.tokenKeys(token))
})
