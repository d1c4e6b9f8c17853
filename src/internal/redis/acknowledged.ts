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
 * One batch is out at a time, so no step waits on the server behind a blocked `WAIT`: the
 * steps wait here, where their callers' interruptions can still withdraw them unsent. A
 * step's reply and its `WAIT` come within the connection's command timeout (the store's,
 * plus the acknowledgement timeout), so a step waits at most twice that (a batch out, then
 * its own).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
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

interface Step {
  readonly operation: string
  readonly send: (connection: Redis) => Promise<unknown>
  readonly needsAck: (reply: unknown) => boolean
  readonly resume: (outcome: Effect.Effect<unknown, AcknowledgedError>) => void
  /** Its caller went away before it was sent: it is not sent. */
  withdrawn: boolean
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

/** @internal */
export const make = (
  endpoint: Endpoint,
  settings: Settings,
  health: Health
): Effect.Effect<Acknowledged, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { commandTimeoutMs, replicas, timeoutMs } = settings
    // A WAIT takes up to its timeout to answer: the replies on this connection get that much more.
    const connectionSettings = { ...settings, commandTimeoutMs: commandTimeoutMs + timeoutMs }
    const connection = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const opened = openConnection(endpoint, connectionOptions("acknowledged", connectionSettings), health.onError)
        defineAll(opened, Scripts.all, singleServer)
        health.track(opened, "acknowledged")
        return opened
      }),
      (opened) => closeConnection(opened, connectionSettings.commandTimeoutMs)
    )
    const mapError = (operation: string) => toStoreError(endpoint, operation)

    let waiting: Array<Step> = []
    let out = false
    let scheduled = false

    /** Settle the steps that wrote by what a WAIT reported. */
    const settle = (steps: ReadonlyArray<Written>, waited: Waited) => {
      for (const { reply, step } of steps) {
        if (!waited.ok) {
          step.resume(
            Effect.fail(
              demoted(waited.cause)
                ? new NotAcknowledged({ operation: step.operation, acknowledged: 0, required: replicas, timeoutMs })
                : mapError(step.operation)(waited.cause)
            )
          )
          continue
        }
        step.resume(
          waited.count >= replicas
            ? Effect.succeed(reply)
            : Effect.fail(
                new NotAcknowledged({
                  operation: step.operation,
                  acknowledged: waited.count,
                  required: replicas,
                  timeoutMs
                })
              )
        )
      }
    }

    const sendBatch = () => {
      scheduled = false
      if (out) return
      const batch = waiting.filter((step) => !step.withdrawn)
      waiting = []
      if (batch.length === 0) return
      out = true
      // Whether the WAIT after the batch has answered. A step whose reply comes after it was
      // written after it too (ioredis sends a script's EVAL once its EVALSHA is answered
      // NOSCRIPT, as on a primary just promoted): another WAIT covers it.
      let answered = false
      const replies = batch.map((step): Promise<Written | undefined> => {
        let sent: Promise<unknown>
        try {
          sent = step.send(connection)
        } catch (cause) {
          sent = Promise.reject(cause)
        }
        return sent.then(
          (reply) => {
            if (step.needsAck(reply)) return { step, reply, late: answered }
            step.resume(Effect.succeed(reply))
            return undefined
          },
          (cause) => {
            step.resume(Effect.fail(mapError(step.operation)(cause)))
            return undefined
          }
        )
      })
      // Taken through one promise more than a plain command's reply: a script's reply
      // reaches `then` one promise later (ioredis chains its NOSCRIPT fallback onto it), so
      // a step whose reply came in the same read as the WAIT's, before it, is seen before it
      // (else it would count as late, and wait for one more WAIT, past the timeout's bound
      // when its replicas are slow). A step resent after NOSCRIPT comes later still: its
      // reply is read after the WAIT's, and passes through the fallback's promise too.
      const wait = (): Promise<Waited> =>
        connection
          .wait(replicas, timeoutMs)
          .then((count) => count)
          .then(
            (count): Waited => {
              answered = true
              return { ok: true, count: typeof count === "number" ? count : 0 }
            },
            (cause): Waited => {
              answered = true
              return { ok: false, cause }
            }
          )
      const first = wait()
      Promise.all(replies)
        .then(async (outcomes) => {
          const written = outcomes.filter((outcome): outcome is Written => outcome !== undefined)
          const waited = await first
          settle(
            written.filter((outcome) => !outcome.late),
            waited
          )
          const late = written.filter((outcome) => outcome.late)
          if (late.length > 0) settle(late, waited.ok ? await wait() : waited)
        })
        .finally(() => {
          out = false
          sendBatch()
        })
    }

    const run = (
      operation: string,
      send: (connection: Redis) => Promise<unknown>,
      needsAck: (reply: unknown) => boolean
    ): Effect.Effect<unknown, AcknowledgedError> => {
      const enqueue = Effect.callback<unknown, AcknowledgedError>((resume) => {
        const step: Step = { operation, send, needsAck, resume, withdrawn: false }
        waiting.push(step)
        // The steps issued in the same tick go in one batch.
        if (!out && !scheduled) {
          scheduled = true
          queueMicrotask(sendBatch)
        }
        return Effect.sync(() => {
          step.withdrawn = true
        })
      })
      return Effect.suspend(() =>
        connection.status === "ready"
          ? enqueue
          : Effect.andThen(
              awaitReady(connection, commandTimeoutMs, health.notConnected(operation, commandTimeoutMs)),
              enqueue
            )
      )
    }

    return {
      run,
      connected: (connectTimeoutMs, onTimeout) => awaitReady(connection, connectTimeoutMs, onTimeout)
    }
  })
