/**
 * `WORKERS=N`: the primary forks N workers with `node:cluster`, sharing the port, each a full
 * app worker on the same Redis. A worker that dies before listening fails the start (a bad
 * setting would fail every try); one that dies later is replaced. On SIGTERM or SIGINT the
 * primary sends each worker SIGTERM and exits once all have; one still running 1 s past its
 * deadline (`LEASEHOLD_SHUTDOWN_TIMEOUT_MS`, 10 s) is killed; the primary's is 2 s later.
 */
import cluster, { type Worker } from "node:cluster"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as NodeMain from "leasehold/NodeMain"
import type { AppSettings } from "./AppConfig.js"

/** A worker exited before it listened: the app cannot start. */
export class WorkerStartFailed extends Data.TaggedError("WorkerStartFailed")<{
  readonly pid: number | undefined
  readonly code: number | null
  readonly signal: string | null
}> {
  override get message(): string {
    return `a worker (pid ${this.pid}) exited before listening (code ${this.code}, signal ${this.signal}); its log above says why`
  }
}

/** The deadline each worker applies to its shutdown (`LEASEHOLD_SHUTDOWN_TIMEOUT_MS`, 10 s). */
const workerDeadline = (): Duration.Duration =>
  Effect.runSync(Effect.orElseSucceed(NodeMain.shutdownTimeout(), () => NodeMain.defaultShutdownTimeout))

/**
 * The primary's `runMain` options: its deadline is its workers' plus 2 s, so that it waits
 * for them (and kills the ones still running 1 s after theirs) before it exits. With a bad
 * `LEASEHOLD_SHUTDOWN_TIMEOUT_MS`, nothing: `runMain` reports it.
 */
export const primaryOptions = (): NodeMain.RunMainOptions =>
  Effect.runSync(
    Effect.match(NodeMain.shutdownTimeout(), {
      onFailure: () => ({}),
      onSuccess: (timeout) => ({ shutdownTimeout: Duration.sum(timeout, Duration.seconds(2)) })
    })
  )

type Event =
  | { readonly _tag: "listening"; readonly worker: Worker }
  | { readonly _tag: "exit"; readonly worker: Worker; readonly code: number | null; readonly signal: string | null }

/** Run the primary: fork, watch and finally stop the workers. Ends only by interruption or a failed start. */
export const primary = (settings: AppSettings) =>
  Effect.gen(function* () {
    const events = yield* Queue.unbounded<Event>()
    const listening = new Set<Worker>()
    const allExited = yield* Deferred.make<void>()
    let stopping = false

    const onListening = (worker: Worker) => Queue.offerUnsafe(events, { _tag: "listening", worker })
    const onExit = (worker: Worker, code: number | null, signal: string | null) => {
      Queue.offerUnsafe(events, { _tag: "exit", worker, code, signal })
      if (stopping && Object.keys(cluster.workers ?? {}).length === 0) Deferred.doneUnsafe(allExited, Effect.void)
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        cluster.on("listening", onListening)
        cluster.on("exit", onExit)
      }),
      () =>
        Effect.sync(() => {
          cluster.off("listening", onListening)
          cluster.off("exit", onExit)
        })
    )

    const fork = Effect.sync(() => cluster.fork())
    // Registered before the first fork: an interruption while workers start stops them too.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        stopping = true
        const workers = Object.values(cluster.workers ?? {}).filter((worker) => worker !== undefined)
        if (workers.length === 0) return
        yield* Effect.logInfo(`counter: stopping ${workers.length} workers`)
        for (const worker of workers) worker.process.kill("SIGTERM")
        // Each worker ends its own shutdown within its deadline from its first signal; one
        // that has not a second later (frozen) is killed, before the primary's own deadline.
        const grace = Duration.sum(workerDeadline(), Duration.seconds(1))
        const done = yield* Deferred.await(allExited).pipe(Effect.timeout(grace), Effect.option)
        if (done._tag === "None") {
          yield* Effect.logWarning(`counter: workers still running after ${Duration.format(grace)}: killing them`)
          for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill("SIGKILL")
        }
      })
    )

    for (let i = 0; i < settings.workers; i++) yield* fork
    while (listening.size < settings.workers) {
      const event = yield* Queue.take(events)
      if (event._tag === "listening") listening.add(event.worker)
      else
        return yield* new WorkerStartFailed({ pid: event.worker.process.pid, code: event.code, signal: event.signal })
    }
    yield* Effect.logInfo(`counter: ${settings.workers} workers listening on port ${settings.port}`)

    while (true) {
      const event = yield* Queue.take(events)
      if (event._tag === "listening") {
        listening.add(event.worker)
        continue
      }
      const wasListening = listening.delete(event.worker)
      yield* Effect.logWarning(
        `counter: worker pid ${event.worker.process.pid} exited (code ${event.code}, signal ${event.signal}); starting another`
      )
      // One that never listened is being replaced already: wait a moment so a crash loop stays slow.
      if (!wasListening) yield* Effect.sleep("1 second")
      yield* fork
    }
  }).pipe(Effect.scoped)
