/**
 * The registry behind `Signals`: one store subscription per notice channel of this worker,
 * shared by the tokens it carries (every token on a single server and on the embedded
 * store, one on a Redis Cluster), and one entry per token holding its listeners, plain
 * callbacks. A notice is decoded once and handed to its own token's listeners. An entry
 * without listeners goes at the second sweep that finds it so (`sweep`, run by `Signals`
 * every `lingerMs`), and a channel with its last token.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import * as Stream from "effect/Stream"
import type { Store } from "../../Store.js"
import type { StoreUnavailable } from "../../StoreError.js"
import type { Notice } from "../storeModel.js"
import { validateToken } from "../validate.js"

/** What a listener receives (`Signals.SignalEvent`). @internal */
export type SignalEvent = Notice | { readonly _tag: "Resubscribed" }

/**
 * One store subscription: a notice channel of this worker, shared by every token it carries
 * (all of them on a single server and on the embedded store, one on a Redis Cluster), so a
 * notice is decoded once and handed to its token's listeners alone.
 */
export interface Channel {
  readonly name: string
  /** The tokens it carries that have an entry here. */
  readonly tokens: Map<string, Entry>
  readonly lock: Semaphore.Semaphore
  /** Set once its last token was swept away: nothing restores it any more. */
  closed: boolean
  /** The scope of the latest store subscription and its pump. */
  scope: Scope.Closeable | undefined
  /** Whether that subscription still delivers. */
  live: boolean
  /** Whether a subscription was ever confirmed: its replacement announces `Resubscribed`. */
  confirmed: boolean
  /** Counts the subscriptions confirmed: a mark taken under one is no good under the next. */
  incarnation: number
  /** Counts the notices received. */
  seq: number
  /** The `seq` of each token's last notice, since the last sweep (`sweptAt`). */
  lastNotice: Map<string, number>
  sweptAt: number
}

/**
 * Where a channel stood when a caller was about to send a step that may make the store
 * notify it (`mark`): with it, `missedSince` tells whether a notice about the token
 * arrived before the caller listened.
 */
export interface Mark {
  readonly channel: Channel
  readonly incarnation: number
  readonly seq: number
}

type Listener = (event: SignalEvent) => void

export interface Entry {
  readonly token: string
  readonly channel: Channel
  /**
   * Its listeners: one alone (a token's session, as a rule) without a set, which would cost
   * a held lease more than the rest of its entry.
   */
  listeners: Listener | Set<Listener> | undefined
  /** Set by a sweep that found it without listeners; the next such sweep removes it. */
  idle: boolean
}

const listenerCount = (entry: Entry) =>
  entry.listeners === undefined ? 0 : typeof entry.listeners === "function" ? 1 : entry.listeners.size

const addListener = (entry: Entry, listener: Listener) => {
  const listeners = entry.listeners
  if (listeners === undefined) entry.listeners = listener
  else if (typeof listeners === "function") entry.listeners = new Set([listeners, listener])
  else listeners.add(listener)
}

const removeListener = (entry: Entry, listener: Listener) => {
  const listeners = entry.listeners
  if (listeners === listener) entry.listeners = undefined
  else if (listeners !== undefined && typeof listeners !== "function") listeners.delete(listener)
}

/**
 * The function that removes `listener`, made here rather than bound to a name where it is
 * used: a build that keeps function names (tsx, esbuild's `keepNames`) defines `name` on a
 * named one, which turns every held lease's copy into a dictionary of properties.
 */
const unlistener = (entry: Entry, listener: Listener) => () => removeListener(entry, listener)

const tellOne = (listener: Listener, event: SignalEvent) => {
  // A listener that throws must not stop the channel's other tokens' notices.
  try {
    listener(event)
  } catch {
    // its own fault, its own loss
  }
}

const tell = (entry: Entry | undefined, event: SignalEvent) => {
  const listeners = entry?.listeners
  if (listeners === undefined) return
  if (typeof listeners === "function") tellOne(listeners, event)
  else for (const listener of listeners) tellOne(listener, event)
}

