/**
 * The queue part of the Redis `Driver` (DESIGN §4): each step the token's lock, queue and
 * deadline keys, then one script; notices go to the channel the topology names (one per
 * worker on a single server, per worker and token on a Cluster), appended by the scripts
 * with the worker id.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { StoreRefused } from "../../StoreError.js"
import type { Driver } from "../store/driver.js"
import { queuedAcquireResult } from "../store/replies.js"
import type { Context } from "./driver.js"
import { claimArg } from "./script.js"
import * as Scripts from "./scripts/index.js"
import { granted, wrote } from "./wrote.js"

/** @internal */
export const queuePart = ({
  handoffMs,
  keys,
  lastGrant,
  lockMs,
  pubsub,
  runAcknowledged,
  runScript,
  tokenMs,
  topology
}: Context) => {
  const queueKeys = (token: string) => ({
    lock: keys.lock(token),
    fence: keys.fence(token),
    queue: keys.queue(token),
    deadlines: keys.queueDeadlines(token),
    ids: keys.queueIds(token)
  })
  /** The slice keys of a release: the written ones (one value each, in order), then the others carried. */
  const releaseKeys = (token: string, written: ReadonlyArray<string>, carry: ReadonlyArray<string>) => {
    const names = written.length === 0 ? carry : [...written, ...carry.filter((name) => !written.includes(name))]
    return names.map((name) => keys.slice(token, name))
  }
  return {
    acquireQueued: (token, lockId, slices, instanceId, claim, notices) =>
      Effect.flatMap(
        runAcknowledged(
          "acquireQueued",
          Scripts.acquireQueued,
          {
            keys: queueKeys(token),
            restKeys: slices.map((name) => keys.slice(token, name)),
            args: {
              lockId,
              lockMs,
              tokenMs,
              handoffMs,
              instanceId,
              claim: claimArg(claim),
              noticePrefix: topology.noticePrefix(keys, token),
              granted: notices.granted,
              contended: notices.contended
            }
          },
          granted
        ),
        (reply) => {
          if (reply._tag !== "Acquired") return Effect.succeed(queuedAcquireResult(reply, lockMs))
          if (reply.values.length !== slices.length) {
            return Effect.fail(
              new StoreRefused({ operation: "acquireQueued", reply: `unexpected reply ${JSON.stringify(reply)}` })
            )
          }
          if (claim === undefined) lastGrant.granted(lockId, token, reply.fence, slices, reply.values)
          return Effect.succeed(queuedAcquireResult(reply, lockMs))
        }
      ),
    releaseQueued: (token, lockId, instanceId, handoff, notices) =>
      runScript("releaseQueued", Scripts.releaseQueued, {
        keys: queueKeys(token),
        restKeys: releaseKeys(token, [], handoff.carry),
        args: {
          lockId,
          lockMs,
          tokenMs,
          handoffMs,
          instanceId,
          requeue: handoff.requeue ? "1" : "0",
          queueAs: handoff.queueAs,
          noticePrefix: topology.noticePrefix(keys, token),
          granted: notices.granted
        }
      }).pipe(
        // with other workers queued, the lock goes on to them: what it leaves is not worth knowing
        Effect.tap((reply) =>
          lastGrant.released(lockId, token, [], reply.released && reply.queued === 0 && !handoff.requeue)
        ),
        Effect.tapError(() => Effect.sync(() => lastGrant.released(lockId, token, [], false)))
      ),
    commitAndReleaseQueued: (token, lockId, entries, instanceId, handoff, claim, notices) =>
      Effect.map(
        runAcknowledged(
          "commitAndReleaseQueued",
          Scripts.commitAndReleaseQueued,
          {
            keys: queueKeys(token),
            restKeys: releaseKeys(
              token,
              entries.map(([name]) => name),
              handoff.carry
            ),
            args: {
              lockId,
              claim: claimArg(claim),
              lockMs,
              tokenMs,
              handoffMs,
              instanceId,
              requeue: handoff.requeue ? "1" : "0",
              queueAs: handoff.queueAs,
              noticePrefix: topology.noticePrefix(keys, token),
              granted: notices.granted
            },
            restArgs: entries.map(([, value]) => value)
          },
          wrote(entries)
        ),
        (reply) => {
          lastGrant.released(
            lockId,
            token,
            entries,
            reply._tag !== "Lost" && reply.queued === 0 && !handoff.requeue && claim === undefined
          )
          return reply._tag === "Lost"
            ? ({ _tag: "Lost", holder: Option.fromNullable(reply.holder) } as const)
            : ({ _tag: "Done", value: reply.queued } as const)
        }
      ).pipe(Effect.tapError(() => Effect.sync(() => lastGrant.released(lockId, token, entries, false)))),
    leaveQueue: (token, instanceId, lockId, notices) =>
      Effect.asVoid(
        runScript("leaveQueue", Scripts.leaveQueue, {
          keys: queueKeys(token),
          args: {
            instanceId,
            lockId: lockId ?? "",
            tokenMs,
            handoffMs,
            noticePrefix: topology.noticePrefix(keys, token),
            granted: notices.granted
          }
        })
      ),
    queueLength: (token, instanceId) =>
      runScript("queueLength", Scripts.queueLength, {
        keys: { deadlines: keys.queueDeadlines(token) },
        args: { instanceId }
      }),
    queue: (token) =>
      runScript("queue", Scripts.queue, {
        keys: { queue: keys.queue(token), deadlines: keys.queueDeadlines(token) },
        args: {}
      }),
    noticeChannel: (token, instanceId) => `${topology.noticePrefix(keys, token)}${instanceId}`,
    notices: (token, instanceId) => pubsub.subscribe(`${topology.noticePrefix(keys, token)}${instanceId}`)
  } satisfies Partial<Driver>
}
