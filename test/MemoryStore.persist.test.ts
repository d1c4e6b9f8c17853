import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as TestClock from "effect/testing/TestClock"
import { makeKeys } from "../src/internal/keys.js"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as StateManager from "../src/StateManager.js"
import { Store } from "../src/Store.js"
import * as Worker from "../src/Worker.js"
import { expectAcquired, failsWith, within } from "./conformance/helpers.js"
import * as Logs from "./support/logs.js"
import { untilReal } from "./support/poll.js"
import { pendingSleeps } from "./support/testClock.js"

const INTERVAL_MS = 100
const TOKEN_EXPIRATION_MS = 60_000

/** A fresh directory, removed with the test's scope. */
const tempDir: Effect.Effect<string, never, Scope.Scope> = Effect.acquireRelease(
  Effect.promise(() => fs.mkdtemp(path.join(os.tmpdir(), "leasehold-persist-"))),
  (dir) => Effect.promise(() => fs.rm(dir, { recursive: true, force: true }))
)

const configFor = (dir: string, input: LeaseholdConfig.Input = {}) =>
  LeaseholdConfig.layer({
    dataDir: Option.some(dir),
    lockExpiration: "1 second",
    lockWarningThreshold: "500 millis",
    tokenExpiration: TOKEN_EXPIRATION_MS,
    dataFlushInterval: INTERVAL_MS,
    ...input
  })

interface Session {
  readonly store: Store.Service
  readonly control: MemoryStore.MemoryStoreControl.Service
}

/** One life of the store over `dir`: built, used by `body`, then shut down (which flushes). */
const session = <A, E>(dir: string, body: (session: Session) => Effect.Effect<A, E, Scope.Scope>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provide(configFor(dir))))
      return yield* body({
        store: Context.get(context, Store),
        control: Context.get(context, MemoryStore.MemoryStoreControl)
      })
    })
  )

let lockIds = 0

/** Take the lock, write the slices, release: one modification as the state manager makes it. */
const put = (store: Store.Service, token: string, entries: ReadonlyArray<readonly [string, string]>) =>
  Effect.gen(function* () {
    const lockId = `L${++lockIds}`
    yield* expectAcquired(store.tryAcquire(token, lockId, []))
    yield* store.commitAndRelease(token, lockId, entries)
  })

const fileOf = (dir: string, token: string) =>
  path.join(dir, `${createHash("sha256").update(token).digest("hex")}.json`)

const listDir = (dir: string) => Effect.promise(() => fs.readdir(dir).then((names) => names.sort()))

const tokenFiles = (dir: string) => Effect.map(listDir(dir), (names) => names.filter((name) => name.endsWith(".json")))

const readJson = (file: string) => Effect.promise(() => fs.readFile(file, "utf8").then((raw) => JSON.parse(raw)))

const inode = (file: string) => Effect.promise(() => fs.stat(file).then((stat) => stat.ino))

const exists = (file: string) =>
  Effect.promise(() =>
    fs.stat(file).then(
      () => true,
      () => false
    )
  )

/**
 * Wait until a timer of the flush fiber, due within `ms`, is registered with the
 * `TestClock` (the fiber runs concurrently with the test): adjusting the clock before
 * that would not fire it.
 */
const awaitTimer = (ms: number) =>
  Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    yield* untilReal(
      `a timer due within ${ms} ms`,
      Effect.map(pendingSleeps, (deadlines) => deadlines.some((deadline) => deadline > now && deadline <= now + ms)),
      { within: 5_000 }
    )
  })

const awaitFlushTimer = awaitTimer(INTERVAL_MS)

/** Let the flush interval pass and return the report of the flush it fires. */
const nextFlush = (reports: PubSub.Subscription<MemoryStore.FlushReport>) =>
  Effect.gen(function* () {
    yield* awaitFlushTimer
    yield* TestClock.adjust(INTERVAL_MS)
    return yield* within("the flush report", 5_000, PubSub.take(reports))
  })

const sorted = (report: MemoryStore.FlushReport) => ({
  written: [...report.written].sort(),
  removed: [...report.removed].sort(),
  failed: [...report.failed].sort()
})

