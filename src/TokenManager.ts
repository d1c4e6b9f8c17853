/**
 * Which worker holds each client's socket (docs/tokens.md,
 * docs/design.md#socket-records-and-delivery).
 *
 * A token's socket record names the instance and the connection that hold the client's
 * socket. `link` claims it atomically; a second tab presenting a token that is already
 * linked elsewhere gets a fresh token. A record whose socket is gone (its worker died, or
 * closed it) is not a duplicate: `link` asks the owner, and takes the record over by
 * compare-and-set when the owner says so, does not answer within the presence expiration,
 * or is not present; the tab keeps its token. Records of live sockets are kept alive through
 * expiry, deletion and store outages, and a record another instance won meanwhile is
 * adopted, never deleted by our later disconnect.
 *
 * One supervised loop (`sockets`) keeps the records: it turns on the store's socket
 * events (Redis keyspace notifications) and re-claims a record of a live socket as soon
 * as it is deleted or expires. Where the store refuses to turn them on (a managed Redis
 * without `CONFIG`), it refreshes every record's TTL at a quarter of `tokenExpiration`
 * instead. After every confirmed subscription and every reconnection of the store it
 * writes this worker's records back (SET NX) and reads them in the same round trip.
 * A second loop (`presence`) keeps this worker's presence and answers other workers'
 * questions about its records.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FiberMap from "effect/FiberMap"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Semaphore from "effect/Semaphore"
import * as Stream from "effect/Stream"
import { InstanceId } from "./InstanceId.js"
import * as Link from "./internal/tokens/link.js"
import * as Presence from "./internal/tokens/presence.js"
import * as Records from "./internal/tokens/records.js"
import type { LostSocket } from "./internal/tokens/table.js"
import * as SocketTable from "./internal/tokens/table.js"
import * as Validate from "./internal/validate.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import { type SocketRecord, Store } from "./Store.js"
import type { InvalidToken, RecordNotStored, StoreError } from "./StoreError.js"
import { backoff, Supervisor, untilRecovered } from "./Supervisor.js"

/**
 * The outcome of `link`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Linked {
  /** The token the socket is linked under: the one asked for, or a fresh one for a duplicate tab. */
  readonly token: string
  /** `true` when `token` is a fresh token minted because the one asked for was linked elsewhere. */
  readonly fresh: boolean
  /**
   * `true` when the token's record named a socket that was gone (its worker dead or no
   * longer holding it) and was taken over: the tab kept its token. Send it its current
   * state: updates sent to the old worker meanwhile are not passed on.
   */
  readonly takenOver: boolean
}