const closeScope = (channel: Channel) =>
  Effect.suspend(() => {
    const scope = channel.scope
    channel.scope = undefined
    channel.live = false
    return scope === undefined ? Effect.void : Scope.close(scope, Exit.void)
  })

/**
 * Subscribe the channel in the store unless it already is. Replacing a lost subscription
 * announces `Resubscribed` to every listener of its tokens.
 */
const subscribeChannel = (
  store: Store.Service,
  instanceId: string,
  lost: () => Deferred.Deferred<never, StoreUnavailable>,
  channel: Channel
) =>
  channel.lock.withPermits(1)(
    Effect.suspend(() => {
      const first = channel.tokens.keys().next()
      if (channel.live || channel.closed || first.done === true) return Effect.void
      // any token of the channel names it
      const token = first.value
      return Effect.uninterruptibleMask((restoreInterrupt) =>
        Effect.gen(function* () {
          // The pump of a lost subscription has ended; release what is left of it.
          yield* closeScope(channel)
          const scope = yield* Scope.make()
          const stream = yield* restoreInterrupt(store.channelNotices(token, instanceId)).pipe(
            Scope.provide(scope),
            Effect.onError(() => Scope.close(scope, Exit.void))
          )
          // The pump cannot close its own scope (closing waits for the pump): it marks the
          // channel lost and wakes the loop, which closes the scope when it resubscribes.
          const markLost = (error: StoreUnavailable) =>
            Effect.suspend(() => {
              if (channel.scope === scope) channel.live = false
              return Deferred.fail(lost(), error)
            })
          channel.scope = scope
          yield* stream.pipe(
            Stream.runForEach((received) =>
              Effect.sync(() => {
                channel.seq++
                channel.lastNotice.set(received.token, channel.seq)
                tell(channel.tokens.get(received.token), received.notice)
              })
            ),
            Effect.catch(markLost),
            Effect.interruptible,
            Effect.forkIn(scope)
          )
          channel.live = true
          channel.incarnation++
          if (channel.confirmed) {
            for (const entry of channel.tokens.values()) tell(entry, { _tag: "Resubscribed" })
          }
          channel.confirmed = true
        })
      )
    })
  )

/** What the registry's steps work with: the store, and the channels and entries in force. */
interface Registry {
  readonly store: Store.Service
  readonly instanceId: string
  /** The deferred a pump fails when its subscription is lost. */
  readonly lost: () => Deferred.Deferred<never, StoreUnavailable>
  readonly channels: Map<string, Channel>
  readonly entries: Map<string, Entry>
}

/** A channel of no token yet, not subscribed. */
const newChannel = (name: string): Channel => ({
  name,
  tokens: new Map(),
  lock: Semaphore.makeUnsafe(1),
  closed: false,
  scope: undefined,
  live: false,
  confirmed: false,
  incarnation: 0,
  seq: 0,
  lastNotice: new Map(),
  sweptAt: 0
})

/**
 * One entry per token with local listeners: made by the first, swept away once it has had
 * none for a whole sweep period; its channel goes with the last of its tokens.
 */
const entryOf = (r: Registry, token: string): Entry => {
  const existing = r.entries.get(token)
  if (existing !== undefined) return existing
  const name = r.store.noticeChannel(token, r.instanceId)
  let channel = r.channels.get(name)
  if (channel === undefined) {
    channel = newChannel(name)
    r.channels.set(name, channel)
  }
  const entry: Entry = { token, channel, listeners: undefined, idle: false }
  channel.tokens.set(token, entry)
  r.entries.set(token, entry)
  return entry
}

const ensureLive = (r: Registry, channel: Channel) => subscribeChannel(r.store, r.instanceId, r.lost, channel)

/** Close channels for good: nothing restores them, and their subscriptions end. */
const closeChannels = (channels: ReadonlyArray<Channel>) =>
  Effect.forEach(channels, (channel) => channel.lock.withPermits(1)(closeScope(channel)), { discard: true })

