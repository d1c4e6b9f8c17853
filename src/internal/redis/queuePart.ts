/**
 * The queue part of the Redis `Driver` (docs/protocol.md#the-queue-hand-off): the queue's
 * operations are described in `../operations/` (each step the token's lock, queue and deadline
 * keys, then one script); here is what the driver does around them (`LastGrant` follows the
 * grants and releases of this worker), and the notice channels, which the topology names
 * (one per worker on a single server, per worker and token on a Cluster).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { QueuedAcquireResult, SliceEntry } from "../../Store.js"
import * as Operations from "../operations/index.js"
import type { AnyOperation } from "../operations/operation.js"
import type { Driver, Guarded } from "../store/driver.js"
import type { Around } from "./call.js"
import type { Context } from "./driver.js"

/**
 * A release, with what is known of the token (`LastGrant`) following it however it ends (an
 * interruption included). `queued` reads the other workers queued from its reply when the
 * release was made under a grant an attempt here took (`undefined` otherwise): what it leaves
 * is worth knowing only when it hands the lock to nobody (none queued, nor the releaser again).
 */
const remembered =
  <A>(
    { lastGrant }: Context,
    entriesOf: (args: Operations.ReleaseQueuedArgs) => ReadonlyArray<SliceEntry>,
    queued: (reply: A, args: Operations.ReleaseQueuedArgs) => number | undefined
  ): Around =>
  (release, args: Operations.ReleaseQueuedArgs) =>
    Effect.onExit(release, (exit) =>
      Effect.sync(() =>
        lastGrant.released(
          args.lockId,
          args.token,
          entriesOf(args),
          Exit.isSuccess(exit) && queued(exit.value, args) === 0 && !args.requeue
        )
      )
    )

/** What the Redis driver does around the queue's operations. @internal */
export const queueAround = (context: Context): ReadonlyArray<readonly [AnyOperation, Around]> => [
  [
    Operations.acquireQueued,
    (acquire, { claim, lockId, slices, token }: Operations.AcquireQueuedArgs) =>
      Effect.tap(acquire, (result: QueuedAcquireResult) =>
        Effect.sync(() => {
          // a claim's grant was not taken by an attempt here: nothing of it is known
          if (result._tag === "Acquired" && claim === undefined) {
            context.lastGrant.granted(
              lockId,
              token,
              result.fence,
              slices,
              result.values.map((value) => (value._tag === "Some" ? value.value : null))
            )
          }
        })
      )
  ],
  [
    Operations.releaseQueued,
    remembered(
      context,
      () => [],
      (reply: { readonly released: boolean; readonly queued: number }) => (reply.released ? reply.queued : undefined)
    )
  ],
  [
    Operations.commitAndReleaseQueued,
    remembered(
      context,
      (args) => (args as Operations.CommitAndReleaseQueuedArgs).entries,
      // a claim's grant was not taken by an attempt here: nothing of it is known
      (reply: Guarded<number>, args) =>
        reply._tag === "Done" && (args as Operations.CommitAndReleaseQueuedArgs).claim === undefined
          ? reply.value
          : undefined
    )
  ]
]

/** @internal */
export const queuePart = ({ keys, pubsub, topology }: Context) =>
  ({
    noticeChannel: (token, instanceId) => `${topology.noticePrefix(keys, token)}${instanceId}`,
    notices: (token, instanceId) => pubsub.subscribe(`${topology.noticePrefix(keys, token)}${instanceId}`)
  }) satisfies Partial<Driver>
