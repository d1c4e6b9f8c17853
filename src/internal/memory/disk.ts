/**
 * The disk copy of the embedded store (`dataDir`). Each token with live slices has one file
 * holding its slices and its fencing counter, each with its absolute expiry time, so a
 * restarted process neither loses a token nor brings back one that expired meanwhile.
 *
 * A change is written one flush interval after the first change that made the token
 * dirty, so a burst of modifications costs one write. A file is replaced atomically: the
 * new content goes to a temp file in the same directory, is synced, then renamed over the
 * old one; a crash leaves the old file or the new one, and at worst a temp file that the
 * next load deletes unread.
 *
 * @internal
 */
import * as fs from "node:fs/promises"
import * as path from "node:path"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as PubSub from "effect/PubSub"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import { DataDirError } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import { tokenProblem } from "../validate.js"
import {
  fileStem,
  format,
  InUse,
  lockFile,
  persistedName,
  readTokenFile,
  reasonOf,
  type TokenFile,
  takeLock,
  tempFile,
  tokenFile,
  writeFile
} from "./disk/files.js"
import { isExpired, type Keyspace } from "./keyspace.js"

/**
 * What one flush of the data directory did, by token: files written, files removed (the
 * token expired), and writes that failed (retried by a later flush). `MemoryStore`
 * re-exports it.
 *
 * @internal
 */
export interface FlushReport {
  readonly written: ReadonlyArray<string>
  readonly removed: ReadonlyArray<string>
  readonly failed: ReadonlyArray<string>
}

/** @internal */
export interface Options {
  /** As configured; resolved to an absolute path once, so a later `chdir` does not move it. */
  readonly dir: string
  readonly keys: Keys
  readonly flushInterval: Duration.Duration
  readonly reports: PubSub.PubSub<FlushReport>
}

/** @internal */
export const filesWritten = Metric.counter("leasehold_memory_files_written_total", { incremental: true })

/** @internal */
export const filesRemoved = Metric.counter("leasehold_memory_files_removed_total", { incremental: true })

/** @internal */
export const fileWriteFailures = Metric.counter("leasehold_memory_file_failures_total", { incremental: true })

/** After a flush that failed, wait at least this long before the next try: a full disk is not retried in a tight loop. */
const failureBackoff = Duration.seconds(1)

interface Job {
  readonly token: string
  /** `undefined`: nothing of the token is left, its file goes. */
  readonly content: string | undefined
}

type Outcome = Result.Result<Job, readonly [Job, string]>

/** What `attach` keeps for one directory, from the load to the last flush. */
interface Writer {
  readonly ks: Keyspace
  readonly options: Options
  /** `options.dir`, resolved. */
  readonly dir: string
  readonly fullKey: (token: string, name: string) => string
  readonly fileOf: (token: string) => string
  /** Token → names (`fence`, `s:<slice>`) of its keys that may be live; pruned at each flush. */
  readonly index: Map<string, Set<string>>
  dirty: Set<string>
  wake: Deferred.Deferred<void>
  /** A run of failed flushes is under way (it was warned of). */
  failing: boolean
}

const markDirty = (w: Writer, token: string) => {
  w.dirty.add(token)
  Deferred.doneUnsafe(w.wake, Effect.void)
}

/** Load the directory's files (`names`) into the keyspace. */
const load = (w: Writer, names: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const { ks, dir, fullKey, fileOf, index } = w
    // A temp file is a write that a crash cut short: the file it was to replace still holds
    // the last complete state, so the temp file is removed unread.
    yield* Effect.forEach(
      names.filter((name) => tempFile.test(name)),
      (name) => Effect.promise(() => fs.rm(path.join(dir, name), { force: true }).catch(() => undefined)),
      { concurrency: 16, discard: true }
    )

    const files = yield* Effect.forEach(
      names.filter((name) => tokenFile.test(name)),
      (name) => readTokenFile(dir, name),
      { concurrency: 16 }
    )

    const now = yield* Clock.currentTimeMillis
    const expired: Array<string> = []
    for (const file of files) {
      if (file === undefined) continue
      const live = new Set<string>()
      for (const [name, stored] of Object.entries(file.keys)) {
        if (stored.expiresAt !== null && stored.expiresAt <= now) continue
        ks.setString(fullKey(file.token, name), stored.value, stored.expiresAt ?? undefined)
        live.add(name)
      }
      if (live.size === 0) expired.push(file.token)
      else {
        index.set(file.token, live)
        // Some keys expired while the process was down: rewrite the file without them.
        if (live.size < Object.keys(file.keys).length) markDirty(w, file.token)
      }
    }
    // Expired while the process was down: never loaded, and its file goes now.
    yield* Effect.forEach(
      expired,
      (token) => Effect.promise(() => fs.rm(fileOf(token), { force: true }).catch(() => undefined)),
      { concurrency: 16, discard: true }
    )
    if (expired.length > 0) yield* Metric.update(filesRemoved, expired.length)
  })

/** `ks.onKeyChanged`: a change of a key that the token's file holds, or would, makes the token dirty. */
const keyChanged = (w: Writer, key: string, present: boolean) => {
  const { options, index } = w
  const parts = options.keys.tokenKey(key)
  if (parts === undefined) return
  const [token, name] = parts
  if (name !== "fence" && !name.startsWith("s:")) return
  let live = index.get(token)
  if (present) {
    // Only keys a load would accept are written (a raw key planted by a test may not be).
    if (live === undefined) {
      if (tokenProblem(token) !== undefined || !persistedName(name)) return
      live = new Set()
      index.set(token, live)
    } else if (!persistedName(name)) return
    live.add(name)
  } else if (live?.has(name) !== true) return
  markDirty(w, token)
}

