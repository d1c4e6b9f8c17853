/**
 * The Redis backend's `Driver`: each operation is its keys, then one script (or one plain
 * command) through the topology, then the script's decoded reply; a reply of another shape
 * is `StoreRefused`. Subscriptions go to `pubsub`, blocking reads to `blocking`. The queue
 * steps are a part of their own (`queuePart.ts`).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { LeaseholdConfig } from "../../LeaseholdConfig.js"
import type { KeyInfo, MailboxEntry, SocketEventsSetting } from "../../Store.js"
import type { AcknowledgedError, StoreError, StoreRefused, StoreUnavailable } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import * as Operations from "../operations/index.js"
import { type AnyOperation, type OperationContext, unexpectedReply } from "../operations/operation.js"
import type { Driver, RawClaim, ScannedRecord } from "../store/driver.js"
import type { Acknowledged } from "./acknowledged.js"
import type { Blocking } from "./blocking.js"
import { type Around, makeCall } from "./call.js"
import { type Endpoint, scrub, toStoreError } from "./connection.js"
import type { Health } from "./health.js"
import * as LastGrant from "./lastGrant.js"
import type { PubSub } from "./pubsub.js"
import { queueAround, queuePart } from "./queuePart.js"
import { asArray, commandLine, type Input, invoke, type Script } from "./script.js"
import * as Scripts from "./scripts/index.js"
import { stepPart } from "./stepPart.js"
import type { Node, Topology } from "./topology.js"

/**
 * Keyspace notification flags socket events need: `K` keyspace channels, `g` DEL, `$` SET,
 * `x` expired, `e` evicted. `A` stands for `g$lshzxet`.
 */
const neededFlags = ["K", "g", "$", "x", "e"] as const

/** The flags to add to `current` so that socket events are published; empty when none are missing. */
const missingFlags = (current: string): string => {
  const present = new Set(current.includes("A") ? `${current}g$lshzxet` : current)
  return neededFlags.filter((flag) => !present.has(flag)).join("")
}

const decodeEntries = (reply: unknown): ReadonlyArray<MailboxEntry> => {
  const entries: Array<MailboxEntry> = []
  for (const entry of asArray(reply) ?? []) {
    const [id, fields] = asArray(entry) ?? []
    if (typeof id !== "string") continue
    const list = asArray(fields) ?? []
    // An entry without our field (written by someone else) is still returned, with an
    // empty payload: skipping it would leave a reader's position stuck before it.
    let payload = ""
    for (let i = 0; i + 1 < list.length; i += 2) {
      if (list[i] === "payload") {
        payload = String(list[i + 1])
        break
      }
    }
    entries.push({ id, payload })
  }
  return entries
}

const millis = (duration: Duration.Duration): number => Math.max(1, Math.ceil(Duration.toMillis(duration)))

/** @internal */
export interface Parts {
  readonly endpoint: Endpoint
  readonly keys: Keys
  readonly health: Health
  readonly topology: Topology
  readonly pubsub: PubSub
  readonly blocking: Blocking
  /** Set with `minReplicasAck`: where the steps that need replicas' acknowledgement go. */
  readonly acknowledged: Acknowledged | undefined
}

/** What every part of the driver works with (`queuePart.ts` too). @internal */
export interface Context extends Parts {
  /** What the worker's last grant of each token read and wrote: `stepPart`'s one-step modifications. */
  readonly lastGrant: LastGrant.LastGrant
  readonly lockMs: number
  readonly tokenMs: number
  /** How long a grant stays pending for the worker it was handed to. */
  readonly handoffMs: number
  readonly commandTimeoutMs: number
  readonly run: Topology["run"]
  /** Call a script with named keys and arguments; a reply of another shape is `StoreRefused`. */
  readonly runScript: <K extends string, A extends string, R>(
    operation: string,
    script: Script<K, A, R>,
    input: Input<K, A>
  ) => Effect.Effect<R, StoreError>
  /**
   * `runScript` for a step whose loss would break a promise (a grant, a commit): with
   * `minReplicasAck`, on the acknowledged connection, done once replicas have it, unless
   * `wrote` says its reply wrote nothing.
   */
  readonly runAcknowledged: <K extends string, A extends string, R>(
    operation: string,
    script: Script<K, A, R>,
    input: Input<K, A>,
    wrote: (reply: R) => boolean
  ) => Effect.Effect<R, AcknowledgedError>
}

/**
 * What the Redis driver does around the lock's operations: a read of no slices needs no
 * round trip; the values `writeIfHolder` writes are not what the attempt's grant read, so
 * its grant is not remembered.
 */
