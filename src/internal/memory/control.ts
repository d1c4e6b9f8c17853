/**
 * The control of the embedded store, which only tests use (`MemoryStoreControl`): take the
 * store down and up, drop its subscriber "connection", plant or read raw values and TTLs, count its
 * keys and operations, watch its flushes, refuse socket events, lose or delay notices, lose
 * replies.
 * `MemoryStore` gives it its public type (`MemoryStoreControl.Service`). Its own operations
 * work whatever the availability: a test can plant data during an outage.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { FlushReport } from "./disk.js"
import type { State } from "./driver.js"

const now = Effect.clockWith((clock) => Effect.sync(() => clock.currentTimeMillisUnsafe()))

/** @internal */
export const make = (state: State, flushReports: PubSub.PubSub<FlushReport>) => {
  const { ks } = state
  return {
    operations: Effect.sync(() => state.operations),

    setAvailable: (next: boolean) =>
      Effect.uninterruptible(
        Effect.suspend(() => {
          if (next === state.available) return Effect.void
          state.available = next
          if (next) return SubscriptionRef.update(state.status, (s) => ({ ready: true, epoch: s.epoch + 1 }))
          return Effect.andThen(
            state.dropConnection("the memory store is set unavailable", true),
            SubscriptionRef.update(state.status, (s) => ({ ready: false, epoch: s.epoch }))
          )
        })
      ),

    dropSubscriptions: Effect.uninterruptible(
      Effect.suspend(() =>
        Effect.andThen(
          state.dropConnection("the subscriber connection was dropped", false),
          // While the whole store is down the subscriber cannot reconnect: status stays not ready.
          state.available
            ? Effect.andThen(
                SubscriptionRef.update(state.status, (s) => ({ ready: false, epoch: s.epoch })),
                SubscriptionRef.update(state.status, (s) => ({ ready: true, epoch: s.epoch + 1 }))
              )
            : Effect.void
        )
      )
    ),

    setRaw: (key: string, value: string, ttlMs?: number) =>
      Effect.map(now, (at) => {
        if (ttlMs !== undefined && ttlMs <= 0) {
          if (ks.get(key, at) !== undefined && ks.delete(key)) state.keyEvent(key, "del")
        } else {
          ks.setString(key, value, ttlMs === undefined ? undefined : at + ttlMs)
          state.keyEvent(key, "set")
        }
      }),

    expireRaw: (key: string, ttlMs: number) =>
      Effect.map(now, (at) => {
        const entry = ks.get(key, at)
        if (entry === undefined) return false
        ks.expire(key, entry, at + ttlMs, at)
        return true
      }),

    getRaw: (key: string) =>
      Effect.map(now, (at) => {
        const entry = ks.get(key, at)
        return entry?._tag === "string" ? Option.some(entry.value) : Option.none()
      }),

    keyCount: Effect.map(now, (at) => ks.sweep(at)),

    flushReports: PubSub.subscribe(flushReports),

    refuseSocketEvents: (refused: boolean) =>
      Effect.sync(() => {
        state.socketEventsRefused = refused
      }),

    loseNotices: (count: number) =>
      Effect.sync(() => {
        state.noticesToLose = count
      }),

    holdNotices: (count: number) =>
      Effect.sync(() => {
        state.noticesToHold = count
      }),

    deliverHeldNotices: Effect.sync(() => {
      for (const deliver of state.heldNotices.splice(0)) deliver()
    }),

    loseReplies: (operation: string, count: number) =>
      Effect.sync(() => {
        if (count > 0) state.repliesToLose.set(operation, count)
        else state.repliesToLose.delete(operation)
      })
  }
}
