/** The counter app: `npm start` (README.md). One process on `PORT`, or with `WORKERS=N` (and Redis) N of them. */
import cluster from "node:cluster"
import * as Cause from "effect/Cause"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { runMain } from "leasehold/NodeMain"
import { ClusterNeedsRedis, loadSettings } from "./AppConfig.js"
import * as Cluster from "./Cluster.js"
import * as Server from "./Server.js"

const program = Effect.gen(function* () {
  const settings = yield* loadSettings
  if (settings.workers > 1 && !settings.redis) return yield* new ClusterNeedsRedis({ workers: settings.workers })
  if (settings.workers > 1 && cluster.isPrimary) return yield* Cluster.primary(settings)
  if (cluster.isWorker) {
    // A primary that died without stopping us: shut down gracefully rather than linger.
    // Node ends a worker at once on a disconnect it did not expect, after this listener:
    // marked as expected, the worker runs its shutdown (leases written, records removed).
    const self = cluster.worker!
    self.once("disconnect", () => {
      self.exitedAfterDisconnect = true
      process.kill(process.pid, "SIGTERM")
    })
  }
  return yield* Layer.launch(Server.layer(settings))
})

const messageOf = (error: unknown): string => {
  if (error instanceof Config.ConfigError) return String(error)
  if (typeof error !== "object" || error === null) return String(error)
  const message = "message" in error ? String(error.message) : ""
  // A failed listen (EADDRINUSE) carries its reason in the cause.
  if (message === "" && "cause" in error && error.cause !== undefined) return messageOf(error.cause)
  return message === "" ? String(error) : message
}

/** The one line a failed start prints: the error's message, not a stack. */
const reason = (cause: Cause.Cause<unknown>): string =>
  Option.match(Cause.findErrorOption(cause), { onNone: () => Cause.pretty(cause), onSome: messageOf })

// The first SIGINT or SIGTERM starts the graceful shutdown (sockets closed, leases written,
// records removed); later ones (npm forwarding a Ctrl-C, a signal to the whole group) do
// not cut it short, and LEASEHOLD_SHUTDOWN_TIMEOUT_MS (10 s) bounds it. The same holds in
// every mode: one process, a cluster primary, a cluster worker. A primary of workers waits
// for theirs: its own deadline comes after.
const forksWorkers =
  cluster.isPrimary && Option.exists(Effect.runSync(Effect.option(loadSettings)), (settings) => settings.workers > 1)
runMain(
  program.pipe(
    Effect.tapCause((cause) =>
      Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.logError(`counter: ${reason(cause)}`)
    )
  ),
  { disableErrorReporting: true, ...(forksWorkers ? Cluster.primaryOptions() : {}) }
)
