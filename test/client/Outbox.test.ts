/**
 * The browser client's bookkeeping without a socket: numbering, the unanswered events and
 * their resending, the frame cap, and the reconnection delays. What depends on the server's
 * answers to real frames is tested against the socket session itself.
 */
import { assert, describe, it } from "@effect/vitest"
import { type Answer, Outbox, type Reason, retryDelay, SendError } from "leasehold/client"

interface Bump {
  readonly type: "bump"
  readonly by: number
  readonly note?: string
}
interface Count {
  readonly n: number
}

/** An outbox and what it transmitted, as parsed frames. */
const outbox = () => {
  const box = new Outbox<Bump, Count>()
  const sent: Array<Bump & { readonly seq: number }> = []
  const link = (cap = 1024) => box.link(cap, (frame) => sent.push(JSON.parse(frame)))
  return { box, sent, link }
}

/** Settle-tracking for a `send` promise: what it became, read after the microtasks ran. */
const track = (promise: Promise<Answer<Count>>) => {
  const state: { answer?: Answer<Count>; error?: SendError } = {}
  promise.then(
    (answer) => {
      state.answer = answer
    },
    (error: SendError) => {
      state.error = error
    }
  )
  return state
}

const settled = () => new Promise((resolve) => setTimeout(resolve, 0))

const rejected = (state: { error?: SendError }, applied: boolean | "unknown", reason: Reason) => {
  assert.instanceOf(state.error, SendError)
  assert.strictEqual(state.error?.applied, applied)
  assert.strictEqual(state.error?.reason, reason)
}

const bump = (by: number): Bump => ({ type: "bump", by })
const seqs = (frames: ReadonlyArray<{ readonly seq: number }>) => frames.map((frame) => frame.seq)

