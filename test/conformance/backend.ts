/**
 * What the store conformance suite needs from a backend: a fresh, isolated `Store` per
 * test, a way to let time pass, a way to plant raw values, and fault hooks.
 */
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { Keys } from "../../src/internal/keys.js"
import type { Store } from "../../src/Store.js"

/** One test's view of the backend under test. */
export interface Fixture {
  readonly store: Store.Service
  /** The key layout of this test's store (its key prefix is unique to the test). */
  readonly keys: Keys
  readonly lockExpirationMs: number
  /** How long a grant handed to the queue's head stays pending (the store's `handoffTimeout`). */
  readonly handoffTimeoutMs: number
  readonly commandTimeoutMs: number
  /**
   * `true` when time is the `TestClock` (memory): durations read back are exact.
   * `false` on Redis: they are bounded by the real time that passed.
   */
  readonly exactTime: boolean
  /** Let `ms` pass: `TestClock.adjust` on memory, a real sleep on Redis. */
  readonly advance: (ms: number) => Effect.Effect<void>
  /**
   * How a test knows that what an action published has arrived, before asserting that
   * something was NOT delivered. Memory: `Settle`, the in-flight deliveries given time to
   * arrive. The real servers: `Publish`, a raw message published on a channel as the store's
   * own scripts publish (`PUBLISH`; a Cluster: `SPUBLISH` on the node of the channel's slot):
   * a marker published after the action, on the channel watched, arrives after whatever the
   * action published there.
   */
  readonly quiet:
    | { readonly _tag: "Settle"; readonly settle: Effect.Effect<void> }
    | { readonly _tag: "Publish"; readonly publish: (channel: string, message: string) => Effect.Effect<void> }
  /**
   * Wait until a blocking mailbox read forked by the test is really blocked: memory, its
   * timeout is registered with the `TestClock`; Redis, the server counts a blocked client.
   */
  readonly awaitBlockedRead: Effect.Effect<void>
  /** Store a raw string under a full key name (for corrupt values). */
  readonly putRaw: (key: string, value: string) => Effect.Effect<void>
  /** Store a raw string that expires after `ttlMs`. */
  readonly putRawExpiring: (key: string, value: string, ttlMs: number) => Effect.Effect<void>
  /** Give a key of any kind (a full key name) a TTL of `ttlMs`, as `PEXPIRE` does. */
  readonly expireRaw: (key: string, ttlMs: number) => Effect.Effect<void>
  /** The number of keys in the store (the store is private to the test). */
  readonly keyCount: Effect.Effect<number>
  /**
   * The number of operations the store has processed so far, to prove an operation did no
   * work: Redis, its data commands (PING and INFO excluded); memory, the operations that
   * reached its key space (`MemoryStoreControl.operations`).
   */
  readonly commandsProcessed: Option.Option<Effect.Effect<number>>
  /** Redis: `PUBSUB NUMSUB` of a channel. `None` on memory. */
  readonly channelSubscribers: Option.Option<(channel: string) => Effect.Effect<number>>
  /**
   * An outage of the whole store. memory: `setAvailable(false)` / `setAvailable(true)`;
   * Redis: SIGKILL the server / restart it on the same port.
   */
  readonly outage: {
    readonly begin: Effect.Effect<void>
    readonly end: Effect.Effect<void>
  }
  /**
   * A store that accepts connections but answers nothing (Redis: SIGSTOP / SIGCONT), so
   * that only the command timeout can end an operation. `None` where that cannot happen
   * (memory).
   */
  readonly hang: Option.Option<{
    readonly begin: Effect.Effect<void>
    readonly end: Effect.Effect<void>
  }>
  /**
   * Cut the subscriber connection only. memory: `dropSubscriptions`; Redis:
   * `CLIENT KILL TYPE pubsub`. Returns the number of connections cut (1 on memory).
   */
  readonly dropSubscriptions: Effect.Effect<number>
}

/** A backend the suite runs against. */
export interface Backend {
  readonly name: "memory" | "redis" | "redis-cluster"
  /** Whether `Fixture.hang` is available: the hung-store case is registered only then. */
  readonly canHang: boolean
  /**
   * Register one test: `it.effect` (TestClock) on memory, `it.live` on Redis. The
   * fixture is built in the test's scope and torn down with it.
   */
  readonly test: (name: string, body: (fixture: Fixture) => Effect.Effect<void, unknown, Scope.Scope>) => void
}