const lockAround = ({ lastGrant }: Context): ReadonlyArray<readonly [AnyOperation, Around]> => [
  [
    Operations.readSlices,
    (effect, { names }: Operations.ReadSlicesArgs) => (names.length === 0 ? Effect.succeed([]) : effect)
  ],
  [
    Operations.writeIfHolder,
    (effect, { lockId }: Operations.WriteIfHolderArgs) =>
      Effect.ensuring(
        effect,
        Effect.sync(() => lastGrant.forgetGrant(lockId))
      )
  ]
]

/** Publishing from the command connection; subscriptions and the status from their own parts. */
const signalPart = ({ health, keys, pubsub, run, topology }: Context) =>
  ({
    publish: (token, message) =>
      Effect.asVoid(run("publish", (c) => topology.channels.publish(c, keys.signal(token), message))),
    subscribe: (token) => pubsub.subscribe(keys.signal(token)),
    // brought up to date first: an event's mirror may not have run yet
    status: Effect.andThen(health.sync, SubscriptionRef.get(health.status)),
    statusChanges: SubscriptionRef.changes(health.status)
  }) satisfies Partial<Driver>

/** One SCAN page of one node, then the records of its keys in one batched round trip. */
const scanPage = ({ endpoint, keys, topology }: Context, node: Node, cursor: string) =>
  Effect.gen(function* () {
    const [next, found] = yield* node.run("scanSockets", (c) =>
      c.scan(cursor, "MATCH", keys.socketPattern, "COUNT", 500)
    )
    const candidates = found.flatMap((key) => {
      const token = keys.socketToken(key)
      return token === undefined ? [] : [[key, token] as const]
    })
    const records: Array<ScannedRecord> = []
    if (candidates.length > 0) {
      const replies = yield* topology.runBatch(
        "scanSockets",
        candidates.map(([key]) => ["get", key] as const)
      )
      for (let i = 0; i < candidates.length; i++) {
        const [key, token] = candidates[i]!
        const [error, raw] = replies?.[i] ?? [null, null]
        if (error !== null) {
          yield* Effect.logWarning(`RedisStore.scanSockets: skipping ${key}: ${scrub(endpoint, error.message)}`)
          continue
        }
        // Gone between SCAN and GET: the socket disconnected or its record expired.
        if (typeof raw === "string") records.push({ key, token, raw })
      }
    }
    return [records, next] as const
  })

/** Every node's keys, node after node; a cluster's masters as the client knows them when the scan starts. */
const scanSockets = (context: Context): Driver["scanSockets"] =>
  Stream.suspend(() => {
    const all = context.topology.nodes()
    if (all.length === 0) return Stream.fail(context.health.notConnected("scanSockets", 0)())
    return Stream.paginate(
      { node: 0, cursor: "0" },
      ({ cursor, node }: { readonly node: number; readonly cursor: string }) =>
        Effect.map(scanPage(context, all[node]!, cursor), ([records, next]) => {
          if (next !== "0") return [records, Option.some({ node, cursor: next })] as const
          return [
            records,
            node + 1 < all.length ? Option.some({ node: node + 1, cursor: "0" }) : Option.none()
          ] as const
        })
    )
  })

/** Each claim is its own script (one slot each); batched, they cost one round trip (per node). */
const claimSockets =
  ({ endpoint, topology }: Context, env: OperationContext): Driver["claimSockets"] =>
  (claims) =>
    Effect.gen(function* () {
      const claim = Operations.claimSocket
      const replies = yield* topology.runBatch(
        "claimSockets",
        claims.map(([token, record]) => commandLine(claim.script, claim.input(env, { token, record })))
      )
      const results: Array<Result.Result<RawClaim, StoreRefused>> = []
      for (let i = 0; i < claims.length; i++) {
        const [error, reply] = replies?.[i] ?? [null, null]
        if (error !== null) {
          const mapped = toStoreError(endpoint, "claimSockets")(error)
          // A lost connection fails the whole batch; a refused step (a key of another
          // type) is that record's own failure.
          if (mapped._tag === "StoreUnavailable") return yield* Effect.fail(mapped)
          results.push(Result.fail(mapped))
          continue
        }
        const claimed = claim.script.decode(reply)
        results.push(
          claimed === undefined ? Result.fail(unexpectedReply("claimSockets", reply)) : Result.succeed(claimed)
        )
      }
      return results
    })

