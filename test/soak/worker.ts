/**
 * One worker process of the chaos soak: a full `Worker.layerFromEnv` (configured from the
 * environment) whose fibers modify random tokens and send updates to random tokens'
 * sockets, and which holds the sockets of the tabs it is given. It reports every outcome
 * on stdout, one JSON object per line (with `at`, the time it happened, where the soak
 * needs it), and reads commands on stdin: `link <token> <connectionId>` links a socket (a
 * tab that reconnects here, its worker having died), `stop` stops it.
 *
 *   LEASEHOLD_REDIS_URL=… INDEX=0 TOKENS=t0,t1 SOCKETS=t0=tab-t0-0 FIBERS=4 SEED=1 node --import tsx test/soak/worker.ts
 *
 * (or `LEASEHOLD_REDIS_SENTINELS`, `LEASEHOLD_REDIS_SENTINEL_NAME` and `LEASEHOLD_MIN_REPLICAS_ACK`
 * instead of the URL: the soak behind Sentinel).
 *
 * Each modification appends its id and its grant's fencing number to the token's log slice:
 * a lost update is an id missing from the log, a doubled one an id that appears twice, and
 * a fencing number smaller than the one before it a write by a holder older than the one
 * whose write it read. An interruption lands only before the function decides (as in the
 * fuzz tests): an interrupted modification must change nothing. A modification that
 * fails after deciding is reported as `decided` with its error's tag (or `Interrupted`,
 * `defect`): the soak judges by the tag whether it may have been written. Each outcome
 * carries `invoked` and `at` (when it was asked for and when its answer came), and a
 * success the counter value `n` it wrote: the soak checks those values against real time.
 *
 * `SOAK_INJECT` breaks one property on purpose, to show that the soak's check of it fails:
 * `nothing-written` reports one success in ten as `LockExpired` (an error that promises
 * nothing was written), `fence-reuse` writes an entry under the fence of the entry before
 * it when another incarnation wrote that one, `counter-order` reports one success in ten
 * with the counter value of three modifications before it, `unexpected-failure` reports one
 * success in ten as `StoreRefused` (an outcome no document calls unknown).
 */
import * as readline from "node:readline"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Random from "effect/Random"
import * as References from "effect/References"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Health from "../../src/Health.js"
import { InstanceId } from "../../src/InstanceId.js"
import * as Lease from "../../src/internal/lease.js"
import * as Untyped from "../../src/internal/mailbox/untyped.js"
// the worker layer with its lease, which the public one leaves out
import * as Worker from "../../src/internal/worker.js"
import * as Mailbox from "../../src/Mailbox.js"
import * as StateManager from "../../src/StateManager.js"
import { Store } from "../../src/Store.js"
import * as TokenManager from "../../src/TokenManager.js"

export const Log = StateManager.slice("log", Schema.Struct({ n: Schema.Number, ops: Schema.Array(Schema.String) }), {
  n: 0,
  ops: []
})

export const Update = Schema.Struct({ sender: Schema.String, fiber: Schema.Number, seq: Schema.Number })

const index = Number(process.env.INDEX ?? "0")
const generation = Number(process.env.GENERATION ?? "0")
/** How the soak names this process: the same in its events and in the updates it sends. */
const name = `worker ${index}.${generation}`
const tokens = (process.env.TOKENS ?? "t0").split(",")
/** The tabs linked at start: `token=connectionId`. */
const sockets = (process.env.SOCKETS ?? "")
  .split(",")
  .filter((pair) => pair.length > 0)
  .map((pair) => pair.split("=") as [token: string, connectionId: string])
const fibers = Number(process.env.FIBERS ?? "4")
const seed = Number(process.env.SEED ?? "1")
const inject = process.env.SOAK_INJECT ?? ""
/** This process's incarnation, as the ids of its modifications begin. */
const incarnation = `${index}g${generation}`
let injectCount = 0
const injectNow = () => ++injectCount % 10 === 0

const emit = (event: Record<string, unknown>) => Effect.sync(() => process.stdout.write(`${JSON.stringify(event)}\n`))

/** Links asked for on stdin, taken by the program once it is built. */
const links: Array<readonly [token: string, connectionId: string]> = []
let onLink = () => {}

const lines = readline.createInterface({ input: process.stdin })
const stopped = new Promise<void>((resolve) => {
  lines.on("line", (line) => {
    const [command, token, connectionId] = line.trim().split(" ")
    if (command === "stop") resolve()
    else if (command === "link" && token !== undefined && connectionId !== undefined) {
      links.push([token, connectionId])
      onLink()
    }
  })
  lines.on("close", () => resolve())
})

let running = true

