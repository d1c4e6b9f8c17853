/**
 * The two releases of the queue protocol, one description with and without the commit
 * (docs/design.md#hand-off-in-the-release-step): the same keys, the same hand-off arguments,
 * the same end (`passOn`: the worker's lock id forgotten, its requeue, the grant to the head).
 *
 * - `releaseQueued`: compare-and-delete, then (with `requeue` "1") the worker goes back to
 *   the tail of the queue (under the lock id `queueAs`), then a free lock is granted to the
 *   queue's head, in the same step, its notice carrying the slices named. `queued` counts the
 *   other live entries before the requeue and the grant. Whether or not the lock was still
 *   the caller's, the requeue and the grant happen.
 * - `commitAndReleaseQueued`: `writeIfHolder` and `releaseQueued` in one step, a
 *   modification's last round trip. When `lockId` no longer holds the lock (nor takes it back
 *   with `claim`: `holderOrClaim`) nothing at all is written, queued, granted or published:
 *   the reply names the holder found. Otherwise the other live entries are counted, the
 *   slices written (the fence's TTL with them), the lock deleted, and the release's end made.
 *   The slice keys are the written ones (one value each, in order), then those only carried:
 *   the grant's notice carries the values of all of them.
 *
 * @internal
 */
import * as Option from "effect/Option"
import type { SliceEntry } from "../../Store.js"
import { countQueued, dropLate, openQueue, passOn } from "../memory/queue.js"
import { holderOrClaim as heldOrReclaimed, writeSlices } from "../memory/space.js"
import { asArray, asNumber, claimArg, type Dialect } from "../redis/script.js"
import type { Guarded, Handoff, NoticeMessages } from "../store/driver.js"
import { claimError } from "../validate.js"
import { decodeHolderCheck, holderOrClaim } from "./holderCheck.js"
import { describe, describeAcknowledged, type OperationContext } from "./operation.js"
import { queueAsError, queueKeys, queueStepError } from "./queueKeys.js"
import * as Lua from "./queueLua.js"
import { wrote } from "./wrote.js"

/** A release's arguments. @internal */
export interface Args {
  readonly token: string
  readonly lockId: string
  readonly instanceId: string
  readonly requeue: boolean
  /** The lock id to queue again under, when given. */
  readonly queueAs: string | undefined
  /** The slices whose values the grant's notice carries. */
  readonly carry: ReadonlyArray<string>
  readonly notices: NoticeMessages
}

/** A commit's: a release's, with the slices it writes and the claim it may hold the lock by. @internal */
export interface CommitArgs extends Args {
  readonly entries: ReadonlyArray<SliceEntry>
  readonly claim: number | undefined
}

/** @internal */
export interface Reply {
  readonly released: boolean
  readonly queued: number
}

/** @internal */
export type CommitReply =
  | { readonly _tag: "Written"; readonly queued: number }
  | { readonly _tag: "Lost"; readonly holder: string | null }

const keyNames = ["lock", "fence", "queue", "deadlines", "ids"] as const
const handoffNames = [
  "lockMs",
  "tokenMs",
  "handoffMs",
  "instanceId",
  "requeue",
  "queueAs",
  "noticePrefix",
  "granted"
] as const

const handoffOf = (args: Args): Handoff => ({ requeue: args.requeue, queueAs: args.queueAs ?? "", carry: args.carry })

/** The arguments of the hand-off, the same for both releases. */
const handoffArgs = (env: OperationContext, args: Args) => ({
  lockMs: env.lockMs,
  tokenMs: env.tokenMs,
  handoffMs: env.handoffMs,
  instanceId: args.instanceId,
  requeue: args.requeue ? "1" : "0",
  queueAs: args.queueAs ?? "",
  noticePrefix: env.noticePrefix(args.token),
  granted: args.notices.granted
})

/** The slice keys of a release: the written ones (one value each, in order), then the others carried. */
const releaseKeys = (
  env: OperationContext,
  token: string,
  written: ReadonlyArray<string>,
  carry: ReadonlyArray<string>
) => {
  const names = written.length === 0 ? carry : [...written, ...carry.filter((name) => !written.includes(name))]
  return names.map((name) => env.keys.slice(token, name))
}

/** The end of both releases: the worker's lock id forgotten, its requeue, the grant to the head. */
const passOnLua = (dialect: Dialect) => `${Lua.enqueue}${Lua.grantNext(dialect)}
if not quiet and idOf(instanceId) == lockId then
  forget(instanceId)
end
if requeue == "1" then
  enqueue(instanceId, false, queueAs)
end
if not quiet or requeue == "1" then
  grantNext(slices)
end`

