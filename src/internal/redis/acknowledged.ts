/**
 * Steps acknowledged by replicas (`minReplicasAck`): the grants, group commits and commits
 * with their release of a Redis store, on a connection of their own, each followed by a
 * `WAIT` before its caller hears of it.
 *
 * `WAIT n timeout` blocks the connection it is sent on until `n` replicas have every write
 * made so far by that connection, or the timeout passes; it cannot run inside a script.
 * On the shared command connection it would stall every command behind it (a read, a
 * publish, a presence refresh) for as long as the replicas take. So these steps go to a
 * connection that carries nothing else, in batches: the steps issued while a batch is out
 * are sent together, pipelined, as the next batch, followed by one `WAIT`. A step resolves
 * when the `WAIT` after it reports `n` replicas (every write of the batch, and of every
 * connection before it: a replica acknowledges an offset of the one replication stream);
 * fewer by the timeout fail it with `NotAcknowledged`. Under load one `WAIT` covers many
 * steps; alone, a step costs its own round trip plus the replicas' one.
 *
 * A step that wrote nothing (a lock held by another, a queued attempt, a commit refused as
 * `Lost`) resolves as soon as its reply arrives: there is nothing for a replica to keep.
 *
 * One fiber drains the queue of steps, one batch at a time, so no step waits on the server
 * behind a blocked `WAIT`: the steps wait here, where their callers' interruptions can still
 * withdraw them unsent. Each step's outcome is a `Deferred` its caller awaits. A
 * step's reply and its `WAIT` come within the connection's command timeout (the store's,
 * plus the acknowledgement timeout), so a step waits at most twice that (a batch out, then
 * its own).
 *
 * @internal
 */
import type * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { Redis } from "ioredis"
import { type AcknowledgedError, NotAcknowledged, type StoreUnavailable } from "../../StoreError.js"
import {
  awaitReady,
  closeConnection,
  connectionOptions,
  type Endpoint,
  openConnection,
  toStoreError
} from "./connection.js"
import type { Health } from "./health.js"
import { defineAll, singleServer } from "./script.js"
import * as Scripts from "./scripts/index.js"

/** @internal */
export interface Acknowledged {
  /**
   * Send one step on the acknowledged connection; it succeeds with its raw reply once
   * `minReplicasAck` replicas have it, or at once when `needsAck` says its reply wrote nothing.
   */
  readonly run: (
    operation: string,
    send: (connection: Redis) => Promise<unknown>,
    needsAck: (reply: unknown) => boolean
  ) => Effect.Effect<unknown, AcknowledgedError>
  /** Wait, within the connect timeout, until steps can be sent. */
  readonly connected: (timeoutMs: number, onTimeout: () => StoreUnavailable) => Effect.Effect<void, StoreUnavailable>
}

/** @internal */
export interface Settings {
  readonly commandTimeoutMs: number
  readonly connectTimeoutMs: number
  /** `WAIT`'s replica count, at least 1. */
  readonly replicas: number
  /** `WAIT`'s timeout. */
  readonly timeoutMs: number
}

/**
 * A step waiting for its batch, then for its reply and its `WAIT`. Its outcome is `done`;
 * its caller gone before it is sent completes `done` with an interruption, and a step done
 * before its batch is sent is not sent.
 */
interface Step {
  readonly operation: string
  readonly send: (connection: Redis) => Promise<unknown>
  readonly needsAck: (reply: unknown) => boolean
  readonly done: Deferred.Deferred<unknown, AcknowledgedError>
}

/** A step whose reply wrote, waiting for a WAIT; `late`: its reply came after the batch's WAIT answered. */
interface Written {
  readonly step: Step
  readonly reply: unknown
  readonly late: boolean
}

/**
 * Whether a WAIT was refused because its server is a replica now: a failover demoted it
 * between the step it follows and the WAIT. The step was made on the primary it was then,
 * and no replica acknowledged it through this server: its outcome is unknown
 * (`NotAcknowledged`), not refused.
 */
const demoted = (cause: unknown): boolean =>
  cause instanceof Error && /^ERR WAIT cannot be used with replica instances/.test(cause.message)

/** What a WAIT reported: the replicas that have every write before it, or the failure of the command. */
type Waited = { readonly ok: true; readonly count: number } | { readonly ok: false; readonly cause: unknown }

/** The connection and settings every step of the batching works with. */
interface Context {
  readonly connection: Redis
  readonly replicas: number
  readonly timeoutMs: number
  readonly mapError: (operation: string) => (cause: unknown) => AcknowledgedError
  /** Ended when the fiber draining it ends: no step is taken after that. */
  readonly queue: Queue.Queue<Step, Cause.Done>
}