/** The token's file content now, in one synchronous step: never half of a commit. */
const snapshot = (w: Writer, token: string, at: number): Job => {
  const { ks, fullKey, index } = w
  const live = index.get(token)
  const keys: Record<string, { value: string; expiresAt: number | null }> = {}
  for (const name of Array.from(live ?? []).sort()) {
    const entry = ks.entries.get(fullKey(token, name))
    if (entry === undefined || entry._tag !== "string" || isExpired(entry, at)) {
      live?.delete(name)
      continue
    }
    keys[name] = { value: entry.value, expiresAt: entry.deadline ?? null }
  }
  if (live === undefined || live.size === 0) {
    index.delete(token)
    return { token, content: undefined }
  }
  return { token, content: JSON.stringify({ format, token, keys } satisfies TokenFile) }
}

const perform = (w: Writer, job: Job): Effect.Effect<Outcome> => {
  const file = w.fileOf(job.token)
  const { content } = job
  return Effect.tryPromise(() =>
    content === undefined ? fs.rm(file, { force: true }) : writeFile(file, content)
  ).pipe(
    Effect.match({
      onFailure: (error): Outcome => Result.fail([job, `${file}: ${reasonOf(error.cause)}`] as const),
      onSuccess: (): Outcome => Result.succeed(job)
    })
  )
}

/** Write every dirty token; `false` when a write failed (the token stays dirty). */
const flush = (w: Writer): Effect.Effect<boolean> =>
  Effect.uninterruptible(
    Effect.gen(function* () {
      const { options, dir } = w
      const at = yield* Clock.currentTimeMillis
      const jobs = yield* Effect.sync(() => {
        const batch = w.dirty
        w.dirty = new Set()
        w.wake = Deferred.makeUnsafe<void>()
        return Array.from(batch, (token) => snapshot(w, token, at))
      })
      if (jobs.length === 0) return true
      const outcomes = yield* Effect.forEach(jobs, (job) => perform(w, job), { concurrency: 8 })
      const written: Array<string> = []
      const removed: Array<string> = []
      const failed: Array<readonly [Job, string]> = []
      for (const outcome of outcomes) {
        if (Result.isFailure(outcome)) failed.push(outcome.failure)
        else (outcome.success.content === undefined ? removed : written).push(outcome.success.token)
      }
      yield* Metric.update(filesWritten, written.length)
      yield* Metric.update(filesRemoved, removed.length)
      if (failed.length > 0) {
        yield* Metric.update(fileWriteFailures, failed.length)
        // A failed token is dirty again: its latest state is written by a later flush.
        for (const [job] of failed) markDirty(w, job.token)
        // One line per run of failures, not one per file and flush.
        if (!w.failing) {
          yield* Effect.logWarning(
            `MemoryStore: could not write ${failed.length} of ${jobs.length} token files in ${dir}, retrying: ${failed[0]![1]}`
          )
        }
        w.failing = true
      } else if (w.failing) {
        w.failing = false
        yield* Effect.logInfo(`MemoryStore: writing token files in ${dir} works again`)
      }
      yield* PubSub.publish(options.reports, {
        written,
        removed,
        failed: failed.map(([job]) => job.token)
      })
      return failed.length === 0
    })
  )

/**
 * Load the directory into `ks`, then follow every change of a token's slices or fencing
 * counter and write it back. The last flush runs when the scope closes.
 *
 * @internal
 */
export const attach = (ks: Keyspace, options: Options): Effect.Effect<void, DataDirError, Scope.Scope> =>
  Effect.gen(function* () {
    const dir = path.resolve(options.dir)
    const fullKey = (token: string, name: string) => `${options.keys.tokenHead(token)}${name}`
    const fileOf = (token: string) => path.join(dir, `${fileStem(token)}.json`)

    const prepare = <A>(operation: DataDirError["operation"], run: () => Promise<A>) =>
      Effect.tryPromise({
        try: run,
        catch: (cause) =>
          new DataDirError({
            path: dir,
            operation: cause instanceof InUse ? "lock" : operation,
            reason: reasonOf(cause),
            cause
          })
      })

    yield* prepare("create", () => fs.mkdir(dir, { recursive: true }))
    // Writing the lock file also refuses a read-only directory now, rather than at the first flush.
    const lock = path.join(dir, lockFile)
    yield* Effect.acquireRelease(
      prepare("write", () => takeLock(lock)),
      () => Effect.promise(() => fs.rm(lock, { force: true }).catch(() => undefined))
    )
    const names = yield* prepare("list", () => fs.readdir(dir))

    const w: Writer = {
      ks,
      options,
      dir,
      fullKey,
      fileOf,
      index: new Map(),
      dirty: new Set(),
      wake: Deferred.makeUnsafe<void>(),
      failing: false
    }
    yield* load(w, names)

    // Installed after the load, so that loading does not mark every token dirty.
    ks.onKeyChanged = (key, present) => keyChanged(w, key, present)

    const flushAll = flush(w)

    const step = Effect.gen(function* () {
      yield* Effect.suspend(() => Deferred.await(w.wake))
      yield* Effect.sleep(options.flushInterval)
      if (!(yield* flushAll)) yield* Effect.sleep(failureBackoff)
    })

    // Added before the loop is forked, so it runs after the loop is interrupted (scope
    // finalizers run in reverse): the loop's flush in progress completes, then this one
    // writes whatever is still pending.
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(flushAll, (ok) =>
        ok ? Effect.void : Effect.logWarning(`MemoryStore: token files left unwritten in ${dir} at shutdown`)
      )
    )
    yield* Effect.forkScoped(Effect.interruptible(Effect.forever(step)))
  })