/** CONFIG GET, then CONFIG SET only when a needed flag is missing; any error reply means refused. */
const enableOn = (node: Node): Effect.Effect<SocketEventsSetting, StoreUnavailable> =>
  Effect.gen(function* () {
    const reply = yield* node.run("enableSocketEvents", (c) => c.config("GET", "notify-keyspace-events"))
    const list = asArray(reply)
    const current = typeof list?.[1] === "string" ? list[1] : ""
    const missing = missingFlags(current)
    if (missing === "") return { _tag: "Enabled", flags: current } as const
    const flags = `${current}${missing}`
    yield* node.run("enableSocketEvents", (c) => c.config("SET", "notify-keyspace-events", flags))
    return { _tag: "Enabled", flags } as const
  }).pipe(
    Effect.catchTag("StoreRefused", (refused) =>
      Effect.succeed<SocketEventsSetting>({ _tag: "Refused", reply: refused.reply })
    )
  )

/** Keyspace notifications are per node: a cluster enables them on every master, and is refused if one refuses. */
const enableSocketEvents = ({ health, topology }: Context): Driver["enableSocketEvents"] =>
  Effect.suspend(() => {
    const all = topology.nodes()
    if (all.length === 0) return Effect.fail(health.notConnected("enableSocketEvents", 0)())
    return Effect.map(
      Effect.forEach(all, enableOn, { concurrency: "unbounded" }),
      (found) => found.find((setting) => setting._tag === "Refused") ?? found[0]!
    )
  })

/** Socket records: the claim scripts, the scan of every node, keyspace notifications. */
const socketPart = (context: Context, env: OperationContext) =>
  ({
    readSocket: (token) =>
      Effect.map(
        context.run("readSocket", (c) => c.get(context.keys.socket(token))),
        Option.fromNullishOr
      ),
    scanSockets: scanSockets(context),
    claimSockets: claimSockets(context, env),
    enableSocketEvents: enableSocketEvents(context),
    socketEvents: context.pubsub.socketEvents
  }) satisfies Partial<Driver>

/** Presence: the refresh script, plain reads and deletes, the worker's channel (sharded on a Cluster). */
const presencePart = ({ keys, pubsub, run, topology }: Context) =>
  ({
    isPresent: (instanceId) =>
      Effect.map(
        run("isPresent", (c) => c.exists(keys.presence(instanceId))),
        (count) => count > 0
      ),
    removePresence: (instanceId) => Effect.asVoid(run("removePresence", (c) => c.del(keys.presence(instanceId)))),
    presencePublish: (instanceId, message) =>
      Effect.asVoid(
        run("presencePublish", (c) => topology.channels.publish(c, keys.presenceChannel(instanceId), message))
      ),
    presenceMessages: (instanceId) => pubsub.subscribe(keys.presenceChannel(instanceId))
  }) satisfies Partial<Driver>

/** Mailboxes: the append script, reads (blocking ones on their own connection), trim, expiry, cursor. */
const mailboxPart = ({ blocking, keys, run, runAcknowledged, topology }: Context) =>
  ({
    // The mailbox's key comes from the record, inside the script: a single server only.
    ...(topology.anyKeyInScripts
      ? {
          mailboxAppendToOwner: (token: string, payload: string, maxLen: number, ttlMs: number) =>
            runAcknowledged(
              "mailboxAppendToOwner",
              Scripts.mailboxAppendToOwner,
              {
                keys: { socket: keys.socket(token) },
                args: { mailboxPrefix: keys.mailbox(""), maxLen, payload, ttlMs }
              },
              (reply) => reply.id !== undefined
            )
        }
      : {}),
    mailboxRead: (instanceId, afterId, count, blockMs) =>
      Effect.gen(function* () {
        const key = keys.mailbox(instanceId)
        // `(` makes the start exclusive (Redis 6.2+); "(0-0" reads from the very start.
        const entries = decodeEntries(
          yield* run("mailboxRead", (c) => c.xrange(key, `(${afterId}`, "+", "COUNT", count))
        )
        if (entries.length > 0 || blockMs === 0) return entries
        // XREAD from the same id cannot miss an entry appended since the XRANGE.
        const reply = yield* blocking.read(key, afterId, count, blockMs)
        const [stream] = (asArray(reply) ?? []) as ReadonlyArray<unknown>
        return decodeEntries(asArray(stream)?.[1])
      }),
    mailboxTrim: (instanceId, maxLen) =>
      Effect.asVoid(run("mailboxTrim", (c) => c.xtrim(keys.mailbox(instanceId), "MAXLEN", maxLen))),
    mailboxExpire: (instanceId, ttlMs) =>
      Effect.asVoid(run("mailboxExpire", (c) => c.pexpire(keys.mailbox(instanceId), ttlMs))),
    mailboxLength: (instanceId) => run("mailboxLength", (c) => c.xlen(keys.mailbox(instanceId))),
    mailboxSetCursor: (instanceId, id, ttlMs) =>
      Effect.asVoid(run("mailboxSetCursor", (c) => c.set(keys.mailboxCursor(instanceId), id, "PX", ttlMs))),
    mailboxCursor: (instanceId) =>
      Effect.map(
        run("mailboxCursor", (c) => c.get(keys.mailboxCursor(instanceId))),
        Option.fromNullishOr
      )
  }) satisfies Partial<Driver>

