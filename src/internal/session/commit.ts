/**
 * Ending a turn: the warning for a modification that held
 * the lock too long, acknowledging requests once their outcome is durable (or failing
 * them), and the last write of a grant with its release.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import { LockExpired } from "../../StateError.js"
import type { SliceEntry } from "../../Store.js"
import { type AcknowledgedError, type InvalidInput, isInvalidInput, type LockLost } from "../../StoreError.js"
import type { QueuePlace } from "../lock/service.js"
import { flushFailures } from "./metrics.js"
import { prune, type Request, type Session, type SessionEnv } from "./session.js"

/** @internal */
export const lockExpired = (env: SessionEnv, request: Request, lockId: string, error: LockLost) =>
  new LockExpired({
    token: error.token,
    event: request.event,
    expected: lockId,
    current: error.holder,
    lockExpirationMs: env.lockMs
  })

/** @internal */
export const failAcks = (
  env: SessionEnv,
  requests: ReadonlyArray<Request>,
  lockId: string,
  error: LockLost | AcknowledgedError
) => {
  for (const request of requests) {
    request.ack.done(Exit.fail(error._tag === "LockLost" ? lockExpired(env, request, lockId, error) : error))
  }
}

/**
 * The failure handler of a session's write: tokens are validated before a session exists,
 * so an `InvalidToken` here is a defect; any other error goes to `onFailure`. (A handler
 * of the write's own `matchEffect`, not a `catchTag` around it: a frame fewer on the path
 * of every commit.)
 *
 * @internal
 */
export const orDefect =
  <A>(onFailure: (error: LockLost | AcknowledgedError) => Effect.Effect<A>) =>
  (error: InvalidInput | LockLost | AcknowledgedError): Effect.Effect<A> =>
    isInvalidInput(error) ? Effect.die(error) : onFailure(error)

/** @internal */
export const succeedAcks = (requests: ReadonlyArray<Request>) => {
  for (const request of requests) request.ack.done(Exit.void)
}

/**
 * The warning for a modification that held the lock `heldMs`, when that is over the threshold.
 *
 * @internal
 */
export const warnHeld = (env: SessionEnv, token: string, event: Option.Option<string>, heldMs: number) =>
  heldMs > env.warnMs
    ? Effect.logWarning(
        `lock of token ${token} was held too long: ${heldMs} ms by one modification` +
          `${Option.match(event, { onNone: () => "", onSome: (e) => ` (event ${e})` })}; ` +
          `the threshold is ${env.warnMs} ms. Move long work out of modifications.`
      )
    : Effect.void

/**
 * After a hold that did not put this worker back in the queue.
 *
 * @internal
 */
export const noTurn: QueuePlace = { queued: false }

/**
 * The last write of a grant, with its release (the store hands the lock to the next worker
 * queued, its notice carrying the slices of `carry`, which the grant read or wrote); this
 * worker goes back to the tail of the queue if requests wait here, under a new lock id.
 * `claim`: the fence of a lock handed over and not yet extended (`HoldState.claim`).
 *
 * @internal
 */
export const commitAndRelease = (
  env: SessionEnv,
  session: Session,
  lockId: string,
  writes: ReadonlyArray<SliceEntry>,
  requests: ReadonlyArray<Request>,
  carry: ReadonlyArray<string>,
  claim?: number
): Effect.Effect<QueuePlace> =>
  // Steps chained by hand, not `Effect.gen`: this is on the path of every uncontended modification.
  Effect.suspend(() => {
    const { store, instanceId } = env
    const { token } = session
    prune(session)
    const waiting = session.queue.length > 0
    const queueAs = waiting ? env.lock.nextLockId() : undefined
    // What was signalled so far is answered by this step (a `Granted` for a grant this
    // worker took by a re-check, a `Resubscribed` before it): the wait that may follow
    // must not act on it.
    session.signals?.take()
    return Effect.matchEffect(
      store.commitAndReleaseQueued(token, lockId, writes, {
        instanceId,
        requeue: waiting,
        carry,
        ...(queueAs === undefined ? {} : { queueAs }),
        ...(claim === undefined ? {} : { claim })
      }),
      {
        onSuccess: (queued): Effect.Effect<QueuePlace> => {
          succeedAcks(requests)
          // The release queued this worker again under `queueAs`: behind the others, to whom
          // the lock went (an attempt before waiting would only be refused, and tell the new
          // holder again), or, alone, first, the lock handed back to it at once. Either way its
          // grant comes with a notice.
          return Effect.succeed(
            queueAs !== undefined
              ? { queued: true, attempted: true, remainingMs: queued > 0 ? env.handoffMs : 0, lockId: queueAs }
              : noTurn
          )
        },
        onFailure: orDefect((error) =>
          Effect.gen(function* () {
            yield* Metric.update(flushFailures, 1)
            yield* Effect.logWarning(`writing the modifications of token ${token} failed: ${error.message}`)
            failAcks(env, requests, lockId, error)
            // A refused commit (no memory left) wrote nothing and kept the lock: left held, it
            // would block every worker on this token until it expires.
            if (error._tag !== "LockLost") yield* Effect.ignore(store.releaseQueued(token, lockId, { instanceId }))
            return noTurn
          })
        )
      }
    )
  })
