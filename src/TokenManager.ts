/**
 * Which worker holds each client's socket (DESIGN §8).
 *
 * A token's socket record names the instance and the connection that hold the client's
 * socket. `link` claims it atomically; a second tab presenting a token that is already
 * linked elsewhere gets a fresh token. Records of live sockets are kept alive through
 * expiry, deletion and store outages, and a record another instance won meanwhile is
 * adopted, never deleted by our later disconnect.
 *
 * One supervised loop (`sockets`) keeps the records: it turns on the store's socket
 * events (Redis keyspace notifications) and re-claims a record of a live socket as soon
 * as it is deleted or expires. Where the store refuses to turn them on (a managed Redis
 * without `CONFIG`), it refreshes every record's TTL at a quarter of `tokenExpiration`
 * instead. After every confirmed subscription and every reconnection of the store it
 * writes this worker's records back (SET NX) and reads them in the same round trip.
 *
 * @since 0.1.0
 */
import { randomUUID } from "node:crypto"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { InstanceId } from "./InstanceId.js"
import { validateToken } from "./internal/validate.js"
import { LeaseholdConfig } from "./LeaseholdConfig.js"
import { type ClaimResult, type SocketRecord, Store } from "./Store.js"
import type { CorruptValue, InvalidToken, StoreError, StoreRefused } from "./StoreError.js"
import { Supervisor, untilRecovered } from "./Supervisor.js"

/**
 * `link` made the local link but could not write the socket record: the store failed.
 * The record is written when the store returns (by the restore after resubscription or
 * the periodic refresh), so the socket is reachable again without another `link`.
 *
 * @since 0.1.0
 * @category errors
 */
export class RecordNotStored extends Data.TaggedError("RecordNotStored")<{
  /**
   * The token linked locally: the one asked for, or (with `fresh`) the token minted for a
   * duplicate tab, whose claim is the one that failed.
   */
  readonly token: string
  readonly connectionId: string
  readonly cause: StoreError
  /** Present when `token` is a fresh token: the one asked for was linked elsewhere. */
  readonly fresh?: true
}> {
  override get message(): string {
    return `socket record of ${this.fresh === true ? "fresh token" : "token"} ${this.token} not stored (linked locally): ${this.cause.message}`
  }
}

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
}

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
     * Otherwise claim the token's record atomically; when any other record exists (another
     * instance's, or this instance's with another connection), mint a fresh token, claim
     * that, and return it. A store failure links locally and fails with `RecordNotStored`.
     * An interrupted link leaves no record behind.
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
export class TokenManager extends Context.Tag("leasehold/TokenManager")<TokenManager, TokenManager.Service>() {}

/**
 * How a worker keeps the records of its live sockets: re-claiming on the store's events,
 * or refreshing every record's TTL where the store will not report changes.
 *
 * @since 0.1.0
 * @category models
 */
export type KeepAlive = "events" | "refresh"

/**
 * The name of the supervised loop that keeps socket records.
 *
 * @since 0.1.0
 * @category constants
 */
export const loopName = "sockets"

/**
 * Sockets linked with a record of their own (fresh tokens included).
 *
 * @since 0.1.0
 * @category metrics
 */
export const links = Metric.counter("leasehold_socket_links_total", {
  description: "sockets linked with a new socket record",
  incremental: true
})

/**
 * Links of a token already held by another socket, answered with a fresh token.
 *
 * @since 0.1.0
 * @category metrics
 */
export const duplicates = Metric.counter("leasehold_socket_duplicates_total", {
  description: "links of a token already linked elsewhere, given a fresh token",
  incremental: true
})

/**
 * Records of live sockets written back (after a deletion, an expiry, or a store restart).
 *
 * @since 0.1.0
 * @category metrics
 */
export const recordsRestored = Metric.counter("leasehold_socket_records_restored_total", {
  description: "records of live sockets written back after they were deleted, expired or lost",
  incremental: true
})