describe("client Outbox", () => {
  it("an error saying the event was applied settles it for good: no retry", async () => {
    const { box, sent, link } = outbox()
    const first = track(box.push(bump(1)))
    const second = track(box.push(bump(2)))
    link()
    const message = "update cannot be encoded"
    assert.isUndefined(box.answer({ type: "error", seq: 1, message, applied: true }))
    assert.strictEqual(box.failures, 0)
    box.answer({ type: "update", seq: 2, n: 3 })
    await settled()
    rejected(first, true, "unanswerable")
    assert.strictEqual(second.answer?.update.n, 3)
    assert.deepStrictEqual(seqs(sent), [1, 2])
    assert.strictEqual(box.size, 0)
  })

  it("events wait for a link, then go in order, numbered from 1, with the event's own fields", () => {
    const { box, sent, link } = outbox()
    void box.push(bump(1))
    void box.push(bump(2))
    assert.deepStrictEqual(sent, [])
    link()
    assert.deepStrictEqual(sent, [
      { type: "bump", by: 1, seq: 1 },
      { type: "bump", by: 2, seq: 2 }
    ])
    void box.push(bump(3))
    assert.deepStrictEqual(seqs(sent), [1, 2, 3])
    assert.strictEqual(box.next, 4)
    assert.strictEqual(box.inFlight, 3)
  })

  it("an answer settles its own event: the update without the protocol's fields; a duplicate says so", async () => {
    const { box, link } = outbox()
    link()
    const first = track(box.push(bump(1)))
    const second = track(box.push(bump(1)))
    box.answer({ type: "state", seq: 2, n: 7, duplicate: true })
    box.answer({ type: "update", seq: 1, n: 6 })
    await settled()
    assert.deepStrictEqual(first.answer, { update: { n: 6 }, duplicate: false, overtaken: false })
    assert.deepStrictEqual(second.answer, { update: { n: 7 }, duplicate: true, overtaken: false })
    assert.strictEqual(box.size, 0)
    assert.strictEqual(box.inFlight, 0)
    // an answer for no event waiting (a second answer, another page's seq) changes nothing
    box.answer({ type: "update", seq: 1, n: 8 })
    assert.strictEqual(box.size, 0)
  })

  it("after a lost link the unanswered events go again, with their seq, before any new event", async () => {
    const { box, sent, link } = outbox()
    link()
    const events = [1, 2, 3].map((by) => track(box.push(bump(by))))
    box.answer({ type: "update", seq: 1, n: 1 })
    box.unlink()
    // sent while no link: it waits behind the unanswered ones
    const later = track(box.push(bump(4)))
    assert.deepStrictEqual(seqs(sent), [1, 2, 3])
    link()
    assert.deepStrictEqual(sent.slice(3), [
      { type: "bump", by: 2, seq: 2 },
      { type: "bump", by: 3, seq: 3 },
      { type: "bump", by: 4, seq: 4 }
    ])
    box.answer({ type: "state", seq: 2, n: 3, duplicate: true })
    box.answer({ type: "update", seq: 3, n: 6 })
    box.answer({ type: "update", seq: 4, n: 10 })
    await settled()
    assert.deepStrictEqual(
      [...events, later].map((event) => event.answer?.update.n),
      [1, 3, 6, 10]
    )
  })

  it("resend: sending pauses until every frame in flight is answered, then goes on from the server's L+1", async () => {
    const { box, sent, link } = outbox()
    link()
    const refused = track(box.push(bump(1)))
    const a = track(box.push(bump(2)))
    const b = track(box.push(bump(3)))
    // the server refused seq 1 without taking it, so 2 and 3 are above L+1 = 1
    box.answer({ type: "error", seq: 1, message: "queue full", applied: false })
    box.answer({ type: "resend", seq: 2, from: 1 })
    const c = track(box.push(bump(4)))
    // seq 3 is still in flight: nothing goes yet, or its answer could be taken for another event's
    assert.deepStrictEqual(seqs(sent), [1, 2, 3])
    box.answer({ type: "resend", seq: 3, from: 1 })
    assert.deepStrictEqual(sent.slice(3), [
      { type: "bump", by: 2, seq: 1 },
      { type: "bump", by: 3, seq: 2 },
      { type: "bump", by: 4, seq: 3 }
    ])
    assert.strictEqual(box.next, 4)
    box.answer({ type: "update", seq: 1, n: 2 })
    box.answer({ type: "update", seq: 2, n: 5 })
    box.answer({ type: "update", seq: 3, n: 9 })
    await settled()
    rejected(refused, false, "refused")
    assert.deepStrictEqual(
      [a, b, c].map((event) => event.answer?.update.n),
      [2, 5, 9]
    )
  })

  it("resend after a full queue: the dropped frames go again from the lowest seq asked", async () => {
    const { box, sent, link } = outbox()
    link()
    const events = [1, 2, 3, 4].map((by) => track(box.push(bump(by))))
    // 1 and 2 were queued and applied; 3 and 4 were dropped unread, each answered with its own seq
    box.answer({ type: "resend", seq: 3, from: 3 })
    box.answer({ type: "resend", seq: 4, from: 4 })
    box.answer({ type: "update", seq: 1, n: 1 })
    assert.deepStrictEqual(seqs(sent), [1, 2, 3, 4])
    box.answer({ type: "update", seq: 2, n: 3 })
    assert.deepStrictEqual(sent.slice(4), [
      { type: "bump", by: 3, seq: 3 },
      { type: "bump", by: 4, seq: 4 }
    ])
    box.answer({ type: "update", seq: 3, n: 6 })
    box.answer({ type: "update", seq: 4, n: 10 })
    await settled()
    assert.deepStrictEqual(
      events.map((event) => event.answer?.update.n),
      [1, 3, 6, 10]
    )
  })

  it("an error answer: not applied fails the event; of unknown outcome, it goes again with its seq after a pause", async () => {
    const { box, sent, link } = outbox()
    link()
    const refused = track(box.push(bump(1)))
    const unknown = track(box.push(bump(2)))
    const next = track(box.push(bump(3)))
    box.answer({ type: "error", seq: 1, message: "refused by the handler", applied: false })
    assert.strictEqual(
      box.answer({ type: "error", seq: 2, message: "the store failed during the commit", applied: "unknown" }),
      "retry"
    )
    assert.strictEqual(box.failures, 1)
    // held: a new event waits until the event of unknown outcome went again
    const later = track(box.push(bump(4)))
    box.answer({ type: "update", seq: 3, n: 4 })
    assert.deepStrictEqual(seqs(sent), [1, 2, 3])
    box.release()
    assert.deepStrictEqual(sent.slice(3), [
      { type: "bump", by: 2, seq: 2 },
      { type: "bump", by: 4, seq: 4 }
    ])
    // it had been applied after all: answered as a duplicate
    box.answer({ type: "state", seq: 2, n: 4, duplicate: true })
    box.answer({ type: "update", seq: 4, n: 8 })
    await settled()
    rejected(refused, false, "refused")
    assert.strictEqual(refused.error?.message, "refused by the handler")
    assert.deepStrictEqual(unknown.answer, { update: { n: 4 }, duplicate: true, overtaken: false })
    assert.strictEqual(next.answer?.update.n, 4)
    assert.strictEqual(later.answer?.update.n, 8)
    assert.strictEqual(box.failures, 0)
  })

  it("an answer overtaken by a newer state still settles its event, and says so", async () => {
    const { box, link } = outbox()
    link()
    const event = track(box.push(bump(1)))
    box.answer({ type: "update", seq: 1, n: 1, overtaken: true })
    await settled()
    assert.deepStrictEqual(event.answer, { update: { n: 1 }, duplicate: false, overtaken: true })
  })

  it("an event whose frame is over the cap fails at once, unsent, and takes no seq", async () => {
    const { box, sent, link } = outbox()
    // 2-byte characters: the cap is in UTF-8 bytes, not in characters
    const big: Bump = { type: "bump", by: 1, note: "é".repeat(40) }
    const frameOf = (event: Bump, seq: number) => JSON.stringify({ ...event, seq })
    const cap = new TextEncoder().encode(frameOf(big, 1)).length - 1
    assert.isAtMost(frameOf(big, 1).length, cap)
    link(cap)
    const refused = track(box.push(big))
    const fits = track(box.push(bump(2)))
    await settled()
    rejected(refused, false, "too_large")
    assert.deepStrictEqual(sent, [{ type: "bump", by: 2, seq: 1 }])
    box.answer({ type: "update", seq: 1, n: 2 })
    await settled()
    assert.strictEqual(fits.answer?.update.n, 2)
  })

  it("an event that cannot be written as JSON fails at once and holds up nothing", async () => {
    const { box, sent, link } = outbox()
    link()
    const cyclic: { type: "bump"; by: number; self?: unknown } = { type: "bump", by: 1 }
    cyclic.self = cyclic
    const invalid = track(box.push(cyclic))
    void box.push(bump(2))
    await settled()
    rejected(invalid, false, "invalid")
    assert.deepStrictEqual(sent, [{ type: "bump", by: 2, seq: 1 }])
  })

  it("an unanswered event over a new link's smaller cap fails as of unknown outcome", async () => {
    const { box, sent, link } = outbox()
    link()
    const event = track(box.push({ type: "bump", by: 1, note: "x".repeat(100) }))
    box.unlink()
    link(64)
    await settled()
    rejected(event, "unknown", "too_large")
    assert.strictEqual(sent.length, 1)
  })

  it("a new token: what an earlier link carried unanswered fails; the rest goes again from seq 1", async () => {
    const { box, sent, link } = outbox()
    link()
    const answered = track(box.push(bump(1)))
    const notApplied = track(box.push(bump(2)))
    const unanswered = track(box.push(bump(3)))
    box.answer({ type: "update", seq: 1, n: 1 })
    box.answer({ type: "resend", seq: 2, from: 9 })
    box.unlink()
    const queued = track(box.push(bump(4)))
    box.restart("new_token")
    assert.strictEqual(box.next, 1)
    link()
    assert.deepStrictEqual(sent.slice(3), [
      { type: "bump", by: 2, seq: 1 },
      { type: "bump", by: 4, seq: 2 }
    ])
    await settled()
    assert.strictEqual(answered.answer?.update.n, 1)
    rejected(unanswered, "unknown", "new_token")
    assert.isUndefined(notApplied.error)
    assert.isUndefined(queued.error)
    assert.strictEqual(box.size, 2)
  })

  it("forgotten: what this link carried was not applied and goes again from seq 1; what an earlier one carried fails", async () => {
    const { box, sent, link } = outbox()
    link()
    const earlier = track(box.push(bump(1)))
    box.unlink()
    link()
    const thisLink = track(box.push(bump(2)))
    assert.deepStrictEqual(seqs(sent), [1, 1, 2])
    assert.strictEqual(box.answer({ type: "forgotten", seq: 1 }), "forgotten")
    assert.strictEqual(box.inFlight, 0)
    box.restart("forgotten")
    box.unlink()
    link()
    assert.deepStrictEqual(sent.slice(3), [{ type: "bump", by: 2, seq: 1 }])
    box.answer({ type: "update", seq: 1, n: 5 })
    await settled()
    rejected(earlier, "unknown", "forgotten")
    assert.strictEqual(thisLink.answer?.update.n, 5)
  })

  it("a socket closed with 1009 fails the largest frame in flight; unknown when it was sent before", async () => {
    const { box, link } = outbox()
    link()
    const small = track(box.push(bump(1)))
    const large = track(box.push({ type: "bump", by: 1, note: "x".repeat(200) }))
    box.unlink()
    box.refuseLargest()
    await settled()
    rejected(large, false, "too_large")
    assert.isUndefined(small.error)

    link()
    const again = track(box.push({ type: "bump", by: 1, note: "y".repeat(200) }))
    box.unlink()
    link()
    box.unlink()
    box.refuseLargest()
    await settled()
    rejected(again, "unknown", "too_large")
    assert.strictEqual(box.size, 1)
  })

  it("close fails every unanswered event: unknown when it was sent, not applied when it never was", async () => {
    const { box, link } = outbox()
    link()
    const sentOne = track(box.push(bump(1)))
    box.unlink()
    const unsent = track(box.push(bump(2)))
    box.close()
    await settled()
    rejected(sentOne, "unknown", "closed")
    rejected(unsent, false, "closed")
    assert.strictEqual(box.size, 0)
  })
})

describe("client retryDelay", () => {
  it("between the base and min(cap, base · 2^attempt), the cap reached and never passed", () => {
    assert.strictEqual(retryDelay(1, 0), 250)
    assert.strictEqual(retryDelay(1, 0.999999), 250 + 0.999999 * 250)
    assert.strictEqual(retryDelay(3, 0.5), 250 + 0.5 * (2000 - 250))
    for (const attempt of [1, 2, 3, 4, 5, 6, 10, 100, 5000]) {
      for (const random of [0, 0.25, 0.5, 0.999999]) {
        const delay = retryDelay(attempt, random)
        assert.isAtLeast(delay, 250)
        assert.isAtMost(delay, Math.min(5000, 250 * 2 ** attempt))
      }
    }
    assert.strictEqual(retryDelay(5000, 0.999999), 250 + 0.999999 * 4750)
    assert.strictEqual(retryDelay(2, 1, { base: 100, cap: 300 }), 300)
    assert.strictEqual(retryDelay(0, 1, { base: 100 }), 200)
  })
})
