/**
 * The queue part of the Redis `Driver` (docs/protocol.md#the-queue-hand-off): each step the token's
 * lock, queue and deadline keys, then one script; notices go to the channel the topology names (one
 * per worker on a single server, per worker and token on a Cluster), appended by the scripts with
 * the worker id.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { SliceEntry } from "../../Store.js"
import { StoreRefused } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import { granted, wrote } from "../operations/wrote.js"
import type { Driver, Handoff, NoticeMessages } from "../store/driver.js"
import { queuedAcquireResult } from "../store/replies.js"
import type { Context } from "./driver.js"
import type { LastGrant } from "./lastGrant.js"
import { claimArg } from "./script.js"
import * as Scripts from "./scripts/index.js"

/** The keys of a token's lock and queue, as every queue step (and the one-step commit) names them. @internal */
export const queueKeys = (keys: Keys, token: string) => ({
  lock: keys.lock(token),
  fence: keys.fence(token),
  queue: keys.queue(token),
  deadlines: keys.queueDeadlines(token),
  ids: keys.queueIds(token)
})

/**
 * A release, with what is known of the token (`LastGrant`) following it however it ends (an
 * interruption included). `queued` reads the other workers queued from its reply when the
 * release was made under a grant an attempt here took (`undefined` otherwise): what it leaves
 * is worth knowing only when it hands the lock to nobody (none queued, nor the releaser again).
 */
const remembered = <A, E>(
  lastGrant: LastGrant,
  of: {
    readonly lockId: string
    readonly token: string
    readonly entries: ReadonlyArray<SliceEntry>
    readonly handoff: Handoff
  },
  release: Effect.Effect<A, E>,
  queued: (reply: A) => number | undefined
) =>
  Effect.onExit(release, (exit) =>
    Effect.sync(() =>
      lastGrant.released(
        of.lockId,
        of.token,
        of.entries,
        Exit.isSuccess(exit) && queued(exit.value) === 0 && !of.handoff.requeue
      )
    )
  )

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
  /** The arguments of a release that hands the lock on (the same for both releases). */
  const handoffArgs = (token: string, instanceId: string, handoff: Handoff, notices: NoticeMessages) => ({
    lockMs,
    tokenMs,
    handoffMs,
    instanceId,
    requeue: handoff.requeue ? "1" : "0",
    queueAs: handoff.queueAs,
    noticePrefix: topology.noticePrefix(keys, token),
    granted: notices.granted
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
            keys: queueKeys(keys, token),
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
      remembered(
        lastGrant,
        { lockId, token, entries: [], handoff },
        runScript("releaseQueued", Scripts.releaseQueued, {
          keys: queueKeys(keys, token),
          restKeys: releaseKeys(token, [], handoff.carry),
          args: { lockId, ...handoffArgs(token, instanceId, handoff, notices) }
        }),
        (reply) => (reply.released ? reply.queued : undefined)
      ),
    commitAndReleaseQueued: (token, lockId, entries, instanceId, handoff, claim, notices) =>
      remembered(
        lastGrant,
        { lockId, token, entries, handoff },
        Effect.map(
          runAcknowledged(
            "commitAndReleaseQueued",
            Scripts.commitAndReleaseQueued,
            {
              keys: queueKeys(keys, token),
              restKeys: releaseKeys(
                token,
                entries.map(([name]) => name),
                handoff.carry
              ),
              args: { lockId, claim: claimArg(claim), ...handoffArgs(token, instanceId, handoff, notices) },
              restArgs: entries.map(([, value]) => value)
            },
            wrote(entries)
          ),
          (reply) =>
            reply._tag === "Lost"
              ? ({ _tag: "Lost", holder: Option.fromNullishOr(reply.holder) } as const)
              : ({ _tag: "Done", value: reply.queued } as const)
        ),
        // a claim's grant was not taken by an attempt here: nothing of it is known
        (reply) => (reply._tag === "Done" && claim === undefined ? reply.value : undefined)
      ),
    leaveQueue: (token, instanceId, lockId, notices) =>
      Effect.asVoid(
        runScript("leaveQueue", Scripts.leaveQueue, {
          keys: queueKeys(keys, token),
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
