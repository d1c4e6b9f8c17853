/**
 * This worker's presence, and the question a linking worker asks the owner of a record:
 * is that connection still linked there? The supervised `presence` loop subscribes to the
 * worker's presence channel, then refreshes its presence entry every third of the presence
 * expiration and answers every question at once from the local socket table. A refresh
 * that finds the entry gone (it lapsed: the worker was paused, partitioned, or the store
 * lost it) or comes a whole expiration after the last one checks every record of ours:
 * one another worker took over meanwhile is adopted, and its socket reported as lost.
 *
 * The loop is *steady* from its first refresh after the subscription on, until its attempt
 * fails. A worker decides that another is dead only while it has been steady for a whole
 * presence expiration and its last refresh is recent: a store outage, which also lets every
 * presence expire, is not taken for the death of the others.
 *
 * @internal
 */
import { randomUUID } from "node:crypto"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Latch from "effect/Latch"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { PresenceMessage, SocketRecord } from "../../Store.js"
import type { StoreError } from "../../StoreError.js"
import { isLinking, isOurs, type LinkTable } from "./table.js"

/**
 * The name of the supervised loop that keeps this worker's presence and answers questions.
 *
 * @internal
 */
export const loopName = "presence"

/**
 * The state of the `presence` loop, built once by `TokenManager.make`.
 *
 * @internal
 */
export interface Presence {
  readonly table: LinkTable
  readonly presenceMs: number
  readonly refreshEveryMs: number
  /** Open once the loop's first attempt has refreshed, or failed. */
  readonly started: Latch.Latch
  /** When the current attempt became steady (subscribed and refreshed); `undefined` while it is not. */
  steadySince: number | undefined
  /** When the last refresh that succeeded was sent. */
  lastRefresh: number | undefined
  /** Questions of ours waiting for their answer, by id. */
  readonly asks: Map<string, Deferred.Deferred<boolean>>
  /** Check every record of ours (adopting those another worker holds): after a lapse. */
  readonly check: Effect.Effect<void, StoreError>
}

/** Whether `connectionId` holds `token` here, or is being linked to it right now. */
export const linkedHere = (table: LinkTable, token: string, connectionId: string): boolean => {
  const entry = table.entries.get(token)
  return (
    (entry !== undefined && entry.connectionId === connectionId && isOurs(table, entry)) ||
    isLinking(table, token, connectionId)
  )
}

const handle = (presence: Presence, message: PresenceMessage) =>
  Effect.suspend(() => {
    const { table } = presence
    if (message._tag === "Answer") {
      const waiting = presence.asks.get(message.askId)
      return waiting === undefined ? Effect.void : Deferred.succeed(waiting, message.linked)
    }
    const linked = linkedHere(table, message.token, message.connectionId)
    return table.store.sendPresence(message.from, { _tag: "Answer", askId: message.askId, linked }).pipe(
      Effect.catch((error) => Effect.logDebug(`${loopName}: no answer sent to ${message.from}: ${error.message}`)),
      Effect.forkScoped,
      Effect.asVoid
    )
  })

/** One attempt of the `presence` loop, run by the supervisor. */
export const watch = (presence: Presence, recovered: Effect.Effect<void>) => {
  const { table, presenceMs, refreshEveryMs, started } = presence
  const { store, instanceId } = table
  return Effect.scoped(
    Effect.gen(function* () {
      const messages = yield* store.presenceMessages(instanceId)
      const refreshing = Effect.gen(function* () {
        while (true) {
          const now = yield* Clock.currentTimeMillis
          const late = presence.lastRefresh !== undefined && now - presence.lastRefresh >= presenceMs
          const was = yield* store.refreshPresence(instanceId, presenceMs)
          const first = presence.lastRefresh === undefined
          presence.lastRefresh = now
          if (!first && (late || !was)) {
            // Others may have found us absent, and taken tabs of ours over: steady again only
            // a whole expiration from now, and check every record first.
            presence.steadySince = undefined
            yield* Effect.logWarning(
              `${loopName}: this worker's presence lapsed (${late ? "refreshed late" : "entry gone"}); checking its records`
            )
            yield* presence.check
          }
          presence.steadySince ??= now
          yield* recovered
          yield* started.open
          yield* Effect.sleep(refreshEveryMs)
        }
      })
      return yield* Effect.raceFirst(
        refreshing,
        Stream.runForEach(messages, (message) => handle(presence, message))
      )
    })
  ).pipe(
    Effect.ensuring(
      Effect.andThen(
        Effect.sync(() => {
          presence.steadySince = undefined
        }),
        started.open
      )
    ),
    Effect.annotateLogs({ instanceId })
  )
}