describe("MemoryStore with a data directory", () => {
  it.effect("a restart keeps every token's slices and its fencing counter, not its lock", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          yield* put(store, "t1", [
            ["a", '{"n":1}'],
            ["b", '"two"']
          ])
          yield* put(store, "t1", [["a", '{"n":2}']])
          yield* put(store, "t2", [["a", "3"]])
          // Held at shutdown: a lock belongs to a process and is not kept.
          yield* expectAcquired(store.tryAcquire("t2", "held", []))
        })
      )
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          deepStrictEqual(yield* store.readSlices("t1", ["a", "b", "c"]), [
            Option.some('{"n":2}'),
            Option.some('"two"'),
            Option.none()
          ])
          deepStrictEqual(yield* store.readSlices("t2", ["a"]), [Option.some("3")])
          deepStrictEqual(yield* store.holder("t2"), Option.none())
          // Two grants of t1 and two of t2 before the restart: the next ones are numbered after them.
          assert.strictEqual((yield* expectAcquired(store.tryAcquire("t1", "x", []))).fence, 3)
          assert.strictEqual((yield* expectAcquired(store.tryAcquire("t2", "x", []))).fence, 3)
        })
      )
    })
  )

  it.effect("a burst of writes is one file write, one interval after the first", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store, control }) =>
        Effect.gen(function* () {
          const reports = yield* control.flushReports
          yield* put(store, "t1", [["counter", "1"]])
          yield* awaitFlushTimer
          yield* TestClock.adjust(INTERVAL_MS / 2)
          yield* put(store, "t1", [["counter", "2"]])
          yield* put(store, "t1", [["counter", "3"]])
          yield* TestClock.adjust(INTERVAL_MS / 2 - 1)
          assert.strictEqual(yield* PubSub.remaining(reports), 0)
          deepStrictEqual(yield* tokenFiles(dir), [])

          yield* TestClock.adjust(1)
          const report = yield* within("the flush report", 5_000, PubSub.take(reports))
          deepStrictEqual(report, { written: ["t1"], removed: [], failed: [] })
          const file = yield* readJson(fileOf(dir, "t1"))
          assert.strictEqual(file.token, "t1")
          assert.strictEqual(file.keys["s:counter"].value, "3")
          assert.strictEqual(file.keys["s:counter"].expiresAt, INTERVAL_MS / 2 + TOKEN_EXPIRATION_MS)
          // Written through a temp file that was renamed: nothing but the lock is left beside it.
          deepStrictEqual(yield* listDir(dir), [".leasehold.lock", path.basename(fileOf(dir, "t1"))])

          // Nothing changed since: no timer, no write.
          yield* TestClock.adjust(10 * INTERVAL_MS)
          assert.strictEqual(yield* PubSub.remaining(reports), 0)
        })
      )
    })
  )

  it.effect("only the tokens that changed are rewritten", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store, control }) =>
        Effect.gen(function* () {
          const reports = yield* control.flushReports
          yield* put(store, "t1", [["a", "1"]])
          yield* put(store, "t2", [["a", "1"]])
          deepStrictEqual(sorted(yield* nextFlush(reports)), { written: ["t1", "t2"], removed: [], failed: [] })
          const before = { t1: yield* inode(fileOf(dir, "t1")), t2: yield* inode(fileOf(dir, "t2")) }

          yield* put(store, "t1", [["a", "2"]])
          deepStrictEqual(yield* nextFlush(reports), { written: ["t1"], removed: [], failed: [] })
          // A rewrite renames a new file over the old one; t2's file is the very same file.
          assert.notStrictEqual(yield* inode(fileOf(dir, "t1")), before.t1)
          assert.strictEqual(yield* inode(fileOf(dir, "t2")), before.t2)
        })
      )
    })
  )

  it.effect("a read that renews a token's expiry is written, so a restart keeps the renewed expiry", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store, control }) =>
        Effect.gen(function* () {
          const reports = yield* control.flushReports
          yield* put(store, "t1", [["a", "1"]])
          yield* nextFlush(reports)
          yield* TestClock.adjust(40_000)
          yield* store.readSlices("t1", ["a"])
          deepStrictEqual(yield* nextFlush(reports), { written: ["t1"], removed: [], failed: [] })
        })
      )
      // 40 s after the read, 80 s after the write: idle for less than the token expiration.
      yield* TestClock.adjust(40_000)
      yield* session(dir, ({ store }) =>
        Effect.map(store.readSlices("t1", ["a"]), (values) => deepStrictEqual(values, [Option.some("1")]))
      )
    })
  )

  it.effect("shutdown writes the changes still waiting for their interval", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          yield* put(store, "t1", [["a", "1"]])
          yield* put(store, "t2", [["a", "2"]])
          deepStrictEqual(yield* tokenFiles(dir), [])
        })
      )
      assert.isTrue(yield* exists(fileOf(dir, "t1")))
      assert.isTrue(yield* exists(fileOf(dir, "t2")))
      assert.strictEqual(yield* Clock.currentTimeMillis, 0)
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          deepStrictEqual(yield* store.readSlices("t1", ["a"]), [Option.some("1")])
          deepStrictEqual(yield* store.readSlices("t2", ["a"]), [Option.some("2")])
        })
      )
    })
  )

  it.effect("a write that fails is logged once and retried until it succeeds", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const logs = Logs.capture()
      yield* Logs.withCapture(
        logs,
        session(dir, ({ store, control }) =>
          Effect.gen(function* () {
            const reports = yield* control.flushReports
            // A non-empty directory where t1's file goes: the rename over it fails.
            const blocker = fileOf(dir, "t1")
            yield* Effect.promise(() => fs.mkdir(blocker).then(() => fs.writeFile(path.join(blocker, "x"), "")))
            yield* put(store, "t1", [["a", "1"]])
            yield* put(store, "t2", [["a", "2"]])
            deepStrictEqual(sorted(yield* nextFlush(reports)), { written: ["t2"], removed: [], failed: ["t1"] })
            deepStrictEqual(yield* tokenFiles(dir), [path.basename(fileOf(dir, "t2")), path.basename(blocker)].sort())
            assert.isFalse(yield* exists(`${blocker}.tmp`))

            // Still failing one backoff later: retried, not logged again.
            yield* awaitTimer(1_000)
            yield* TestClock.adjust(1_000)
            deepStrictEqual(yield* nextFlush(reports), { written: [], removed: [], failed: ["t1"] })

            yield* Effect.promise(() => fs.rm(blocker, { recursive: true }))
            yield* awaitTimer(1_000)
            yield* TestClock.adjust(1_000)
            deepStrictEqual(yield* nextFlush(reports), { written: ["t1"], removed: [], failed: [] })
            assert.strictEqual((yield* readJson(blocker)).keys["s:a"].value, "1")
          })
        )
      )
      const lines = Logs.atLevels(logs.lines)
      assert.strictEqual(lines.length, 2, JSON.stringify(lines))
      assert.strictEqual(lines[0]!.level, "WARN")
      assert.include(lines[0]!.message, `could not write 1 of 2 token files in ${dir}, retrying: ${fileOf(dir, "t1")}`)
      deepStrictEqual(lines[1], { level: "INFO", message: `MemoryStore: writing token files in ${dir} works again` })
    })
  )

  it.effect("a temp file left by a crash is ignored on load and removed", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store }) => put(store, "t1", [["a", '"old"']]))
      // A crash during the next write: the temp file holds the start of the new content.
      const complete = yield* Effect.promise(() => fs.readFile(fileOf(dir, "t1"), "utf8"))
      const partial = complete.replace('"old"', '"new"').slice(0, complete.length - 20)
      yield* Effect.promise(() => fs.writeFile(`${fileOf(dir, "t1")}.tmp`, partial))

      const logs = Logs.capture()
      yield* Logs.withCapture(
        logs,
        session(dir, ({ store }) =>
          Effect.gen(function* () {
            deepStrictEqual(yield* store.readSlices("t1", ["a"]), [Option.some('"old"')])
            deepStrictEqual(yield* listDir(dir), [".leasehold.lock", path.basename(fileOf(dir, "t1"))])
          })
        )
      )
      deepStrictEqual(Logs.atLevels(logs.lines, ["ERROR", "WARN"]), [])
    })
  )

  it.effect("a corrupt or unreadable file: one warning naming it, every other token loads", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const tokens = ["good", "notJson", "wrongShape", "wrongName", "badFence", "badKey"]
      yield* session(dir, ({ store }) =>
        Effect.forEach(tokens, (token) => put(store, token, [["a", `"${token}"`]]), { discard: true })
      )
      const write = (token: string, content: string) => Effect.promise(() => fs.writeFile(fileOf(dir, token), content))
      const original = (token: string) => readJson(fileOf(dir, token))
      yield* write("notJson", '{"format":"leasehold.token/1","tok')
      yield* write("wrongShape", JSON.stringify({ format: "leasehold.token/1", token: "wrongShape", keys: [] }))
      // A complete file of another token under this token's name.
      yield* write("wrongName", JSON.stringify(yield* original("good")))
      const fence = yield* original("badFence")
      fence.keys.fence.value = "many"
      yield* write("badFence", JSON.stringify(fence))
      const key = yield* original("badKey")
      key.keys.lock = { value: "L", expiresAt: null }
      yield* write("badKey", JSON.stringify(key))
      // Unreadable: a directory where a token file should be.
      const unreadable = fileOf(dir, "unreadable")
      yield* Effect.promise(() => fs.mkdir(unreadable))
      // Not a token file name: not the store's, never read.
      yield* Effect.promise(() => fs.writeFile(path.join(dir, "notes.txt"), "hello"))

      const logs = Logs.capture()
      yield* Logs.withCapture(
        logs,
        session(dir, ({ store }) =>
          Effect.gen(function* () {
            deepStrictEqual(yield* store.readSlices("good", ["a"]), [Option.some('"good"')])
            for (const token of tokens.slice(1)) {
              deepStrictEqual(yield* store.readSlices(token, ["a"]), [Option.none()], token)
            }
          })
        )
      )
      const warnings = Logs.atLevels(logs.lines, ["ERROR", "WARN"])
      const named = [...tokens.slice(1), "unreadable"].map((token) => fileOf(dir, token))
      assert.strictEqual(warnings.length, named.length, JSON.stringify(warnings))
      for (const file of named) {
        assert.strictEqual(warnings.filter((line) => line.message.includes(file)).length, 1, file)
      }
      assert.isTrue(warnings.every((line) => line.level === "WARN"))
      // Left in place for the user to look at.
      assert.isTrue(yield* exists(fileOf(dir, "notJson")))
    })
  )

  it.effect("a token that expired while the store was down is not loaded and its file is removed", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          yield* put(store, "old", [["a", "1"]])
          yield* TestClock.adjust(TOKEN_EXPIRATION_MS / 2)
          yield* put(store, "young", [["a", "2"]])
        })
      )
      deepStrictEqual((yield* tokenFiles(dir)).length, 2)
      yield* TestClock.adjust(TOKEN_EXPIRATION_MS / 2)
      yield* session(dir, ({ store, control }) =>
        Effect.gen(function* () {
          deepStrictEqual(yield* store.readSlices("old", ["a"]), [Option.none()])
          deepStrictEqual(yield* store.readSlices("young", ["a"]), [Option.some("2")])
          assert.isFalse(yield* exists(fileOf(dir, "old")))
          deepStrictEqual(yield* tokenFiles(dir), [path.basename(fileOf(dir, "young"))])
          // Neither its slices nor its fence came back: its grants start again.
          assert.strictEqual((yield* expectAcquired(store.tryAcquire("old", "x", []))).fence, 1)
          assert.strictEqual(yield* control.keyCount, 4)
        })
      )
    })
  )

  it.effect("a token that expires while the store runs has its file removed", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store, control }) =>
        Effect.gen(function* () {
          const reports = yield* control.flushReports
          yield* put(store, "t1", [["a", "1"]])
          yield* nextFlush(reports)
          assert.isTrue(yield* exists(fileOf(dir, "t1")))
          // The sweeper removes the token's keys at their deadline; that change is flushed too.
          yield* TestClock.adjust(TOKEN_EXPIRATION_MS - INTERVAL_MS)
          assert.strictEqual(yield* Clock.currentTimeMillis, TOKEN_EXPIRATION_MS)
          deepStrictEqual(yield* nextFlush(reports), { written: [], removed: ["t1"], failed: [] })
          deepStrictEqual(yield* tokenFiles(dir), [])
        })
      )
    })
  )

  it.effect("file names are safe for every valid token; each token keeps its own file", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const tokens = ["a:b", ".", "..", "Abc", "abc", "-_.:", "X".repeat(128)]
      yield* session(dir, ({ store }) =>
        Effect.forEach(tokens, (token, i) => put(store, token, [["a", String(i)]]), { discard: true })
      )
      const names = yield* tokenFiles(dir)
      assert.strictEqual(names.length, tokens.length)
      assert.isTrue(names.every((name) => /^[0-9a-f]{64}\.json$/.test(name)))
      yield* session(dir, ({ store }) =>
        Effect.forEach(
          tokens,
          (token, i) =>
            Effect.map(store.readSlices(token, ["a"]), (values) => deepStrictEqual(values, [Option.some(String(i))])),
          { discard: true }
        )
      )
    })
  )

  it.effect("locks, queues, socket records and mailboxes belong to the process: they are not kept", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const keys = makeKeys("leasehold")
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          yield* put(store, "t1", [["a", "1"]])
          yield* store.claimSocket("t1", { instanceId: "w1", connectionId: "c1" })
          // w0 holds the lock by the queue's steps, w1 queues behind it
          yield* store.acquireQueued("t1", "w0:1", [], { instanceId: "w0" })
          yield* store.acquireQueued("t1", "w1:1", [], { instanceId: "w1" })
          yield* store.mailboxAppend("w1", "update", { maxLen: 10, ttlMs: 60_000 })
        })
      )
      yield* session(dir, ({ store, control }) =>
        Effect.gen(function* () {
          deepStrictEqual(yield* control.getRaw(keys.socket("t1")), Option.none())
          assert.isTrue(Option.isNone(yield* store.holder("t1")))
          deepStrictEqual(yield* store.queue("t1"), [])
          assert.strictEqual(yield* store.mailboxLength("w1"), 0)
          // The slice and the fence.
          assert.strictEqual(yield* control.keyCount, 2)
        })
      )
    })
  )

  it.effect("a data directory that cannot be created fails the build with DataDirError", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const file = path.join(dir, "a-file")
      yield* Effect.promise(() => fs.writeFile(file, ""))
      for (const target of [file, path.join(file, "below")]) {
        const error = yield* failsWith(
          session(target, () => Effect.void),
          "DataDirError"
        )
        assert.strictEqual(error._tag, "DataDirError")
        assert.strictEqual(error.path, target)
        assert.strictEqual(error.operation, "create")
        assert.include(error.message, `data directory ${target} cannot be used: could not create it`)
      }
    })
  )

  it.effect("a directory open in a store is refused to a second store, and unlocked at shutdown", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, () =>
        Effect.gen(function* () {
          const error = yield* failsWith(
            session(dir, () => Effect.void),
            "DataDirError"
          )
          assert.strictEqual(error._tag, "DataDirError")
          assert.strictEqual(error.operation, "lock")
          assert.strictEqual(
            error.message,
            `data directory ${dir} cannot be used: could not lock it: another store of this process has it open`
          )
        })
      )
      deepStrictEqual(yield* listDir(dir), [])
      yield* session(dir, () => Effect.void)
    })
  )

  it.effect("a lock left by a process that is gone is taken over", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      yield* session(dir, ({ store }) => put(store, "t1", [["a", "1"]]))
      // Far above any pid the kernel hands out.
      yield* Effect.promise(() => fs.writeFile(path.join(dir, ".leasehold.lock"), "999999999"))
      yield* session(dir, ({ store }) =>
        Effect.gen(function* () {
          deepStrictEqual(yield* store.readSlices("t1", ["a"]), [Option.some("1")])
          const owner = yield* Effect.promise(() => fs.readFile(path.join(dir, ".leasehold.lock"), "utf8"))
          assert.strictEqual(owner, String(process.pid))
        })
      )
    })
  )

  it.effect("a relative data directory is resolved once, against the working directory at build", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const relative = path.relative(process.cwd(), path.join(dir, "nested", "state"))
      yield* session(relative, ({ store }) => put(store, "t1", [["a", "1"]]))
      assert.isTrue(yield* exists(fileOf(path.join(dir, "nested", "state"), "t1")))
    })
  )
})