/** What each fiber is doing, for a report if stopping takes long. */
const current = new Map<number, { readonly what: string; readonly since: number }>()

/** One modification: appends `op` to the token's log and increments its counter. */
const modifyOnce = (states: StateManager.StateManager.Service, token: string, op: string) =>
  Effect.gen(function* () {
    const state = { decided: false }
    const invoked = Date.now()
    const fiber = yield* Effect.forkChild(
      states.modifyEffect(
        token,
        Log,
        (log) =>
          Effect.gen(function* () {
            yield* Effect.sleep(yield* Random.nextIntBetween(0, 2, { halfOpen: true }))
            // the fencing number of the grant this modification runs under, kept with its id
            const own = Option.getOrElse(yield* StateManager.fence, () => -1)
            const last = log.ops.at(-1)
            const fence =
              inject === "fence-reuse" && last !== undefined && !last.startsWith(`${incarnation}.`)
                ? Number(last.slice(last.lastIndexOf("@") + 1))
                : own
            yield* Effect.sync(() => {
              state.decided = true
            })
            return [log.n + 1, { n: log.n + 1, ops: [...log.ops, `${op}@${fence}`] }] as const
          }),
        { event: op }
      )
    )
    if ((yield* Random.next) < 0.1) {
      yield* Effect.sleep(yield* Random.nextIntBetween(0, 3, { halfOpen: true }))
      // the look and the interruption in one step: never after the decision
      yield* Effect.sync(() => {
        if (!state.decided) fiber.interruptUnsafe()
      })
    }
    const exit = yield* Fiber.await(fiber)
    const at = Date.now()
    if (Exit.isSuccess(exit)) {
      if ((inject === "nothing-written" || inject === "unexpected-failure") && injectNow()) {
        const reason = inject === "nothing-written" ? "LockExpired" : "StoreRefused"
        return yield* emit({ t: "decided", token, op, reason, invoked, at })
      }
      const n = inject === "counter-order" && injectNow() ? exit.value - 3 : exit.value
      return yield* emit({ t: "ok", token, op, n, invoked, at })
    }
    if (Exit.hasInterrupts(exit) && !state.decided) return yield* emit({ t: "interrupted", token, op })
    const error = Cause.findErrorOption(exit.cause)
    const reason = Option.match(error, {
      onNone: () => (Exit.hasInterrupts(exit) ? "Interrupted" : "defect"),
      onSome: (error) => (error as { readonly _tag?: string })._tag ?? "error"
    })
    // what the error says, for the report of an outcome no document calls unknown
    const message = Option.match(error, { onNone: () => Cause.pretty(exit.cause), onSome: (error) => String(error) })
    return yield* emit({ t: state.decided ? "decided" : "failed", token, op, reason, message, invoked, at })
  })