/** Whether this worker may take for dead an owner that is absent or does not answer, `now`. */
const steady = (presence: Presence, now: number): boolean =>
  presence.steadySince !== undefined &&
  now - presence.steadySince >= presence.presenceMs &&
  presence.lastRefresh !== undefined &&
  now - presence.lastRefresh < presence.presenceMs

/**
 * Wait (at most a presence expiration and a refresh) until this worker is steady: the
 * `steadySince` it is steady with, or `None` when it did not become so in time.
 */
const awaitSteady = (presence: Presence) => {
  const pollMs = Math.max(1, Math.min(50, Math.floor(presence.refreshEveryMs / 4)))
  const deadlineMs = presence.presenceMs + presence.refreshEveryMs
  return Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    while (true) {
      const now = yield* Clock.currentTimeMillis
      if (steady(presence, now)) return Option.some(presence.steadySince!)
      if (now - start >= deadlineMs) return Option.none<number>()
      yield* Effect.sleep(pollMs)
    }
  })
}

/** Ask `owner` whether its connection still holds `token`: `None` when no answer came within the presence expiration. */
const ask = (presence: Presence, token: string, owner: SocketRecord) =>
  Effect.gen(function* () {
    const { table } = presence
    const askId = randomUUID()
    const answer = yield* Deferred.make<boolean>()
    // registered and removed as a resource: an interruption at any point leaves no entry behind
    return yield* Effect.acquireUseRelease(
      Effect.sync(() => presence.asks.set(askId, answer)),
      () =>
        table.store
          .sendPresence(owner.instanceId, {
            _tag: "Ask",
            askId,
            from: table.instanceId,
            token,
            connectionId: owner.connectionId
          })
          .pipe(Effect.andThen(Effect.timeoutOption(Deferred.await(answer), presence.presenceMs))),
      () => Effect.sync(() => presence.asks.delete(askId))
    )
  })

/**
 * What became of the owner of a record found where a link wanted to claim:
 * - `gone`: its connection holds the token no more (it said so, it is absent, or it did not
 *   answer within the presence expiration): the record may be taken over;
 * - `linked`: it is alive and its connection holds the token: the tab is a duplicate;
 * - `unsure`: this worker cannot tell (it has not been steady long enough, or it lost its
 *   own subscription while waiting): the tab is treated as a duplicate.
 *
 * @internal
 */
export type Verdict = "gone" | "linked" | "unsure"

/** Wait (at most a refresh period) until the loop is subscribed and has refreshed: `false` when it did not. */
const awaitListening = (presence: Presence) =>
  Effect.gen(function* () {
    const pollMs = Math.max(1, Math.min(50, Math.floor(presence.refreshEveryMs / 4)))
    const start = yield* Clock.currentTimeMillis
    while (presence.steadySince === undefined) {
      if ((yield* Clock.currentTimeMillis) - start >= presence.refreshEveryMs) return false
      yield* Effect.sleep(pollMs)
    }
    return true
  })

/**
 * A present owner is asked first, once this worker listens for answers: its "yes" makes a
 * duplicate and its "no" a take-over, at once. Only an owner that is absent or does not
 * answer needs this worker to have been steady for a whole presence expiration, and to
 * have stayed so while it waited for the answer.
 *
 * @internal
 */
export const judge = (presence: Presence, token: string, owner: SocketRecord) =>
  Effect.gen(function* () {
    const { table } = presence
    // A record of ours (another connection) that no socket of ours holds is a leftover.
    if (owner.instanceId === table.instanceId) {
      return linkedHere(table, token, owner.connectionId) ? "linked" : "gone"
    }
    // Twice at most: an owner found absent or silent before this worker was steady is looked
    // at again once it is (after an outage, the owner's presence may just be coming back).
    for (let look = 0; look < 2; look++) {
      if (!(yield* awaitListening(presence))) return "unsure"
      const before = presence.steadySince
      if (yield* table.store.isPresent(owner.instanceId)) {
        const answer = yield* ask(presence, token, owner)
        if (Option.isSome(answer)) return answer.value ? "linked" : "gone"
      }
      // Absent, or no answer: death only if this worker was steady all along.
      if (presence.steadySince === before && steady(presence, yield* Clock.currentTimeMillis)) return "gone"
      if (Option.isNone(yield* awaitSteady(presence))) return "unsure"
    }
    return "unsure"
  }).pipe(Effect.map((verdict): Verdict => verdict))

/** Delete this worker's presence entry on a graceful close (nothing when the store is down: it expires). */
export const remove = (presence: Presence) =>
  Effect.suspend(() =>
    presence.table.failing
      ? Effect.void
      : presence.table.store
          .removePresence(presence.table.instanceId)
          .pipe(Effect.catch((error) => Effect.logDebug(`${loopName}: presence not removed: ${error.message}`)))
  )