const fail = (step: Step, error: AcknowledgedError) => Deferred.doneUnsafe(step.done, Effect.fail(error))

/** Settle the steps that wrote by what a WAIT reported. */
const settle = (ctx: Context, steps: ReadonlyArray<Written>, waited: Waited) => {
  const { replicas, timeoutMs } = ctx
  for (const { reply, step } of steps) {
    if (!waited.ok) {
      fail(
        step,
        demoted(waited.cause)
          ? new NotAcknowledged({ operation: step.operation, acknowledged: 0, required: replicas, timeoutMs })
          : ctx.mapError(step.operation)(waited.cause)
      )
    } else if (waited.count >= replicas) {
      Deferred.doneUnsafe(step.done, Effect.succeed(reply))
    } else {
      fail(
        step,
        new NotAcknowledged({
          operation: step.operation,
          acknowledged: waited.count,
          required: replicas,
          timeoutMs
        })
      )
    }
  }
}

/**
 * Send a WAIT; `answered` is done with what it reports. Taken through one promise more
 * than a plain command's reply: a script's reply reaches `then` one promise later
 * (ioredis chains its NOSCRIPT fallback onto it), so a step whose reply came in the same
 * read as the WAIT's, before it, is seen before it (else it would count as late, and wait
 * for one more WAIT, past the timeout's bound when its replicas are slow). A step resent
 * after NOSCRIPT comes later still: its reply is read after the WAIT's, and passes
 * through the fallback's promise too.
 */
const wait = (ctx: Context, answered: Deferred.Deferred<Waited>): void => {
  ctx.connection
    .wait(ctx.replicas, ctx.timeoutMs)
    .then((count) => count)
    .then(
      (count) =>
        Deferred.doneUnsafe(answered, Effect.succeed({ ok: true, count: typeof count === "number" ? count : 0 })),
      (cause) => Deferred.doneUnsafe(answered, Effect.succeed({ ok: false, cause }))
    )
}

/** Send a WAIT and await what it reports. */
const awaitWait = (ctx: Context): Effect.Effect<Waited> =>
  Effect.suspend(() => {
    const answered = Deferred.makeUnsafe<Waited>()
    wait(ctx, answered)
    return Deferred.await(answered)
  })

/**
 * Judge a step's reply: settle it at once when it wrote nothing, else it is `Written`,
 * late when the batch's WAIT (`answered`) had answered before it.
 */
const readReply = (step: Step, reply: unknown, answered: Deferred.Deferred<Waited>): Written | undefined => {
  let wrote: boolean
  try {
    wrote = step.needsAck(reply)
  } catch (defect) {
    // a reply its reader cannot judge fails its own step, and no other
    Deferred.doneUnsafe(step.done, Effect.die(defect))
    return undefined
  }
  if (wrote) return { step, reply, late: Deferred.isDoneUnsafe(answered) }
  Deferred.doneUnsafe(step.done, Effect.succeed(reply))
  return undefined
}

/** Send a step; its reply is read by `readReply`, and a failed command settles it at once. */
const sendStep = (ctx: Context, step: Step, answered: Deferred.Deferred<Waited>): Promise<Written | undefined> => {
  let sent: Promise<unknown>
  try {
    sent = step.send(ctx.connection)
  } catch (cause) {
    sent = Promise.reject(cause)
  }
  return sent.then(
    (reply) => readReply(step, reply, answered),
    (cause) => {
      fail(step, ctx.mapError(step.operation)(cause))
      return undefined
    }
  )
}

/**
 * Send a batch pipelined, then one WAIT, and settle its steps. A step whose reply came
 * after the WAIT answered was written after it too (ioredis sends a script's EVAL once
 * its EVALSHA is answered NOSCRIPT, as on a primary just promoted): another WAIT covers it.
 */
const sendBatch = (ctx: Context, batch: ReadonlyArray<Step>) =>
  Effect.gen(function* () {
    const answered = Deferred.makeUnsafe<Waited>()
    const replies = batch.map((step) => sendStep(ctx, step, answered))
    wait(ctx, answered)
    const written = (yield* Effect.promise(() => Promise.all(replies))).filter(
      (outcome): outcome is Written => outcome !== undefined
    )
    const waited = yield* Deferred.await(answered)
    settle(
      ctx,
      written.filter((outcome) => !outcome.late),
      waited
    )
    const late = written.filter((outcome) => outcome.late)
    if (late.length === 0) return
    if (!waited.ok) return settle(ctx, late, waited)
    settle(ctx, late, yield* awaitWait(ctx))
  })

