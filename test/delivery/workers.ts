/**
 * Workers for delivery tests: each a full `Worker.layer` (token manager, mailbox, state
 * manager) whose `deliver` records what reached its sockets. On memory they share one
 * MemoryStore; on Redis each has its own RedisStore (its own connections), as separate
 * processes would, against one redis-server (directly or through a proxy that a test can
 * cut).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Health from "../../src/Health.js"
import { InstanceId } from "../../src/InstanceId.js"
import * as Untyped from "../../src/internal/mailbox/untyped.js"
import * as LeaseholdConfig from "../../src/LeaseholdConfig.js"
import * as Mailbox from "../../src/Mailbox.js"
import * as MemoryStore from "../../src/MemoryStore.js"
import * as RedisStore from "../../src/RedisStore.js"
import * as StateManager from "../../src/StateManager.js"
import { MailboxStart, Store } from "../../src/Store.js"
import * as TokenManager from "../../src/TokenManager.js"
import * as Worker from "../../src/Worker.js"
import { capture } from "../support/logs.js"
import { buildOwn } from "../support/ownScope.js"

/** A structured update: a number, a date, a list and an optional nested record. */
export const Update = Schema.Struct({
  n: Schema.Number,
  at: Schema.DateFromString,
  tags: Schema.Array(Schema.String),
  route: Schema.optional(Schema.Struct({ path: Schema.String, query: Schema.Record(Schema.String, Schema.String) }))
})
export type Update = typeof Update.Type

export const update = (n: number, extra: Partial<Update> = {}): Update => ({
  n,
  at: new Date(1_700_000_000_000 + n),
  tags: [`t${n}`],
  ...extra
})

export interface DeliveryWorker {
  readonly id: string
  readonly tokens: TokenManager.TokenManager.Service
  /** The mailbox with its untyped send: the suites send what the schema must refuse. */
  readonly mailbox: Untyped.Sender
  readonly states: StateManager.StateManager.Service
  readonly health: Health.Health.Service
  /** The worker's own store (on Redis its own connections; on memory the one all share). */
  readonly store: Store.Service
  /** What reached this worker's sockets, in order. */
  readonly received: Array<readonly [token: string, update: Update]>
  readonly close: Effect.Effect<void>
}

export interface WorkerOptions {
  readonly outboxCapacity?: number
  /** Redis only: connect through this URL (a proxy) instead of the server's. */
  readonly url?: string
}

const configWith = (input: LeaseholdConfig.Input) => LeaseholdConfig.layer({ retryJitter: false, ...input })

const build = (
  layer: Layer.Layer<Worker.Services | Store, unknown, never>,
  received: Array<readonly [string, Update]>,
  logs: { readonly layer: Layer.Layer<never> }
) =>
  Effect.gen(function* () {
    const { built, close } = yield* Effect.orDie(buildOwn(layer, logs))
    return {
      id: Context.get(built, InstanceId),
      tokens: Context.get(built, TokenManager.TokenManager),
      mailbox: Untyped.sender(Context.get(built, Mailbox.Mailbox)),
      states: Context.get(built, StateManager.StateManager),
      health: Context.get(built, Health.Health),
      store: Context.get(built, Store),
      received,
      close
    } satisfies DeliveryWorker
  })

const recorder = (options: WorkerOptions) => {
  const received: Array<readonly [string, Update]> = []
  const workerOptions: Worker.Options<Update, typeof Update.Encoded, never> = {
    schema: Update,
    deliver: (token, value) => Effect.sync(() => received.push([token, value])),
    readBlock: "1 second",
    ...(options.outboxCapacity === undefined ? {} : { outboxCapacity: options.outboxCapacity })
  }
  return { received, workerOptions }
}

/**
 * Run `effect` (the test's own calls of its workers) with its log records captured with
 * the workers': the capture is provided to the workers' fibers only.
 */
const logged =
  (logs: { readonly layer: Layer.Layer<never> }) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.provide(effect, logs.layer)

/** A fresh worker over a store shared by every worker of the test. */
export const workerOver = (
  shared: Context.Context<Store | LeaseholdConfig.LeaseholdConfig>,
  logs: { readonly layer: Layer.Layer<never> },
  options: WorkerOptions = {}
) => {
  const { received, workerOptions } = recorder(options)
  return build(
    Layer.fresh(Worker.layer(workerOptions)).pipe(Layer.provideMerge(Layer.succeedContext(shared))),
    received,
    logs
  )
}