/**
 * Start a new sweep period, and remove the entries found without listeners by the last
 * sweep too, with the channels left without tokens.
 */
const sweep = (r: Registry) =>
  Effect.suspend(() => {
    for (const channel of r.channels.values()) {
      channel.lastNotice.clear()
      channel.sweptAt = channel.seq
    }
    const gone: Array<Channel> = []
    for (const entry of r.entries.values()) {
      if (listenerCount(entry) > 0) entry.idle = false
      else if (!entry.idle) entry.idle = true
      else {
        // Gone from the maps before anything yields: a listener from now on makes a new entry.
        r.entries.delete(entry.token)
        entry.channel.tokens.delete(entry.token)
        if (entry.channel.tokens.size === 0) {
          entry.channel.closed = true
          r.channels.delete(entry.channel.name)
          gone.push(entry.channel)
        }
      }
    }
    return closeChannels(gone)
  })

/** Everything closed, for the layer's end: the restore loop finds nothing left. */
const closeAll = (r: Registry) =>
  Effect.suspend(() => {
    const all = [...r.channels.values()]
    r.channels.clear()
    r.entries.clear()
    for (const channel of all) channel.closed = true
    return closeChannels(all)
  })

/** Add a listener to a token; its channel is subscribed before it returns the listener's removal. */
const listen = (r: Registry, token: string, listener: (event: SignalEvent) => void) =>
  Effect.flatMap(validateToken(token), () =>
    Effect.suspend(() => {
      const entry = entryOf(r, token)
      addListener(entry, listener)
      entry.idle = false
      const unlisten = unlistener(entry, listener)
      // Listening before the subscription is confirmed: nothing published after it is missed.
      if (entry.channel.live) return Effect.succeed(unlisten)
      return ensureLive(r, entry.channel).pipe(
        Effect.onError(() => Effect.sync(unlisten)),
        Effect.as(unlisten)
      )
    })
  )

/** Where the token's channel stands, if its subscription delivers now. */
const mark = (r: Registry, token: string): Mark | undefined => {
  const channel = r.channels.get(r.store.noticeChannel(token, r.instanceId))
  return channel === undefined || !channel.live
    ? undefined
    : { channel, incarnation: channel.incarnation, seq: channel.seq }
}

/**
 * Whether a notice about `token` may have arrived since `mark` without reaching a
 * listener registered since: `false` only when the channel delivered all along (same
 * subscription, still live) and no notice about the token arrived since the mark.
 */
const missedSince = (token: string, at: Mark | undefined): boolean => {
  if (at === undefined) return true
  const { channel } = at
  if (!channel.live || channel.incarnation !== at.incarnation || channel.sweptAt > at.seq) return true
  return (channel.lastNotice.get(token) ?? 0) > at.seq
}

/**
 * The registry of a worker's notice channels. `lost()` is the deferred a pump fails when its
 * subscription is lost (the `signals` loop renews it at each attempt).
 *
 * @internal
 */
export const make = (
  store: Store.Service,
  instanceId: string,
  lost: () => Deferred.Deferred<never, StoreUnavailable>
) => {
  const r: Registry = { store, instanceId, lost, channels: new Map(), entries: new Map() }
  return {
    listen: (token: string, listener: (event: SignalEvent) => void) => listen(r, token, listener),
    sweep: sweep(r),
    mark: (token: string) => mark(r, token),
    missedSince,
    closeAll: closeAll(r),
    /** Subscribe every channel whose subscription was lost (the `signals` loop's attempt). */
    restoreAll: Effect.suspend(() =>
      Effect.forEach([...r.channels.values()], (channel) => ensureLive(r, channel), { discard: true })
    ),
    /** Tokens with at least one listener. */
    tokens: Effect.sync(() => [...r.entries.values()].filter((entry) => listenerCount(entry) > 0).map((e) => e.token)),
    /** Tokens whose channel's subscription delivers. */
    subscribed: Effect.sync(() => [...r.entries.values()].filter((entry) => entry.channel.live).map((e) => e.token))
  }
}