/** The steps left when the connection closes: each fails as its command would on a closed connection. */
const abandon = (ctx: Context, steps: Iterable<Step>) => {
  for (const step of steps) fail(step, ctx.mapError(step.operation)(new Error("Connection is closed.")))
}

/** Take every step queued, leaving out those withdrawn meanwhile (done already, and not sent). */
const takeBatch = (ctx: Context): Effect.Effect<ReadonlyArray<Step>, Cause.Done> =>
  Effect.map(Queue.takeAll(ctx.queue), (taken) => taken.filter((step) => !Deferred.isDoneUnsafe(step.done)))

/**
 * Take one batch and send it. The steps taken are abandoned if the batch ends otherwise
 * than settled (interrupted when the connection closes, or a defect), from the moment
 * they leave the queue.
 */
const drainOnce = (ctx: Context) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(restore(takeBatch(ctx)), (batch) =>
      batch.length === 0
        ? Effect.void
        : restore(sendBatch(ctx, batch)).pipe(
            Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => abandon(ctx, batch))))
          )
    )
  )

/**
 * One batch out at a time: the steps issued while it is out wait in the queue, and go
 * together as the next. A defect ends its batch alone, and the next one is sent. When the
 * drain ends, the queue ends with it and the steps left in it are abandoned.
 */
const drain = (ctx: Context) =>
  drainOnce(ctx).pipe(
    Effect.catchDefect((defect) => Effect.logWarning("acknowledged steps: a batch ended with a defect", defect)),
    Effect.forever,
    Effect.ensuring(
      Effect.andThen(
        Queue.end(ctx.queue),
        Effect.flatMap(Queue.clear(ctx.queue), (left) => Effect.sync(() => abandon(ctx, left)))
      )
    )
  )

/** Queue a step and await its outcome; its caller's interruption withdraws it if still unsent. */
const enqueue = (
  ctx: Context,
  operation: string,
  send: (connection: Redis) => Promise<unknown>,
  needsAck: (reply: unknown) => boolean
): Effect.Effect<unknown, AcknowledgedError> =>
  Effect.suspend(() => {
    const step: Step = { operation, send, needsAck, done: Deferred.makeUnsafe() }
    if (!Queue.offerUnsafe(ctx.queue, step))
      return Effect.fail(ctx.mapError(operation)(new Error("Connection is closed.")))
    return Effect.onInterrupt(Deferred.await(step.done), () => Deferred.interrupt(step.done))
  })

/** The acknowledged connection, opened with the store's scripts and tracked by its health. */
const openAcknowledged = (endpoint: Endpoint, settings: Settings, health: Health) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const opened = openConnection(endpoint, connectionOptions("acknowledged", settings), health.onError)
      defineAll(opened, Scripts.all, singleServer)
      health.track(opened, "acknowledged")
      return opened
    }),
    (opened) => closeConnection(opened, settings.commandTimeoutMs)
  )

/** @internal */
export const make = (
  endpoint: Endpoint,
  settings: Settings,
  health: Health
): Effect.Effect<Acknowledged, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { commandTimeoutMs, replicas, timeoutMs } = settings
    // A WAIT takes up to its timeout to answer: the replies on this connection get that much more.
    const connection = yield* openAcknowledged(
      endpoint,
      { ...settings, commandTimeoutMs: commandTimeoutMs + timeoutMs },
      health
    )
    const ctx: Context = {
      connection,
      replicas,
      timeoutMs,
      mapError: (operation) => toStoreError(endpoint, operation),
      queue: yield* Queue.unbounded<Step, Cause.Done>()
    }
    yield* Effect.forkScoped(drain(ctx))

    const run = (
      operation: string,
      send: (connection: Redis) => Promise<unknown>,
      needsAck: (reply: unknown) => boolean
    ): Effect.Effect<unknown, AcknowledgedError> =>
      Effect.suspend(() =>
        connection.status === "ready"
          ? enqueue(ctx, operation, send, needsAck)
          : Effect.andThen(
              awaitReady(connection, commandTimeoutMs, health.notConnected(operation, commandTimeoutMs)),
              enqueue(ctx, operation, send, needsAck)
            )
      )

    return {
      run,
      connected: (connectTimeoutMs, onTimeout) => awaitReady(connection, connectTimeoutMs, onTimeout)
    }
  })