const releaseError = (args: Args, written: ReadonlyArray<string>) =>
  queueStepError(args.token, args.instanceId, args.lockId, [...written, ...args.carry]) ?? queueAsError(args.queueAs)

/** @internal */
export const releaseQueued = describe({
  name: "releaseQueued",
  keys: keyNames,
  // the slices a grant's notice carries
  restKeys: "slices",
  // requeue "1" / "0"
  args: ["lockId", ...handoffNames],
  body: (dialect) => `${Lua.serverNow}${Lua.ids}${Lua.findLate}
local value = redis.call("GET", lock)
${Lua.countQueued}${Lua.dropLate}
local released = 0
if value == lockId then
  redis.call("DEL", lock)
  released = 1
end
${passOnLua(dialect)}
return {released, queued}
`,
  decode: (reply): Reply | undefined => {
    const [released, queued] = asArray(reply) ?? []
    if (typeof released !== "number" || asNumber(queued) === undefined) return
    return { released: released === 1, queued: queued as number }
  },
  input: (env, args: Args) => ({
    keys: queueKeys(env.keys, args.token),
    restKeys: releaseKeys(env, args.token, [], args.carry),
    args: { lockId: args.lockId, ...handoffArgs(env, args) }
  }),
  memory: (s, now, args): Reply => {
    const q = openQueue(s, now, args.token)
    const value = s.ks.getString(q.lockKey, now)?.value
    const queued = countQueued(q.deadlines, args.instanceId, now)
    dropLate(q)
    const released = value === args.lockId
    if (released) s.ks.delete(q.lockKey)
    passOn(q, args.lockId, args.instanceId, handoffOf(args), args.notices.granted, [])
    return { released, queued }
  },
  check: (args) => releaseError(args, [])
})

/** @internal */
export const commitAndReleaseQueued = describeAcknowledged({
  name: "commitAndReleaseQueued",
  keys: keyNames,
  restKeys: "slices",
  args: ["lockId", "claim", ...handoffNames],
  restArgs: "values",
  body: (dialect) => `${Lua.ids}${holderOrClaim()}${Lua.serverNow}${Lua.findLate}${Lua.countQueued}
-- the writes first (see writeIfHolder): an out-of-memory refusal comes before any write,
-- dropping the late entries included
for i = 1, #values do
  redis.call("SET", slices[i], values[i], "PX", tokenMs)
end
redis.call("PEXPIRE", fence, tokenMs)
${Lua.dropLate}
redis.call("DEL", lock)
${passOnLua(dialect)}
return {1, queued}
`,
  decode: (reply): CommitReply | undefined => {
    const checked = decodeHolderCheck(reply)
    if (checked?._tag !== "Written") return checked
    const queued = asNumber(asArray(reply)?.[1])
    return queued === undefined ? undefined : { _tag: "Written", queued }
  },
  input: (env, args: CommitArgs) => ({
    keys: queueKeys(env.keys, args.token),
    restKeys: releaseKeys(
      env,
      args.token,
      args.entries.map(([name]) => name),
      args.carry
    ),
    args: { lockId: args.lockId, claim: claimArg(args.claim), ...handoffArgs(env, args) },
    restArgs: args.entries.map(([, value]) => value)
  }),
  memory: (s, now, args): CommitReply => {
    const held = heldOrReclaimed(s, now, args.token, args.lockId, args.claim)
    if (typeof held !== "string") return held as CommitReply
    const q = openQueue(s, now, args.token)
    const queued = countQueued(q.deadlines, args.instanceId, now)
    writeSlices(s, args.token, args.entries, now)
    dropLate(q)
    s.ks.delete(q.lockKey)
    passOn(
      q,
      args.lockId,
      args.instanceId,
      handoffOf(args),
      args.notices.granted,
      args.entries.map(([name]) => name)
    )
    return { _tag: "Written", queued }
  },
  read: (reply): Guarded<number> =>
    reply._tag === "Lost"
      ? { _tag: "Lost", holder: Option.fromNullishOr(reply.holder) }
      : { _tag: "Done", value: reply.queued },
  wrote: (reply, { entries }) => wrote(entries)(reply),
  check: (args) =>
    releaseError(
      args,
      args.entries.map(([name]) => name)
    ) ?? claimError(args.claim)
})