describe("StateManager over a persisted MemoryStore", () => {
  const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })

  const bump = Effect.flatMap(StateManager.StateManager, (states) =>
    states.modify("tab-1", Counter, (s) => [s.n + 1, { n: s.n + 1 }] as const)
  )

  const run = (env: Record<string, string>) =>
    Effect.provide(bump, Worker.layerStateFromEnv).pipe(
      Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
    )

  it.effect("a counter survives two builds of layerStateFromEnv (LEASEHOLD_DATA_DIR)", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      assert.strictEqual(yield* run({ LEASEHOLD_DATA_DIR: dir }), 1)
      assert.strictEqual(yield* run({ LEASEHOLD_DATA_DIR: dir }), 2)
      assert.strictEqual(yield* run({ LEASEHOLD_DATA_DIR: dir }), 3)
    })
  )

  it.effect("a leased modification acknowledged from memory is flushed by the lease, then by the store", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const env = { LEASEHOLD_DATA_DIR: dir, LEASEHOLD_OPLOCK: "true", LEASEHOLD_LEASE_DURABILITY: "memory" }
      const bumpUnflushed = Effect.gen(function* () {
        const n = yield* bump
        // Still only in the lease's memory: the store receives it when the worker shuts down.
        deepStrictEqual(yield* Effect.flatMap(Store, (store) => store.readSlices("tab-1", ["counter"])), [
          n === 1 ? Option.none() : Option.some(JSON.stringify({ n: n - 1 }))
        ])
        return n
      })
      const runLeased = Effect.provide(bumpUnflushed, Worker.layerStateFromEnv).pipe(
        Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))
      )
      assert.strictEqual(yield* runLeased, 1)
      assert.strictEqual(yield* runLeased, 2)
      assert.strictEqual(yield* run(env), 3)
    })
  )

  it.effect("without a data directory nothing is kept", () =>
    Effect.gen(function* () {
      assert.strictEqual(yield* run({}), 1)
      assert.strictEqual(yield* run({}), 1)
    })
  )
})