/** Every key of a token, found by a scan on its node and described by one script. */
const inspectPart = ({ commandTimeoutMs, health, keys, runScript, topology }: Context) =>
  ({
    tokenKeys: (token) =>
      Effect.gen(function* () {
        // Every key of the token shares its hash tag: on a cluster they all live on one master.
        const owner = yield* topology.nodeOf("tokenKeys", keys.tokenHead(token))
        // a single server has one node and no owner name
        const nodes = topology.nodes()
        const node = owner === "" ? nodes[0] : nodes.find((candidate) => candidate.name === owner)
        if (node === undefined) return yield* Effect.fail(health.notConnected("tokenKeys", commandTimeoutMs)())
        const found = new Set<string>()
        let cursor = "0"
        do {
          const [next, page] = yield* node.run("tokenKeys", (c) =>
            c.scan(cursor, "MATCH", keys.tokenPattern(token), "COUNT", 1000)
          )
          for (const key of page) found.add(key)
          cursor = next
        } while (cursor !== "0")
        if (found.size === 0) return []
        const names = [...found].sort()
        const described = yield* runScript("tokenKeys", Scripts.describeKeys, { keys: {}, restKeys: names, args: {} })
        const head = keys.tokenHead(token)
        const infos: Array<KeyInfo> = []
        for (const [i, { pttl, size, type }] of described.entries()) {
          // Expired or deleted between the scan and the script.
          if (type === "none") continue
          infos.push({
            name: names[i]!.slice(head.length),
            kind: type === "string" ? type : type === "zset" ? "set" : "other",
            size,
            ttlMs: pttl >= 0 ? Option.some(pttl) : Option.none()
          })
        }
        return infos
      })
  }) satisfies Partial<Driver>

/** @internal */
export const make = (settings: LeaseholdConfig["Service"], parts: Parts): Driver => {
  const { run } = parts.topology
  /** Call a script with named keys and arguments; a reply of another shape is `StoreRefused`. */
  const runScript = <K extends string, A extends string, R>(
    operation: string,
    script: Script<K, A, R>,
    input: Input<K, A>
  ): Effect.Effect<R, StoreError> =>
    Effect.flatMap(
      run(operation, (c) => invoke(c, script, input)),
      (reply) => {
        const decoded = script.decode(reply)
        return decoded === undefined ? Effect.fail(unexpectedReply(operation, reply)) : Effect.succeed(decoded)
      }
    )

  const { acknowledged } = parts
  const runAcknowledged = <K extends string, A extends string, R>(
    operation: string,
    script: Script<K, A, R>,
    input: Input<K, A>,
    wrote: (reply: R) => boolean
  ): Effect.Effect<R, AcknowledgedError> => {
    if (acknowledged === undefined) return runScript(operation, script, input)
    return Effect.flatMap(
      acknowledged.run(
        operation,
        (c) => invoke(c, script, input),
        (reply) => {
          // a reply that does not decode fails below, acknowledged or not
          const decoded = script.decode(reply)
          return decoded === undefined || wrote(decoded)
        }
      ),
      (reply) => {
        const decoded = script.decode(reply)
        return decoded === undefined ? Effect.fail(unexpectedReply(operation, reply)) : Effect.succeed(decoded)
      }
    )
  }

  const context: Context = {
    ...parts,
    lastGrant: LastGrant.make(),
    runAcknowledged,
    lockMs: millis(settings.lockExpiration),
    tokenMs: millis(settings.tokenExpiration),
    handoffMs: millis(settings.handoffTimeout),
    commandTimeoutMs: millis(settings.commandTimeout),
    run,
    runScript
  }
  const env: OperationContext = {
    keys: parts.keys,
    lockMs: context.lockMs,
    tokenMs: context.tokenMs,
    handoffMs: context.handoffMs,
    noticePrefix: (token) => parts.topology.noticePrefix(parts.keys, token)
  }
  return {
    kind: "redis",
    name: "RedisStore",
    keys: parts.keys,
    call: makeCall(env, run, acknowledged, new Map([...lockAround(context), ...queueAround(context)])),
    ...queuePart(context),
    ...stepPart(context),
    ...signalPart(context),
    ...socketPart(context, env),
    ...presencePart(context),
    ...mailboxPart(context),
    ...inspectPart(context)
  }
}