const program = Effect.gen(function* () {
  const context = yield* Layer.build(
    Worker.layerFromEnv({
      schema: Update,
      deliver: (token, update) =>
        emit({ t: "dlv", token, sender: update.sender, fiber: update.fiber, seq: update.seq, at: Date.now() }),
      readBlock: "500 millis",
      restoreGrace: "10 seconds"
    })
  )
  const states = Context.get(context, StateManager.StateManager)
  const tokenManager = Context.get(context, TokenManager.TokenManager)
  const mailbox = Untyped.sender(Context.get(context, Mailbox.Mailbox))
  const health = Context.get(context, Health.Health)
  const instanceId = Context.get(context, InstanceId)
  const store = Context.get(context, Store)
  const lease = Context.get(context, Lease.Lease)
  /**
   * A socket linked while its record could not be written: report when the record names it
   * (the store returned, and the record found, a dead worker's, was taken over): updates
   * sent before then went to the record's old owner.
   */
  const whenStored = (token: string, connectionId: string) =>
    Effect.all([store.readSocket(token), tokenManager.local(token)]).pipe(
      Effect.map(([record, local]) =>
        Option.isSome(record) && record.value.instanceId === instanceId && record.value.connectionId === connectionId
          ? ("stored" as const)
          : Option.contains(local, connectionId)
            ? ("not yet" as const)
            : ("gone" as const)
      ),
      Effect.orElseSucceed(() => "not yet" as const),
      Effect.repeat({
        schedule: Schedule.passthrough(Schedule.spaced("50 millis")),
        until: (state) => state !== "not yet"
      }),
      Effect.flatMap((state) =>
        state === "stored"
          ? Effect.suspend(() => emit({ t: "stored", token, connectionId, at: Date.now() }))
          : Effect.void
      ),
      Effect.forkScoped
    )
  /** Link a tab's socket and report what became of it: its token, or the error. */
  const linkTab = (token: string, connectionId: string) =>
    Effect.gen(function* () {
      const started = Date.now()
      const linked = yield* Effect.result(tokenManager.link(token, connectionId))
      if (linked._tag === "Failure" && linked.failure._tag === "RecordNotStored") {
        yield* whenStored(linked.failure.token, connectionId)
      }
      yield* emit({
        t: "linked",
        token,
        connectionId,
        started,
        at: Date.now(),
        ...(linked._tag === "Success"
          ? { result: linked.success.token, fresh: linked.success.fresh, takenOver: linked.success.takenOver }
          : linked.failure._tag === "RecordNotStored"
            ? // linked locally; the record is written (or a dead owner's taken over) when the store returns
              {
                result: linked.failure.token,
                fresh: linked.failure.fresh === true,
                notStored: true,
                error: linked.failure.message
              }
            : { result: linked.failure._tag, error: linked.failure.message })
      })
    })
  for (const [token, connectionId] of sockets) yield* linkTab(token, connectionId)
  // A socket whose token another worker's socket holds now: the soak counts it.
  yield* Effect.forkScoped(
    Stream.runForEach(tokenManager.lost, (lost) =>
      emit({ t: "lost", token: lost.token, connectionId: lost.connectionId, holder: lost.holder, at: Date.now() })
    )
  )
  // Tabs that reconnect here, as the soak says, each linked in a fiber of its own.
  const linkRequests = yield* Queue.unbounded<readonly [string, string]>()
  onLink = () => {
    for (const request of links.splice(0)) Queue.offerUnsafe(linkRequests, request)
  }
  onLink()
  yield* Effect.forkScoped(
    Effect.forever(
      Effect.flatMap(Queue.take(linkRequests), ([token, connectionId]) =>
        Effect.forkChild(linkTab(token, connectionId))
      )
    )
  )
  yield* emit({ t: "ready", instanceId })

  const loop = (fiber: number) =>
    Effect.gen(function* () {
      let ops = 0
      let seq = 0
      while (running) {
        const token = tokens[yield* Random.nextIntBetween(0, tokens.length, { halfOpen: true })]!
        current.set(fiber, { what: `modify ${token}`, since: Date.now() })
        if ((yield* Random.next) < 0.8) {
          yield* modifyOnce(states, token, `${index}g${generation}.${fiber}.${ops++}`)
        } else {
          const at = Date.now()
          current.set(fiber, { what: `send ${token}`, since: at })
          const outcome = yield* Effect.result(mailbox.send(token, { sender: name, fiber, seq }))
          yield* emit({
            t: "sent",
            token,
            fiber,
            seq,
            at,
            outcome: outcome._tag === "Success" ? outcome.success : outcome.failure._tag
          })
          seq++
        }
      }
    })
  const workers = yield* Effect.forEach(Array.from({ length: fibers }), (_, i) => Effect.forkChild(loop(i)))
  yield* Effect.promise(() => stopped)
  running = false
  const stuck = yield* Effect.forkChild(
    Effect.gen(function* () {
      yield* Effect.sleep("20 seconds")
      const tokensStuck = [...new Set([...current.values()].map((op) => op.what.split(" ")[1]!))]
      const state = yield* Effect.forEach(tokensStuck, (token) =>
        Effect.gen(function* () {
          const holder = yield* Effect.result(store.holder(token))
          const waiters = yield* Effect.result(store.queue(token))
          return {
            token,
            holder: holder._tag === "Success" ? Option.getOrNull(holder.success) : holder.failure._tag,
            waiters: waiters._tag === "Success" ? waiters.success : waiters.failure._tag,
            leased: lease.isLeased(token),
            sessions: yield* lease.sessions
          }
        })
      )
      yield* emit({
        t: "stuck",
        instanceId,
        state,
        fibers: [...current].map(([fiber, op]) => ({ fiber, ...op, ms: Date.now() - op.since }))
      })
    })
  )
  yield* Fiber.joinAll(workers)
  yield* Fiber.interrupt(stuck)
  // Let the outbox drain before reporting (the store may just have come back).
  for (let i = 0; i < 200 && (yield* mailbox.buffered) > 0; i++) yield* Effect.sleep(100)
  yield* Effect.sleep(1_000)
  yield* emit({ t: "health", buffered: yield* mailbox.buffered, loops: yield* health.loops })
}).pipe(
  Effect.scoped,
  Effect.andThen(Effect.suspend(() => emit({ t: "closed", at: Date.now() }))),
  // stdin read no more: nothing keeps the process once the program has ended
  Effect.ensuring(Effect.sync(() => lines.close())),
  Random.withSeed(seed * 100 + index)
)

NodeRuntime.runMain(program.pipe(Effect.provideService(References.MinimumLogLevel, "Warn")))
