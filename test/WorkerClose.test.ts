/**
 * Closing a worker while its fibers modify tokens in a loop, at many different moments:
 * every modification in flight ends, with a success or a typed error (interrupted only
 * before it decided), and the loops, interrupted after the close, end.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as TestClock from "effect/testing/TestClock"
import * as LeaseholdConfig from "../src/LeaseholdConfig.js"
import * as MemoryStore from "../src/MemoryStore.js"
import { Store } from "../src/Store.js"
import { type DeliveryWorker, redisWorkers, workerOver } from "./delivery/workers.js"
import { Counter } from "./state/workers.js"
import { capture } from "./support/logs.js"
import * as Server from "./support/RedisServer.js"
import { settle } from "./support/testClock.js"

/** The errors a modification may end with when its worker closes under it. */
const typed = new Set(["StoreUnavailable", "LockExpired", "StoreRefused"])

interface Loops {
  readonly fibers: ReadonlyArray<Fiber.Fiber<never>>
  /** What went wrong with a modification that ended: an untyped or late failure. */
  readonly wrong: Array<string>
  readonly ended: () => number
}

/** `n` fibers, each modifying one of `tokens` after another, for ever; `pause` runs inside each function. */
const startLoops = (worker: DeliveryWorker, tokens: ReadonlyArray<string>, pause: Effect.Effect<void>) =>
  Effect.gen(function* () {
    const wrong: Array<string> = []
    let ended = 0
    const once = Effect.gen(function* () {
      const token = tokens[yield* Random.nextIntBetween(0, tokens.length, { halfOpen: true })]!
      const state = { decided: false }
      const exit = yield* Effect.exit(
        worker.states.modifyEffect(token, Counter, (counter) =>
          Effect.andThen(
            pause,
            Effect.sync(() => {
              state.decided = true
              return [counter.n + 1, { n: counter.n + 1 }] as const
            })
          )
        )
      )
      ended++
      if (Exit.isSuccess(exit)) return
      const error = Cause.findErrorOption(exit.cause)
      if (Option.isSome(error)) {
        const tag = (error.value as { readonly _tag?: string })._tag ?? "error"
        if (!typed.has(tag)) wrong.push(`failed with ${tag}`)
      } else if (state.decided || !Exit.hasInterrupts(exit)) {
        wrong.push(`${state.decided ? "decided, then " : ""}${Cause.pretty(exit.cause)}`)
      }
    })
    const fibers = yield* Effect.forEach([0, 1, 2, 3], () => Effect.forkChild(Effect.forever(once)))
    return { fibers, wrong, ended: () => ended } satisfies Loops
  })

describe("closing a worker ends every modification in flight", () => {
  // A write whose reply takes a millisecond of the clock, as over a network: the close's
  // interruption lands between a group commit's write and its acknowledgement in many rounds.
  it.effect("memory, replies a millisecond late", () =>
    Effect.gen(function* () {
      const logs = capture()
      const built = yield* Layer.build(
        MemoryStore.layer.pipe(Layer.provideMerge(LeaseholdConfig.layer({ retryJitter: false })))
      ).pipe(Effect.provide(logs.layer), Effect.orDie)
      const store = Context.get(built, Store)
      const late: Store.Service = {
        ...store,
        writeIfHolder: (...args) => Effect.tap(store.writeIfHolder(...args), () => Effect.sleep(1))
      }
      const shared = Context.add(built, Store, late)
      for (let round = 0; round < 100; round++) {
        const worker = yield* workerOver(shared, logs)
        const loops = yield* startLoops(worker, [`r${round}a`, `r${round}b`], Effect.yieldNow)
        // a different moment each round
        for (let ms = 0; ms < round % 10; ms++) {
          yield* settle
          yield* TestClock.adjust(1)
        }
        for (let i = 0; i < round % 13; i++) yield* Effect.yieldNow
        const closing = yield* Effect.forkChild(worker.close)
        for (let i = 0; i < round % 7; i++) yield* Effect.yieldNow
        // as a process's main fiber does once its scope is closed: its children are interrupted
        const stopping = yield* Effect.forkChild(Effect.forEach(loops.fibers, Fiber.interrupt, { discard: true }))
        // well past a lock's expiration, on the clock
        for (
          let ms = 0;
          ms < 30_000 && (closing.pollUnsafe() === undefined || stopping.pollUnsafe() === undefined);
          ms += 100
        ) {
          yield* settle
          yield* TestClock.adjust(100)
        }
        assert.isDefined(closing.pollUnsafe(), `round ${round}: the close did not end`)
        assert.isDefined(stopping.pollUnsafe(), `round ${round}: a modification did not end (${loops.ended()} ended)`)
        assert.deepStrictEqual(loops.wrong, [], `round ${round}`)
      }
    })
  )

  it.live(
    "redis, its store closed with it",
    () =>
      Effect.gen(function* () {
        const server = yield* Server.start()
        const fx = yield* redisWorkers(server.url)
        for (let round = 0; round < 40; round++) {
          const worker = yield* fx.worker()
          const pause = Effect.flatMap(Random.nextIntBetween(0, 2, { halfOpen: true }), (ms) => Effect.sleep(ms))
          const loops = yield* startLoops(worker, [`r${round}a`, `r${round}b`, `r${round}c`], pause)
          yield* Effect.sleep(yield* Random.nextIntBetween(0, 150))
          const closing = yield* Effect.forkDetach(worker.close)
          yield* Effect.sleep(yield* Random.nextIntBetween(0, 50))
          // as a process's main fiber does once its scope is closed: its children are interrupted
          const stopping = yield* Effect.forkDetach(Effect.forEach(loops.fibers, Fiber.interrupt, { discard: true }))
          // the command timeout is 1 s: every wait on the store ends well within this
          for (let i = 0; i < 100 && (closing.pollUnsafe() === undefined || stopping.pollUnsafe() === undefined); i++) {
            yield* Effect.sleep(50)
          }
          assert.isDefined(closing.pollUnsafe(), `round ${round}: the close did not end`)
          assert.isDefined(stopping.pollUnsafe(), `round ${round}: a modification did not end (${loops.ended()} ended)`)
          assert.deepStrictEqual(loops.wrong, [], `round ${round}`)
        }
      }),
    120_000
  )
})
