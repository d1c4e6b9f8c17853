/**
 * Which worker holds each client's socket (DESIGN §8).
 *
 * A token's socket record names the instance and the connection that hold the client's
 * socket. `link` claims it atomically; a second tab presenting a token that is already
 * linked elsewhere gets a fresh token. Records of live sockets are kept alive through
 * expiry, deletion and store outages, and a record another instance won meanwhile is
 * adopted, never deleted by our later disconnect.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Stream from "effect/Stream"
import type { SocketRecord } from "./Store.js"
import type { InvalidToken, StoreError } from "./StoreError.js"

/**
 * `link` made the local link but could not write the socket record: the store failed.
 * The record is written when the store returns (by the restore after resubscription or
 * the periodic refresh), so the socket is reachable again without another `link`.
 *
 * @since 0.1.0
 * @category errors
 */
export class RecordNotStored extends Data.TaggedError("RecordNotStored")<{
  /** The token linked locally (the one asked for). */
  readonly token: string
  readonly connectionId: string
  readonly cause: StoreError
}> {
  override get message(): string {
    return `socket record of token ${this.token} not stored (linked locally): ${this.cause.message}`
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
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class TokenManager extends Context.Tag("leasehold/TokenManager")<TokenManager, TokenManager.Service>() {}