/** Workers over one MemoryStore (time on the TestClock under it.effect). */
export const memoryWorkers = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const logs = capture()
    const shared = yield* Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(configWith(input)))).pipe(
      Effect.provide(logs.layer),
      Effect.orDie
    )
    return {
      logs: logs.lines,
      logged: logged(logs),
      store: Context.get(shared, Store),
      control: Context.get(shared, MemoryStore.MemoryStoreControl),
      worker: (options: WorkerOptions = {}) => workerOver(shared, logs, options)
    }
  })

/** Workers each with its own RedisStore against `url`. */
export const redisWorkers = (url: string, input: LeaseholdConfig.Input = {}) => redisWorkersOn({ url }, input)

/** Workers each with its own RedisStore, reaching Redis as `target` says (a URL, or Sentinels). */
export const redisWorkersOn = (target: RedisStore.Options, input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const logs = capture()
    const config = configWith({ commandTimeout: 1_000, ...input })
    const shared = yield* Layer.build(RedisStore.layer(target).pipe(Layer.provideMerge(config))).pipe(
      Effect.provide(logs.layer),
      Effect.orDie
    )
    const worker = (options: WorkerOptions = {}) => {
      const { received, workerOptions } = recorder(options)
      return build(
        Worker.layer(workerOptions).pipe(
          Layer.provideMerge(RedisStore.layer(options.url === undefined ? target : { url: options.url })),
          Layer.provide(config)
        ) as Layer.Layer<Worker.Services | Store, unknown, never>,
        received,
        logs
      )
    }
    return { logs: logs.lines, logged: logged(logs), store: Context.get(shared, Store), worker }
  })

/**
 * The payload of a barrier's entry: not JSON, so a reader skips it (a warning, and one
 * update counted as dropped `undecodable`) and delivers nothing.
 */
const barrierPayload = "leasehold-test-barrier"

/** A mailbox id (`<ms>-<seq>`) as a pair of numbers, to compare two. */
const idParts = (id: string): readonly [number, number] => {
  const [ms, seq] = id.split("-")
  return [Number(ms), Number(seq ?? 0)]
}

const atOrAfter = (id: string, than: string) => {
  const [ms, seq] = idParts(id)
  const [thanMs, thanSeq] = idParts(than)
  return ms > thanMs || (ms === thanMs && seq >= thanSeq)
}

/**
 * A barrier in the workers' mailboxes: every entry appended to them before it has been
 * handled (delivered, forwarded, or dropped) once it returns. For each worker in turn, an
 * entry is appended behind the others, and the barrier waits until the worker's reader
 * has recorded its cursor (which it does after the entries of each read are handled, in
 * order) at that entry or past it. An entry a worker forwards is appended to the next
 * worker's mailbox before its reader's cursor moves on: list the forwarding worker first.
 * For "nothing (more) was delivered" without a sleep that guesses when.
 */
export const handled = (
  store: Store.Service,
  until: (label: string, check: Effect.Effect<boolean>) => Effect.Effect<void>,
  workers: ReadonlyArray<{ readonly id: string }>
): Effect.Effect<void> =>
  Effect.forEach(
    workers,
    (worker) =>
      Effect.gen(function* () {
        const marker = yield* Effect.orDie(
          store.mailboxAppend(worker.id, barrierPayload, { maxLen: 10_000, ttlMs: 60_000 })
        )
        yield* until(
          `${worker.id} has handled its mailbox up to ${marker}`,
          Effect.map(
            Effect.orDie(store.mailboxCursor(worker.id)),
            Option.match({ onNone: () => false, onSome: (cursor) => atOrAfter(cursor, marker) })
          )
        )
      }),
    { discard: true }
  )

/** The entries of a worker's mailbox, but for barriers' (`handled`), as stored. */
export const mailboxEntries = (store: Store.Service, worker: { readonly id: string }) =>
  Effect.map(Effect.orDie(store.mailboxRead(worker.id, MailboxStart, { count: 10_000 })), (entries) =>
    entries.filter((entry) => entry.payload !== barrierPayload).map((entry) => entry.payload)
  )