export type {
  /**
   * A socket of this worker whose token another worker's socket holds now (it took the record
   * over while this worker seemed gone, or won it while ours was not stored). Close it: its
   * tab reconnects, and is linked where its token is held.
   *
   * @since 0.2.0
   * @category models
   */
  LostSocket
} from "./internal/tokens/table.js"

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace TokenManager {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /** This worker's instance id. */
    readonly instanceId: string
    /**
     * Link a client's socket. The same token and connection again: nothing, no I/O.
     * Otherwise claim the token's record atomically. When another socket's record is there,
     * ask its worker whether that socket still holds the token: if it does (or this worker
     * cannot tell yet), mint a fresh token, claim that, and return it; if it is gone (its
     * worker said so, is not present, or did not answer within the presence expiration),
     * take the record over as read and return `takenOver`. A store failure links locally
     * and fails with `RecordNotStored`. An interrupted link leaves no record behind.
     */
    readonly link: (token: string, connectionId: string) => Effect.Effect<Linked, InvalidToken | RecordNotStored>
    /**
     * Unlink a socket: the local entry first, then the record, only if it is still ours.
     * A store failure is logged; the record then expires by itself.
     */
    readonly disconnect: (token: string, connectionId: string) => Effect.Effect<void, InvalidToken>
    /**
     * The connection of this worker linked to `token`, from the local map only (no I/O).
     */
    readonly local: (token: string) => Effect.Effect<Option.Option<string>>
    /**
     * Who holds the token's socket: this worker's local map first, then the store (on a
     * miss, or always with `refresh`). `None` when no record exists.
     */
    readonly owner: (
      token: string,
      options?: { readonly refresh?: boolean }
    ) => Effect.Effect<Option.Option<SocketRecord>, InvalidToken | StoreError>
    /** Every token with a socket record, of every instance (a scan). */
    readonly tokens: Stream.Stream<readonly [token: string, record: SocketRecord], StoreError>
    /**
     * Every socket of this worker that loses its token to another worker's socket, from
     * the subscription on: the app closes it, and the tab reconnects where its token is.
     */
    readonly lost: Stream.Stream<LostSocket>
    /**
     * `true` when a socket of this worker lost `token` to another worker (see `lost`) and
     * no socket linked it here since: updates for it still in this worker's mailbox are
     * dropped, as its new owner sent the tab its state.
     */
    readonly isLost: (token: string) => Effect.Effect<boolean>
    /** Disconnect every local socket (on shutdown). */
    readonly disconnectAll: Effect.Effect<void>
    /**
     * How records are kept alive: `events` (the store reports deletions and expiries),
     * `refresh` (the store refused to; TTLs are refreshed periodically). `None` until the
     * `sockets` loop first subscribed.
     */
    readonly keepAlive: Effect.Effect<Option.Option<KeepAlive>>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class TokenManager extends Context.Service<TokenManager, TokenManager.Service>()("leasehold/TokenManager") {}

/**
 * How a worker keeps the records of its live sockets: re-claiming on the store's events,
 * or refreshing every record's TTL where the store will not report changes.
 *
 * @since 0.1.0
 * @category models
 */
export type KeepAlive = "events" | "refresh"

/**
 * What is wrong with `token` as a token (1–128 characters of `[A-Za-z0-9_.:-]`), in a few
 * words, or `undefined` when nothing is. Every operation refuses such a token with
 * `InvalidToken` before any I/O; an app checks what a client sent with this first, to
 * answer it plainly (a 400, a fresh token).
 *
 * @since 0.1.0
 * @category validation
 */
export const tokenProblem: (token: unknown) => string | undefined = Validate.tokenProblem

/**
 * Whether `token` is a valid token: `tokenProblem(token)` is `undefined`.
 *
 * @since 0.1.0
 * @category validation
 */
export const isValidToken: (token: unknown) => token is string = Validate.isValidToken

/**
 * The name of the supervised loop that keeps socket records.
 *
 * @since 0.1.0
 * @category constants
 */
export const loopName = Records.loopName

/**
 * The name of the supervised loop that keeps this worker's presence and answers questions
 * about its records.
 *
 * @since 0.1.0
 * @category constants
 */
export const presenceLoopName = Presence.loopName

/**
 * Records of a gone socket taken over by a link of its token, which kept its token.
 *
 * @since 0.1.0
 * @category metrics
 */
export const takeovers = Link.takeovers

/**
 * Sockets linked with a record of their own (fresh tokens included).
 *
 * @since 0.1.0
 * @category metrics
 */
export const links = Link.links

/**
 * Links of a token already held by another socket, answered with a fresh token.
 *
 * @since 0.1.0
 * @category metrics
 */
export const duplicates = Link.duplicates

/**
 * Records of live sockets written back (after a deletion, an expiry, or a store restart).
 *
 * @since 0.1.0
 * @category metrics
 */
export const recordsRestored = Records.recordsRestored

/**
 * Tokens of local sockets found held by another socket, whose record was adopted.
 *
 * @since 0.1.0
 * @category metrics
 */
export const recordsAdopted = SocketTable.recordsAdopted

/**
 * Build the token manager of one worker and start its `sockets` loop in the
 * supervisor's scope. It returns once the loop's first attempt is over (subscribed, or
 * failed because the store is down: links then fail with `RecordNotStored` and are
 * stored when the store returns). Its finalizer stops the loop, then disconnects every
 * local socket.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = Effect.gen(function* () {
  const store = yield* Store
  const supervisor = yield* Supervisor
  const instanceId = yield* InstanceId
  const settings = yield* LeaseholdConfig
  const refreshEvery = Duration.millis(Math.max(1, Math.floor(Duration.toMillis(settings.tokenExpiration) / 4)))

  // The local socket table (internal/tokens/table.ts), shared by linking and unlinking
  // (internal/tokens/link.ts) and by the `sockets` loop (internal/tokens/records.ts).
  const table: SocketTable.LinkTable = {
    store,
    instanceId,
    entries: new Map(),
    maintenance: yield* Semaphore.make(1),
    failing: false,
    linking: new Set(),
    lostTokens: new Set(),
    lost: yield* PubSub.unbounded<LostSocket>(),
    unstored: new WeakSet()
  }
  const disconnectAll = Link.disconnectAll(table)

  // --- the sockets loop ---------------------------------------------------------------
  const keeper: Records.RecordKeeper = {
    table,
    refreshEvery,
    started: yield* Latch.make(false),
    mode: Option.none(),
    refusalLogged: false,
    // the presence loop's state, below: asked only about links made after `make`
    judge: (token, owner) => Presence.judge(presence, token, owner),
    settles: yield* FiberMap.make<string>(),
    // at most a presence expiration apart: meanwhile the token's updates go to the record's owner
    retry: backoff({
      initial: settings.retryDelayInitial,
      max: Duration.min(settings.retryDelayMax, settings.presenceExpiration),
      jitter: settings.retryJitter
    })
  }

  const loop = yield* supervisor.run(loopName, (recovered) => Records.watch(keeper, recovered), untilRecovered())
  yield* keeper.started.await

  // --- the presence loop --------------------------------------------------------------
  const presenceMs = Math.max(1, Math.ceil(Duration.toMillis(settings.presenceExpiration)))
  const presence: Presence.Presence = {
    table,
    presenceMs,
    refreshEveryMs: Math.max(1, Math.floor(presenceMs / 3)),
    started: yield* Latch.make(false),
    steadySince: undefined,
    lastRefresh: undefined,
    asks: new Map(),
    check: Records.restore(keeper)
  }
  const presenceLoop = yield* supervisor.run(
    Presence.loopName,
    (recovered) => Presence.watch(presence, recovered),
    untilRecovered()
  )
  yield* presence.started.await
  // Interrupt the loops first: nothing may write a record back once the socket is gone.
  // Presence goes last, once the records are: a closing worker's tabs are not taken over
  // while it still holds them.
  yield* Effect.addFinalizer(() =>
    Effect.andThen(
      Effect.andThen(
        Effect.andThen(Fiber.interrupt(loop), Fiber.interrupt(presenceLoop)),
        FiberMap.clear(keeper.settles)
      ),
      Effect.andThen(disconnectAll, Presence.remove(presence))
    )
  )

  return TokenManager.of({
    instanceId,
    link: (token, connectionId) => Link.link(presence, token, connectionId),
    disconnect: (token, connectionId) => Link.disconnect(table, token, connectionId),
    local: (token) =>
      Effect.sync(() => {
        const entry = table.entries.get(token)
        return entry !== undefined && SocketTable.isOurs(table, entry) ? Option.some(entry.connectionId) : Option.none()
      }),
    owner: (token, options) => SocketTable.owner(table, token, options),
    tokens: store.scanSockets,
    lost: Stream.fromPubSub(table.lost),
    isLost: (token) => Effect.sync(() => table.lostTokens.has(token)),
    disconnectAll,
    keepAlive: Effect.sync(() => keeper.mode)
  })
})

/**
 * The token manager of one worker. Closing the layer disconnects every local socket:
 * this worker's records are deleted, another's never.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<TokenManager, never, Store | Supervisor | InstanceId | LeaseholdConfig> = Layer.effect(
  TokenManager,
  make
)
