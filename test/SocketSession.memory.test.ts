/**
 * The socket session over the embedded store, served in this process: the handshake, the
 * frame cap, the queue bound, bursts, and each event with `seq` applied exactly once.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as LeaseholdConfig from "leasehold/LeaseholdConfig"
import * as MemoryStore from "leasehold/MemoryStore"
import * as SocketSession from "leasehold/SocketSession"
import * as StateManager from "leasehold/StateManager"
import { Store } from "leasehold/Store"
import * as Worker from "leasehold/Worker"
import * as Seq from "../src/internal/socket/seq.js"
import { answers, Count, calls, connect, maxFrameBytes, serveWorker, session } from "./session/support.js"

const settings = (input: LeaseholdConfig.Input = {}) => LeaseholdConfig.layer({ oplock: false, ...input })

/** A store shared by the workers of a test, with its settings. */
const sharedStore = (input: LeaseholdConfig.Input = {}) =>
  Effect.gen(function* () {
    const context = yield* Layer.build(MemoryStore.layer.pipe(Layer.provideMerge(settings(input))))
    return Context.pick(Store, LeaseholdConfig.LeaseholdConfig)(context)
  })

const oneWorker = Effect.flatMap(sharedStore(), serveWorker)

const clientId = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`

describe("SocketSession on the embedded store", () => {
  it.live("a socket without a token, or with an invalid one, gets a fresh token, then hello and state", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const none = yield* connect(port)
      assert.deepStrictEqual(
        none.frames.map((f) => f.type),
        ["new_token", "hello", "state"]
      )
      assert.strictEqual(none.frames[0]!.token, none.token)
      assert.strictEqual(none.frames[1]!.maxFrameBytes, maxFrameBytes)
      assert.deepStrictEqual(none.frames[2], { type: "state", n: 0, v: 0 })
      const invalid = yield* connect(port, { token: "not a token!" })
      assert.strictEqual(invalid.frames[0]!.type, "new_token")
      assert.notStrictEqual(invalid.token, "not a token!")
    }).pipe(Effect.scoped)
  )

  it.live("a token held by a live tab gets a fresh one; a reload within the grace keeps its own", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const first = yield* connect(port, { token: "tab-1" })
      assert.strictEqual(first.frames[0]!.type, "hello")
      const duplicate = yield* connect(port, { token: "tab-1" })
      assert.strictEqual(duplicate.frames[0]!.type, "new_token")
      assert.notStrictEqual(duplicate.token, "tab-1")
      // a reload: the old socket closes as the new one opens
      const reloading = connect(port, { token: "tab-1" })
      yield* first.close
      const reloaded = yield* reloading
      assert.strictEqual(reloaded.frames[0]!.type, "hello")
      assert.strictEqual(reloaded.token, "tab-1")
    }).pipe(Effect.scoped)
  )

  it.live("a reconnect of the same client takes its token from its socket not seen to close", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const id = clientId("page")
      const old = yield* connect(port, { client: id })
      old.send({ type: "bump", by: 1, seq: 1 })
      yield* old.waitFor((f) => f.seq === 1)
      // the old socket stays open, as a half-open one does for the server
      const [took, again] = yield* Effect.timed(connect(port, { client: id, token: old.token }))
      assert.isTrue(Duration.isLessThan(took, SocketSession.reloadGrace))
      assert.strictEqual(again.frames[0]!.type, "hello")
      assert.strictEqual(again.token, old.token)
      assert.strictEqual(yield* old.closed, SocketSession.replacedCloseCode)
      again.send({ type: "bump", by: 1, seq: 1 })
      again.send({ type: "bump", by: 1, seq: 2 })
      yield* again.waitFor((f) => f.seq === 2)
      assert.deepStrictEqual(answers(again), [
        ["state", 1],
        ["update", 2]
      ])
      // another client id is another tab: a fresh token
      const other = yield* connect(port, { client: clientId("other"), token: old.token })
      assert.strictEqual(other.frames[0]!.type, "new_token")
      assert.strictEqual(yield* Effect.timeoutOption(again.closed, "200 millis"), Option.none())
    }).pipe(Effect.scoped)
  )

  it.live("a socket that does not answer pings is cut; one that does stays", () =>
    Effect.gen(function* () {
      const port = yield* Effect.flatMap(sharedStore(), (shared) => serveWorker(shared, { pingInterval: "100 millis" }))
      const silent = yield* connect(port, { client: clientId("silent") }, { autoPong: false })
      const live = yield* connect(port, { client: clientId("live") })
      assert.strictEqual(yield* silent.closed, 1006)
      yield* Effect.sleep("300 millis")
      live.send({ type: "bump", by: 1, seq: 1 })
      assert.strictEqual((yield* live.waitFor((f) => f.seq === 1)).type, "update")
    }).pipe(Effect.scoped)
  )

  it.live("a frame over the cap closes the socket with 1009", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("big") })
      client.send({ type: "bump", by: 1, pad: "x".repeat(maxFrameBytes) })
      assert.strictEqual(yield* client.closed, SocketSession.tooBigCloseCode)
      assert.isUndefined(client.frames.find((f) => f.type === "update"))
    }).pipe(Effect.scoped)
  )

  it.live("a burst waiting together is one modification, its answers in order", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("burst") })
      // the first event holds the socket's handler while the others arrive
      client.send({ type: "bump", by: 1, seq: 1, slowMs: 300 })
      const fresh = calls.fresh
      for (let seq = 2; seq <= 4; seq++) client.send({ type: "bump", by: seq === 3 ? 0 : 1, seq })
      yield* client.waitFor((f) => f.seq === 4)
      assert.deepStrictEqual(answers(client), [
        ["update", 1],
        ["update", 2],
        ["error", 3],
        ["update", 4]
      ])
      assert.deepStrictEqual(
        client.frames.filter((f) => f.type === "update").map((f) => f.n),
        [1, 2, 3]
      )
      assert.strictEqual(client.frames.find((f) => f.seq === 3)!.applied, false)
      // seq 2 to 4 in one modification: one call on fresh values
      assert.strictEqual(calls.fresh - fresh, 1)
    }).pipe(Effect.scoped)
  )

  it.live("a handler's defect refuses its own event; the burst's others are answered as they are", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("defect") })
      client.send({ type: "bump", by: 1, seq: 1, slowMs: 300 })
      // taken alone: the frames below wait together behind it (a socket holds 4 at most)
      yield* Effect.sleep("100 millis")
      // one burst: a duplicate, a defect, an event applied, one over a gap
      client.send({ type: "bump", by: 1, seq: 1 })
      client.send({ type: "bump", by: 1, seq: 2, die: true })
      client.send({ type: "bump", by: 1, seq: 3 })
      client.send({ type: "bump", by: 1, seq: 5 })
      yield* client.waitFor((f) => f.seq === 5)
      assert.deepStrictEqual(
        client.frames.filter((f) => f.seq !== undefined),
        [
          { type: "update", n: 1, v: 1, seq: 1 },
          { type: "state", n: 1, v: 1, seq: 1, duplicate: true },
          { type: "error", message: "the event's handler failed unexpectedly", seq: 2, applied: false },
          { type: "update", n: 2, v: 2, seq: 3 },
          { type: "resend", from: 4, seq: 5 }
        ]
      )
    }).pipe(Effect.scoped)
  )

  it.live("a burst whose write fails answers its duplicates and resends as such, its events not applied", () =>
    Effect.gen(function* () {
      const port = yield* Effect.flatMap(sharedStore({ maxValueBytes: 8192 }), serveWorker)
      const client = yield* connect(port, { client: clientId("unwritten") })
      client.send({ type: "bump", by: 1, seq: 1, slowMs: 300 })
      // taken alone: the frames below wait together behind it (a socket holds 4 at most)
      yield* Effect.sleep("100 millis")
      client.send({ type: "bump", by: 1, seq: 1 })
      client.send({ type: "bump", by: 1, seq: 2, noteBytes: 10_000 })
      client.send({ type: "bump", by: 1, seq: 4 })
      yield* client.waitFor((f) => f.seq === 4)
      const [first, duplicate, refused, resend] = client.frames.filter((f) => f.seq !== undefined)
      assert.deepStrictEqual(first, { type: "update", n: 1, v: 1, seq: 1 })
      assert.deepStrictEqual(duplicate, { type: "state", n: 1, v: 1, seq: 1, duplicate: true })
      assert.strictEqual(refused!.type, "error")
      assert.strictEqual(refused!.seq, 2)
      assert.strictEqual(refused!.applied, false)
      assert.include(refused!.message, "maxValueBytes")
      assert.deepStrictEqual(resend, { type: "resend", from: 2, seq: 4 })
    }).pipe(Effect.scoped)
  )

  it.live("frames beyond the queue bound are answered, none dropped silently", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("queue") })
      client.send({ type: "bump", by: 1, seq: 1, slowMs: 300 })
      for (let seq = 2; seq <= 12; seq++) client.send({ type: "bump", by: 1, seq })
      client.send({ type: "bump", by: 1 })
      // the frame without seq: applied or refused, answered either way
      yield* client.waitFor((f) => (f.type === "update" || f.type === "error") && f.seq === undefined)
      yield* client.waitFor((f) => f.seq === 12)
      // every frame with seq answered once
      const seqs = answers(client).map(([, seq]) => seq)
      assert.deepStrictEqual(
        [...seqs].sort((a, b) => a - b),
        Array.from({ length: 12 }, (_, i) => i + 1)
      )
      // refused before their turn, their seq not counted: sent again from each
      const refused = client.frames.filter((f) => f.type === "resend" && f.from === f.seq)
      assert.isAbove(refused.length, 0)
      // and the frames after a refused one are not applied over the gap
      const updates = client.frames.filter((f) => f.type === "update" && f.seq !== undefined).map((f) => f.seq)
      assert.deepStrictEqual(
        updates,
        Array.from({ length: updates.length }, (_, i) => i + 1)
      )
    }).pipe(Effect.scoped)
  )

  it.live("frames beyond the bytes bound are answered resend from themselves", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port, { client: clientId("bytes") })
      client.send({ type: "bump", by: 1, seq: 1, slowMs: 300 })
      yield* Effect.sleep("100 millis")
      // three frames of 900 bytes: the third takes the waiting ones past 2048 bytes
      const pad = "x".repeat(860)
      for (let seq = 2; seq <= 4; seq++) client.send({ type: "bump", by: 1, seq, pad })
      yield* client.waitFor((f) => f.seq === 3)
      assert.deepStrictEqual(answers(client), [
        ["resend", 4],
        ["update", 1],
        ["update", 2],
        ["update", 3]
      ])
    }).pipe(Effect.scoped)
  )

  it.live("a resend after a reconnect is answered duplicate, not applied twice; a gap asks for L+1", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore()
      const port = yield* serveWorker(shared)
      const id = clientId("resend")
      const first = yield* connect(port, { client: id })
      for (let seq = 1; seq <= 3; seq++) first.send({ type: "bump", by: 1, seq })
      yield* first.waitFor((f) => f.seq === 3)
      yield* first.close
      const again = yield* connect(port, { client: id, token: first.token })
      again.send({ type: "bump", by: 1, seq: 2 })
      const duplicate = yield* again.waitFor((f) => f.seq === 2)
      assert.deepStrictEqual(duplicate, { type: "state", n: 3, v: 3, seq: 2, duplicate: true })
      // out of order: 5 before 4
      again.send({ type: "bump", by: 1, seq: 5 })
      assert.deepStrictEqual(yield* again.waitFor((f) => f.seq === 5), { type: "resend", from: 4, seq: 5 })
      again.send({ type: "bump", by: 1, seq: 4 })
      again.send({ type: "bump", by: 1, seq: 5 })
      yield* again.waitFor((f) => f.seq === 5 && f.type === "update")
      const counter = yield* Effect.flatMap(StateManager.StateManager, (states) =>
        states.get(first.token, session.options.slices.counter)
      ).pipe(Effect.provide(Worker.layerState.pipe(Layer.provide(Layer.succeedContext(shared)))))
      assert.strictEqual(counter.n, 5)
    }).pipe(Effect.scoped)
  )

  it.live("a resend to another worker is answered duplicate", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore()
      const a = yield* serveWorker(shared)
      const b = yield* serveWorker(shared)
      const id = clientId("move")
      const onA = yield* connect(a, { client: id })
      onA.send({ type: "bump", by: 7, seq: 1 })
      yield* onA.waitFor((f) => f.seq === 1)
      yield* onA.close
      const onB = yield* connect(b, { client: id, token: onA.token })
      assert.deepStrictEqual(onB.frames.at(-1), { type: "state", n: 7, v: 1 })
      onB.send({ type: "bump", by: 7, seq: 1 })
      assert.deepStrictEqual(yield* onB.waitFor((f) => f.seq === 1), {
        type: "state",
        n: 7,
        v: 1,
        seq: 1,
        duplicate: true
      })
      onB.send({ type: "bump", by: 1, seq: 2 })
      assert.strictEqual((yield* onB.waitFor((f) => f.seq === 2)).n, 8)
    }).pipe(Effect.scoped)
  )

  it.live("two clients on one token count apart", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const one = yield* connect(port, { client: clientId("one") })
      one.send({ type: "bump", by: 1, seq: 1 })
      yield* one.waitFor((f) => f.seq === 1)
      yield* one.close
      const two = yield* connect(port, { client: clientId("two"), token: one.token })
      two.send({ type: "bump", by: 1, seq: 1 })
      two.send({ type: "bump", by: 1, seq: 1 })
      yield* two.waitFor((f) => f.seq === 1 && f.duplicate === true)
      assert.deepStrictEqual(
        answers(two).map(([type]) => type),
        ["update", "state"]
      )
      assert.strictEqual(two.frames.find((f) => f.type === "update")!.n, 2)
    }).pipe(Effect.scoped)
  )

  it.live("past 8 clients the least recent is forgotten, whatever it sends", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const ids = Array.from({ length: SocketSession.maxClients + 1 }, (_, i) => clientId(`c${i}`))
      let token: string | undefined
      for (const id of ids) {
        const client = yield* connect(port, token === undefined ? { client: id } : { client: id, token })
        token = client.token
        client.send({ type: "bump", by: 1, seq: 1 })
        yield* client.waitFor((f) => f.seq === 1)
        yield* client.close
      }
      const first = yield* connect(port, { client: ids[0]!, token: token! })
      first.send({ type: "bump", by: 1, seq: 1 })
      first.send({ type: "bump", by: 1, seq: 2 })
      yield* first.waitFor((f) => f.seq === 2)
      assert.deepStrictEqual(answers(first), [
        ["forgotten", 1],
        ["forgotten", 2]
      ])
      yield* first.close
      // the ninth is remembered still
      const last = yield* connect(port, { client: ids.at(-1)!, token: token! })
      last.send({ type: "bump", by: 1, seq: 2 })
      assert.deepStrictEqual(yield* last.waitFor((f) => f.seq === 2), {
        type: "update",
        n: SocketSession.maxClients + 2,
        v: SocketSession.maxClients + 2,
        seq: 2
      })
    }).pipe(Effect.scoped)
  )

  it.live("a frame with seq but no client id is refused, not applied", () =>
    Effect.gen(function* () {
      const port = yield* oneWorker
      const client = yield* connect(port)
      client.send({ type: "bump", by: 1, seq: 1 })
      const answer = yield* client.waitFor((f) => f.seq === 1)
      assert.strictEqual(answer.type, "error")
      assert.strictEqual(answer.applied, false)
    }).pipe(Effect.scoped)
  )

  it.live("leaseDurability memory is refused at build", () =>
    Effect.gen(function* () {
      const shared = yield* sharedStore({ leaseDurability: "memory" })
      const exit = yield* Effect.exit(serveWorker(shared))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), "leaseDurability")
    }).pipe(Effect.scoped)
  )

  it.live("a maxValueBytes below the seq slice's largest is refused at build", () =>
    Effect.gen(function* () {
      // 4 KiB holds any app slice of a few fields, not 8 clients and 64 dropped ids
      const below = yield* Effect.exit(Effect.flatMap(sharedStore({ maxValueBytes: 4096 }), serveWorker))
      assert.isTrue(Exit.isFailure(below))
      assert.include(String(Exit.isFailure(below) ? below.cause : ""), "maxValueBytes")
      const at = yield* Effect.exit(
        Effect.flatMap(sharedStore({ maxValueBytes: SocketSession.seqSliceMaxBytes }), serveWorker)
      )
      assert.isTrue(Exit.isSuccess(at))
    }).pipe(Effect.scoped)
  )

  it.effect("the seq slice at its largest takes seqSliceMaxBytes", () =>
    Effect.gen(function* () {
      // 8 clients and 64 dropped ids, of 64 characters each: what the bound was computed from
      const clients = Array.from({ length: SocketSession.maxClients + 64 }, (_, i) => `${i}`.padStart(64, "c"))
      let state = { clients: [], forgotten: [] } as Seq.SeqState
      for (const client of clients) state = Seq.advance(state, client, Number.MAX_SAFE_INTEGER)
      assert.strictEqual(state.forgotten.length, 64)
      const encoded = JSON.stringify(Schema.encodeSync(Seq.SeqState)(state))
      assert.strictEqual(Buffer.byteLength(encoded), SocketSession.seqSliceMaxBytes)
    })
  )

  it("a handler returning a wrong update does not compile", () => {
    SocketSession.make({
      events: Schema.Struct({ type: Schema.Literal("bump") }),
      updates: Count,
      slices: {},
      // @ts-expect-error: the update is not a Count
      handle: (_event, values) => Effect.succeed([{ n: "one" }, values] as const),
      view: () => ({ n: 0, v: 0 })
    })
  })
})
