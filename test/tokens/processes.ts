/**
 * A dead owner is not a duplicate, with real worker processes (`test/tokens/child.ts`) over
 * one store, a single redis-server or a Redis Cluster: a SIGKILLed owner's tab, linked
 * elsewhere one second later, keeps its token and its state; an owner SIGSTOPped longer than
 * the presence expiration loses its tab's record to the link elsewhere and, once resumed,
 * reports that socket lost and leaves the record alone. Each case is one body; a backend
 * says how a child reaches the store.
 */
import { assert } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import { spawnChild } from "../support/children.js"
import type { TokenCluster } from "./cluster.js"

const child = "test/tokens/child.ts"
export const presenceMs = 1_000

/** Workers of this process over a store, and the environment that puts a child on it. */
export interface ProcessBackend {
  readonly workers: (
    input: LeaseholdConfig.Input
  ) => Effect.Effect<{ readonly cluster: TokenCluster; readonly env: Record<string, string> }, never, Scope.Scope>
}

const childEnv = (env: Record<string, string>, token: string, count: number) => ({
  ...env,
  LEASEHOLD_PRESENCE_EXPIRATION_MS: String(presenceMs),
  LEASEHOLD_RETRY_JITTER: "false",
  TOKEN: token,
  COUNT: String(count)
})

export const killedOwnerTakenOver = (backend: ProcessBackend) =>
  Effect.gen(function* () {
    const { cluster, env } = yield* backend.workers({ presenceExpiration: presenceMs })
    const b = yield* cluster.worker()
    const owner = yield* spawnChild(child, childEnv(env, "tab-k", 5))
    const ownerId = (yield* owner.waitFor(/^linked /)).slice("linked ".length)
    yield* owner.waitFor(/^n 5$/)
    deepStrictEqual(yield* cluster.record("tab-k"), Option.some({ instanceId: ownerId, connectionId: "child-socket" }))
    yield* owner.kill("SIGKILL")
    yield* owner.exited
    yield* Effect.sleep(1_000)
    const start = yield* Clock.currentTimeMillis
    const linked = yield* b.tokens.link("tab-k", "cb")
    const waited = (yield* Clock.currentTimeMillis) - start
    deepStrictEqual(linked, { token: "tab-k", fresh: false, takenOver: true })
    // at most the presence expiration (the dead worker's entry, or its silence), with margin
    assert.isBelow(waited, presenceMs + 2_000)
    deepStrictEqual(yield* cluster.record("tab-k"), Option.some({ instanceId: b.id, connectionId: "cb" }))
    const [counter] = yield* Effect.orDie(cluster.store.readSlices("tab-k", ["counter"]))
    deepStrictEqual(
      Option.map(counter!, (raw) => JSON.parse(raw)),
      Option.some({ n: 5 })
    )
  })

export const frozenOwnerTakenOver = (backend: ProcessBackend) =>
  Effect.gen(function* () {
    const { cluster, env } = yield* backend.workers({ presenceExpiration: presenceMs })
    const b = yield* cluster.worker()
    const owner = yield* spawnChild(child, childEnv(env, "tab-s", 0))
    const ownerId = (yield* owner.waitFor(/^linked /)).slice("linked ".length)
    // a live owner holding the socket: a duplicate, as before
    const duplicate = yield* b.tokens.link("tab-s", "cb-dup")
    assert.isTrue(duplicate.fresh && !duplicate.takenOver)
    yield* owner.kill("SIGSTOP")
    yield* Effect.sleep(presenceMs * 2)
    const linked = yield* b.tokens.link("tab-s", "cb")
    deepStrictEqual(linked, { token: "tab-s", fresh: false, takenOver: true })
    yield* owner.kill("SIGCONT")
    assert.strictEqual(yield* owner.waitFor(/^lost tab-s /, 15_000), `lost tab-s ${b.id}`)
    deepStrictEqual(yield* cluster.record("tab-s"), Option.some({ instanceId: b.id, connectionId: "cb" }))
    assert.notStrictEqual(ownerId, b.id)
  })