/**
 * Tokens of local sockets found held by another socket, whose record was adopted.
 *
 * @since 0.1.0
 * @category metrics
 */
export const recordsAdopted = Metric.counter("leasehold_socket_records_adopted_total", {
  description: "tokens of local sockets found held by another socket, whose record was adopted",
  incremental: true
})

/** A socket of this worker: its connection and the record it stands for (ours, or adopted). */
interface Entry {
  readonly connectionId: string
  readonly record: SocketRecord
}

const sameRecord = (a: SocketRecord, b: SocketRecord): boolean =>
  a.instanceId === b.instanceId && a.connectionId === b.connectionId

/** Tries at a fresh token: a random UUID is never taken, a store that says otherwise is broken. */
const freshAttempts = 3

/** Records claimed again per round trip: bounds one pipeline, not the number of records. */
const restoreBatch = 1_000

/** How many record deletions or refreshes are in flight at once. */
const concurrentWrites = 16

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

  const entries = new Map<string, Entry>()
  /** Restores, refreshes and re-claims run one at a time: each reads the map, then applies what the store said. */
  const maintenance = yield* Effect.makeSemaphore(1)
  let mode: Option.Option<KeepAlive> = Option.none()
  let refusalLogged = false

  const isOurs = (entry: Entry): boolean =>
    entry.record.instanceId === instanceId && entry.record.connectionId === entry.connectionId

  // One warning per failure episode: a store that is down fails every write until it returns.
  let failing = false
  const storeFailed = (what: string, error: StoreError) =>
    Effect.suspend(() => {
      if (failing) return Effect.void
      failing = true
      return Effect.logWarning(
        `socket records: ${what} failed, kept locally and written when the store returns: ${error.message}`
      )
    })
  const storeWorked = Effect.suspend(() => {
    if (!failing) return Effect.void
    failing = false
    return Effect.logInfo("socket records: the store answers again")
  })

  /** Another socket holds the token now: keep our connection's entry, with that socket's record. */
  const adopt = (token: string, entry: Entry, record: SocketRecord) =>
    Effect.suspend(() => {
      // The socket disconnected (or linked again) since the record was read: nothing to adopt for it.
      if (entries.get(token) !== entry) return Effect.void
      entries.set(token, { connectionId: entry.connectionId, record })
      return Effect.zipRight(
        Metric.increment(recordsAdopted),
        Effect.logInfo(`socket records: token ${token} is held by ${record.instanceId} now; adopted its record`)
      )
    })

  /**
   * Apply the outcome of re-claiming `entry`'s record. Runs right after the claim, with no
   * yield before the map is checked: a socket that disconnected meanwhile is never
   * brought back, and a record written back for it is deleted again.
   */
  const applyClaim = (token: string, entry: Entry, result: Either.Either<ClaimResult, CorruptValue | StoreRefused>) =>
    Effect.suspend(() => {
      const current = entries.get(token)
      if (current !== entry) {
        const written = Either.isRight(result) && result.right._tag === "Claimed"
        if (!written || (current !== undefined && sameRecord(current.record, entry.record))) return Effect.void
        return store.deleteSocketIfOwner(token, entry.record).pipe(
          Effect.asVoid,
          Effect.catchTag("InvalidToken", () => Effect.void),
          Effect.catchAll((error) => storeFailed(`deleting the record of disconnected token ${token}`, error))
        )
      }
      if (Either.isLeft(result)) {
        return Effect.logWarning(`socket records: cannot restore token ${token}: ${result.left.message}`)
      }
      const claim = result.right
      if (claim._tag === "Claimed") return Metric.increment(recordsRestored)
      return sameRecord(claim.record, entry.record) ? Effect.void : adopt(token, entry, claim.record)
    })

  const ownEntries = () => [...entries].filter(([, entry]) => isOurs(entry))

  /** Claim records again (SET NX, read back in the same round trip) and apply each outcome. */
  const reclaim = (lost: ReadonlyArray<readonly [string, Entry]>) =>
    Effect.gen(function* () {
      for (let start = 0; start < lost.length; start += restoreBatch) {
        const batch = lost.slice(start, start + restoreBatch)
        const results = yield* store.claimSockets(batch.map(([token, entry]) => [token, entry.record] as const))
        for (let i = 0; i < batch.length; i++) yield* applyClaim(batch[i]![0], batch[i]![1], results[i]!)
      }
    })

  /** One maintenance pass over the map: alone, and its store failure logged once per episode. */
  const maintain = (what: string, pass: Effect.Effect<void, StoreError | InvalidToken>) =>
    maintenance.withPermits(1)(
      Effect.zipRight(pass, storeWorked).pipe(
        Effect.catchTag("InvalidToken", (error) => Effect.logError(`socket records: ${error.message}`)),
        Effect.catchAll((error) => storeFailed(what, error))
      )
    )

  /** Write every record of ours back with SET NX and read it in the same round trip. */
  const restore = maintain(
    "restoring records",
    Effect.suspend(() => reclaim(ownEntries()))
  )

  /** Refresh mode: reset the TTL of every record of ours; one missing or replaced is re-claimed. */
  const refresh = maintain(
    "refreshing records",
    Effect.gen(function* () {
      const ours = ownEntries()
      const refreshed = yield* Effect.forEach(ours, ([token, entry]) => store.refreshSocket(token, entry.record), {
        concurrency: concurrentWrites
      })
      yield* reclaim(ours.filter((_, i) => !refreshed[i]))
    })
  )

  /** A record was deleted, expired or evicted: claim it again while its socket lives here. */
  const removed = (token: string) =>
    maintenance.withPermits(1)(
      Effect.suspend(() => {
        const entry = entries.get(token)
        if (entry === undefined) return Effect.void
        // Another instance's record is gone: nothing left to adopt; a later lookup reads the store.
        if (!isOurs(entry)) return Effect.sync(() => entries.delete(token))
        return store.claimSocket(token, entry.record).pipe(
          Effect.map(Either.right),
          Effect.catchTag("CorruptValue", (error) => Effect.succeed(Either.left(error))),
          Effect.flatMap((result) => applyClaim(token, entry, result)),
          Effect.catchTag("InvalidToken", (error) => Effect.logError(`socket records: ${error.message}`)),
          Effect.catchAll((error) => storeFailed(`claiming token ${token} again`, error))
        )
      })
    )

  /**
   * Delete our record of `token` whatever happens to the caller (a record left behind
   * would make the tab's next connect a duplicate). It runs in a fiber of its own that
   * stays interruptible, because the store's timeouts work by interruption: in an
   * uninterruptible region a store that is down would never time out.
   */
  const forget = (token: string, record: SocketRecord, what: string): Effect.Effect<void> =>
    store.deleteSocketIfOwner(token, record).pipe(
      Effect.zipRight(storeWorked),
      Effect.catchTag("InvalidToken", () => Effect.void),
      Effect.catchAll((error) => storeFailed(what, error)),
      Effect.interruptible,
      Effect.fork,
      Effect.flatMap(Fiber.join)
    )

  /** Unlink an entry: the map first, so our own deletion event finds nothing to re-claim. */
  const unlink = (token: string, entry: Entry): Effect.Effect<void> =>
    Effect.uninterruptible(
      Effect.suspend(() => {
        if (entries.get(token) !== entry) return Effect.void
        entries.delete(token)
        if (!isOurs(entry)) return Effect.void
        return forget(token, entry.record, `deleting the record of token ${token}`)
      })
    )

  type Claim = "ours" | "taken"

  const claim = (token: string, record: SocketRecord): Effect.Effect<Claim, StoreError> =>
    store.claimSocket(token, record).pipe(
      Effect.map(
        (result): Claim => (result._tag === "Claimed" || sameRecord(result.record, record) ? "ours" : "taken")
      ),
      Effect.catchTags({
        // A record nobody can read still names some other socket: the token is not free.
        CorruptValue: (error) =>
          Effect.as(
            Effect.logWarning(`socket records: token ${token} treated as taken: ${error.message}`),
            "taken" as const
          ),
        InvalidToken: (error) => Effect.die(error)
      })
    )

  const linkAs = (token: string, connectionId: string, fresh: boolean) =>
    Effect.sync((): Linked => {
      entries.set(token, { connectionId, record: { instanceId, connectionId } })
      return { token, fresh }
    })

  const notStored = (token: string, connectionId: string, fresh: boolean) => (cause: StoreError) =>
    Effect.zipRight(
      Effect.zipRight(linkAs(token, connectionId, fresh), storeFailed(`linking token ${token}`, cause)),
      Effect.fail(
        fresh
          ? new RecordNotStored({ token, connectionId, cause, fresh: true })
          : new RecordNotStored({ token, connectionId, cause })
      )
    )

  /**
   * Claim `token` and, when it is ours, link it locally in the same step: `None` when it is
   * taken. A claim interrupted in flight may have been applied all the same, so its record
   * is deleted again; once the claim answered, the local link is made without a gap.
   */
  const claimAndLink = (token: string, connectionId: string, fresh: boolean) => {
    const record: SocketRecord = { instanceId, connectionId }
    return Effect.uninterruptibleMask((restore) =>
      restore(claim(token, record)).pipe(
        Effect.onInterrupt(() => forget(token, record, `deleting the record of interrupted link ${token}`)),
        Effect.catchAll(notStored(token, connectionId, fresh)),
        Effect.flatMap((outcome) =>
          outcome === "taken"
            ? Effect.succeedNone
            : Effect.zipRight(
                Effect.zipRight(Metric.increment(links), storeWorked),
                linkAs(token, connectionId, fresh)
              ).pipe(Effect.map(Option.some))
        )
      )
    )
  }

  const linkFresh = (connectionId: string) =>
    Effect.gen(function* () {
      yield* Metric.increment(duplicates)
      for (let attempt = 0; attempt < freshAttempts; attempt++) {
        const linked = yield* claimAndLink(randomUUID(), connectionId, true)
        if (Option.isSome(linked)) return linked.value
      }
      return yield* Effect.dieMessage(`socket records: ${freshAttempts} fresh tokens in a row were taken`)
    })

  const link = (token: string, connectionId: string) =>
    Effect.gen(function* () {
      yield* validateToken(token)
      const current = entries.get(token)
      if (current !== undefined && current.connectionId === connectionId && isOurs(current)) {
        return { token, fresh: false } satisfies Linked
      }
      // Another live socket of ours holds the token: a duplicate, known without asking the store.
      if (current !== undefined && isOurs(current)) return yield* linkFresh(connectionId)
      const linked = yield* claimAndLink(token, connectionId, false)
      return Option.isSome(linked) ? linked.value : yield* linkFresh(connectionId)
    }).pipe(Effect.withSpan("TokenManager.link"), Effect.annotateLogs({ instanceId, token }))

  const disconnect = (token: string, connectionId: string) =>
    Effect.gen(function* () {
      yield* validateToken(token)
      const entry = entries.get(token)
      if (entry === undefined || entry.connectionId !== connectionId) return
      yield* unlink(token, entry)
    }).pipe(Effect.withSpan("TokenManager.disconnect"), Effect.annotateLogs({ instanceId, token }))

  const owner = (token: string, options?: { readonly refresh?: boolean }) =>
    Effect.gen(function* () {
      yield* validateToken(token)
      const entry = entries.get(token)
      if (entry !== undefined && options?.refresh !== true) return Option.some(entry.record)
      const stored = yield* store
        .readSocket(token)
        .pipe(
          Effect.catchTag("CorruptValue", (error) =>
            Effect.as(Effect.logWarning(`socket records: ${error.message}`), Option.none<SocketRecord>())
          )
        )
      if (entry === undefined || entries.get(token) !== entry) return stored
      if (Option.isNone(stored)) {
        // Our socket is live and its record is being claimed again: we still hold it.
        return isOurs(entry) ? Option.some(entry.record) : stored
      }
      if (!sameRecord(stored.value, entry.record)) yield* adopt(token, entry, stored.value)
      return stored
    }).pipe(Effect.withSpan("TokenManager.owner"))

  const disconnectAll = Effect.suspend(() =>
    Effect.forEach(
      [...entries],
      ([token, entry]) =>
        // Once the store failed, the rest are only unlinked locally: shutdown does not wait
        // a command timeout per socket. Their records expire.
        failing ? Effect.sync(() => entries.get(token) === entry && entries.delete(token)) : unlink(token, entry),
      { concurrency: concurrentWrites, discard: true }
    )
  ).pipe(Effect.withSpan("TokenManager.disconnectAll"))

  // --- the sockets loop ---------------------------------------------------------------
  const started = yield* Effect.makeLatch(false)

  const watch = (recovered: Effect.Effect<void>) =>
    Effect.scoped(
      Effect.gen(function* () {
        const { epoch } = yield* store.status
        const setting = yield* store.enableSocketEvents
        if (setting._tag === "Refused" && !refusalLogged) {
          refusalLogged = true
          yield* Effect.logWarning(
            `${loopName}: the store refused to enable keyspace notifications (${setting.reply}); ` +
              `socket records are kept alive by a refresh every ${Duration.format(refreshEvery)} instead`
          )
        }
        const events = yield* store.socketEvents
        mode = Option.some(setting._tag === "Enabled" ? "events" : "refresh")
        yield* recovered
        yield* restore
        yield* started.open
        // A reconnection may follow a server restart that lost records, without the
        // subscription noticing (the command connection alone dropped): restore again.
        yield* store.statusChanges.pipe(
          Stream.filter((status) => status.ready && status.epoch > epoch),
          Stream.changesWith((a, b) => a.epoch === b.epoch),
          Stream.runForEach(() => restore),
          Effect.interruptible,
          Effect.forkScoped
        )
        if (setting._tag === "Refused") {
          yield* Effect.sleep(refreshEvery).pipe(
            Effect.zipRight(refresh),
            Effect.forever,
            Effect.interruptible,
            Effect.forkScoped
          )
        }
        return yield* Stream.runForEach(events, (change) =>
          change.event === "set" ? Effect.void : removed(change.token)
        )
      })
    ).pipe(
      // The layer is ready once the first attempt is over, whatever its outcome: a store
      // that is down must not block the worker, its links are restored later.
      Effect.ensuring(started.open),
      Effect.annotateLogs({ instanceId })
    )

  const loop = yield* supervisor.run(loopName, watch, untilRecovered())
  yield* started.await
  // Interrupt the loop first: nothing may write a record back once the socket is gone.
  yield* Effect.addFinalizer(() => Effect.zipRight(Fiber.interrupt(loop), disconnectAll))

  return TokenManager.of({
    instanceId,
    link,
    disconnect,
    local: (token) =>
      Effect.sync(() => {
        const entry = entries.get(token)
        return entry !== undefined && isOurs(entry) ? Option.some(entry.connectionId) : Option.none()
      }),
    owner,
    tokens: store.scanSockets,
    disconnectAll,
    keepAlive: Effect.sync(() => mode)
  })
})

/**
 * The token manager of one worker. Closing the layer disconnects every local socket:
 * this worker's records are deleted, another's never.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<TokenManager, never, Store | Supervisor | InstanceId | LeaseholdConfig> = Layer.scoped(
  TokenManager,
  make
)
