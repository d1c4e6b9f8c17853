/**
 * Hostile and bad input, on both stores: tokens that are patterns, carry control
 * characters or are 10 kB long; stored slices, socket records and mailbox entries that
 * are truncated JSON, of the wrong type, a valid but 100k-deep JSON value, or very large.
 */
import { assert, describe } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Mailbox from "../../src/Mailbox.js"
import * as StateManager from "../../src/StateManager.js"
import { MailboxStart, type SocketRecord } from "../../src/Store.js"
import type { InvalidInstanceId, InvalidToken } from "../../src/StoreError.js"
import { failsWith, within } from "../conformance/helpers.js"
import { update } from "../delivery/workers.js"
import type { HostileBackend } from "./fixture.js"

/** Every bad token carries this marker, so its absence from the store's log proves it never got there. */
const marker = "h0stile"

export const hostileTokens: ReadonlyArray<readonly [label: string, token: string]> = [
  ["a star", `${marker}*`],
  ["a question mark", `${marker}?`],
  ["a character class", `${marker}[a-z]`],
  ["an escaped glob", `${marker}\\*`],
  ["a hash tag", `{${marker}}`],
  ["a NUL", `${marker}\u0000x`],
  ["CR LF and a command", `${marker}\r\nFLUSHALL\r\n`],
  ["an escape sequence", `${marker}\u001b[2J`],
  ["a newline", `${marker}\nx`],
  ["10 kB", `${marker}${"x".repeat(10_240)}`]
]

const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Number }), { n: 0 })
const Other = StateManager.slice("other", Schema.Struct({ n: Schema.Number }), { n: 0 })

interface Tree {
  readonly children: ReadonlyArray<Tree>
}
const Tree: Schema.Codec<Tree> = Schema.Struct({ children: Schema.Array(Schema.suspend(() => Tree)) })
/** A recursive slice: its decoder recurses as deep as the stored value goes. */
const Nested = StateManager.slice("nested", Tree, { children: [] })

const depth = 100_000
/** Valid JSON, 100k arrays deep. */
const arrayBomb = `${"[".repeat(depth)}${"]".repeat(depth)}`
/** Valid JSON, 100k objects deep, of the shape the recursive slice expects. */
const treeBomb = `${'{"children":['.repeat(depth)}${"]}".repeat(depth)}`
/** 4 MB of valid JSON of the wrong shape. */
const large = JSON.stringify({ n: "x".repeat(4 * 1024 * 1024) })

const badValues: ReadonlyArray<readonly [label: string, raw: string]> = [
  ["truncated JSON", '{"n":4'],
  ["not JSON", "\u0000\u00ff garbage"],
  ["a string for a number", '{"n":"four"}'],
  ["null", "null"],
  ["an array", "[1,2,3]"],
  ["a 100k-deep array", arrayBomb],
  ["a 100k-deep object", treeBomb],
  ["a 4 MB value", large]
]

const warnings = (lines: ReadonlyArray<{ level: string; message: string }>, text: string) =>
  lines.filter((line) => line.level === "WARN" && line.message.includes(text))

const dropped = (reason: string) =>
  Effect.map(Metric.value(Metric.withAttributes(Mailbox.dropped, { reason: reason })), (state) => state.count)

const bump = (s: { readonly n: number }) => [s.n, { n: s.n + 1 }] as const

export const hostileInputSuite = (backend: HostileBackend) =>
  describe(`hostile input (${backend.name})`, () => {
    backend.test(
      "bad tokens (bad instance ids) are refused by every entry point with InvalidToken (InvalidInstanceId), before any I/O",
      (fx) =>
        Effect.gen(function* () {
          const a = yield* fx.worker()
          const entryPoints: ReadonlyArray<
            readonly [string, (token: string) => Effect.Effect<unknown, { readonly _tag: string }>]
          > = [
            ["StateManager.get", (t) => a.states.get(t, Counter)],
            ["StateManager.modify", (t) => a.states.modify(t, Counter, bump)],
            ["StateManager.modifyEffect", (t) => a.states.modifyEffect(t, Counter, (s) => Effect.succeed(bump(s)))],
            [
              "StateManager.modifyAll",
              (t) => a.states.modifyAll(t, { Counter, Other }, (v) => Effect.succeed([null, v] as const))
            ],
            ["TokenManager.link", (t) => a.tokens.link(t, "conn-1")],
            ["TokenManager.disconnect", (t) => a.tokens.disconnect(t, "conn-1")],
            ["TokenManager.owner", (t) => a.tokens.owner(t)],
            ["TokenManager.owner (refresh)", (t) => a.tokens.owner(t, { refresh: true })],
            ["Mailbox.send", (t) => a.mailbox.send(t, update(1))],
            ["Store.tryAcquire", (t) => fx.store.tryAcquire(t, "lock-1", ["counter"])],
            ["Store.commitAndRelease", (t) => fx.store.commitAndRelease(t, "lock-1", [["counter", "{}"]])],
            ["Store.writeIfHolder", (t) => fx.store.writeIfHolder(t, "lock-1", [["counter", "{}"]])],
            ["Store.release", (t) => fx.store.release(t, "lock-1")],
            ["Store.extend", (t) => fx.store.extend(t, "lock-1")],
            ["Store.holder", (t) => fx.store.holder(t)],
            ["Store.readSlices", (t) => fx.store.readSlices(t, ["counter"])],
            ["Store.publish", (t) => fx.store.publish(t, { _tag: "Released" })],
            ["Store.subscribe", (t) => Effect.scoped(fx.store.subscribe(t))],
            ["Store.claimSocket", (t) => fx.store.claimSocket(t, { instanceId: "inst-1", connectionId: "c" })],
            ["Store.claimSockets", (t) => fx.store.claimSockets([[t, { instanceId: "inst-1", connectionId: "c" }]])],
            ["Store.readSocket", (t) => fx.store.readSocket(t)],
            ["Store.tokenKeys", (t) => fx.store.tokenKeys(t)],
            [
              "Store.acquireQueued",
              (t) => fx.store.acquireQueued(t, "inst-1:1", ["counter"], { instanceId: "inst-1" })
            ],
            ["Store.releaseQueued", (t) => fx.store.releaseQueued(t, "inst-1:1", { instanceId: "inst-1" })],
            [
              "Store.commitAndReleaseQueued",
              (t) => fx.store.commitAndReleaseQueued(t, "inst-1:1", [["counter", "{}"]], { instanceId: "inst-1" })
            ],
            ["Store.leaveQueue", (t) => fx.store.leaveQueue(t, "inst-1")],
            ["Store.queueLength", (t) => fx.store.queueLength(t, "inst-1")],
            ["Store.queue", (t) => fx.store.queue(t)],
            ["Store.notices", (t) => Effect.scoped(fx.store.notices(t, "inst-1"))],
            ["Store.channelNotices", (t) => Effect.scoped(fx.store.channelNotices(t, "inst-1"))],
            // an instance id names a mailbox key: the same rules, its own error
            ["Store.mailboxAppend (instance)", (t) => fx.store.mailboxAppend(t, "x", { maxLen: 10, ttlMs: 1_000 })],
            ["Store.mailboxRead (instance)", (t) => fx.store.mailboxRead(t, MailboxStart, { count: 1 })],
            ["Store.acquireQueued (instance)", (t) => fx.store.acquireQueued("fine", "lock-1", [], { instanceId: t })],
            ["Store.releaseQueued (instance)", (t) => fx.store.releaseQueued("fine", "lock-1", { instanceId: t })],
            ["Store.leaveQueue (instance)", (t) => fx.store.leaveQueue("fine", t)],
            ["Store.notices (instance)", (t) => Effect.scoped(fx.store.notices("fine", t))],
            ["Store.channelNotices (instance)", (t) => Effect.scoped(fx.store.channelNotices("fine", t))]
          ]
          for (const [label, token] of hostileTokens) {
            for (const [name, call] of entryPoints) {
              const ofInstance = name.endsWith("(instance)")
              const error = yield* failsWith(
                call(token) as Effect.Effect<unknown, InvalidToken | InvalidInstanceId | { readonly _tag: "other" }>,
                ofInstance ? "InvalidInstanceId" : "InvalidToken"
              ).pipe(Effect.catchDefect((defect) => Effect.die(`${name} (${label}): ${String(defect)}`)))
              assert.strictEqual(
                error._tag === "InvalidInstanceId" ? error.instanceId : error.token,
                token,
                `${name} (${label})`
              )
              // the message names the token, shortened, with its control characters escaped
              assert.isBelow(error.message.length, 300, `${name} (${label})`)
              assert.isFalse(
                [...error.message].some((c) => c.charCodeAt(0) < 0x20),
                `${name} (${label}): a control character in ${JSON.stringify(error.message)}`
              )
            }
          }
          // Control: the same calls with a valid token that carries the marker do reach the store.
          const valid = `${marker}-valid`
          yield* a.states.modify(valid, Counter, bump)
          yield* fx.sawText(valid)
          const reached = (yield* fx.seen).filter((line) => line.includes(marker) && !line.includes(valid))
          deepStrictEqual(reached, [])
          deepStrictEqual(yield* a.tokens.local(hostileTokens[0]![1]), Option.none())
          assert.strictEqual(yield* a.states.get(valid, Counter).pipe(Effect.map((s) => s.n)), 1)
        })
    )

    backend.test(
      "a stored slice that is truncated, of the wrong type, 100k levels deep or 4 MB: the initial value and one warning",
      (fx) =>
        Effect.gen(function* () {
          const a = yield* fx.worker()
          for (const [i, [label, raw]] of badValues.entries()) {
            const token = `bad-slice-${i}`
            const slice = label === "a 100k-deep object" ? Nested : Counter
            yield* fx.putRaw(fx.keys.slice(token, slice.name), raw)
            const named = `slice ${slice.name} of token ${token} does not decode`

            const read = yield* within(`get (${label})`, 30_000, a.states.get(token, slice as typeof Counter))
            deepStrictEqual(read, slice.initial, label)
            const afterGet = warnings(fx.logs, named)
            assert.strictEqual(afterGet.length, 1, `${label}: ${afterGet.map((line) => line.message).join("\n")}`)
            // one line, short, whatever the size of the value
            assert.isBelow(afterGet[0]!.message.length, 500, label)
            assert.notInclude(afterGet[0]!.message, "\n", label)

            if (slice === Counter) {
              const seen = yield* within(`modify (${label})`, 30_000, a.states.modify(token, Counter, bump))
              assert.strictEqual(seen, 0, label)
              deepStrictEqual(yield* fx.getRaw(fx.keys.slice(token, "counter")), Option.some('{"n":1}'), label)
            } else {
              const seen = yield* within(
                `modify (${label})`,
                30_000,
                a.states.modify(token, Nested, (tree) => [tree.children.length, { children: [{ children: [] }] }])
              )
              assert.strictEqual(seen, 0, label)
              deepStrictEqual(
                yield* fx.getRaw(fx.keys.slice(token, "nested")),
                Option.some('{"children":[{"children":[]}]}')
              )
            }
            assert.strictEqual(warnings(fx.logs, named).length, 2, `${label}: one more warning for the modification`)
            // the value written replaced the bad one: no further warning
            yield* a.states.get(token, slice as typeof Counter)
            assert.strictEqual(warnings(fx.logs, named).length, 2, label)
          }
          // a deep value of a recursive slice: no stack overflow either
          yield* fx.putRaw(fx.keys.slice("deep-tree", "nested"), treeBomb)
          deepStrictEqual(yield* a.states.get("deep-tree", Nested), { children: [] })
          assert.isTrue(yield* a.health.healthy)
        })
    )

    backend.test(
      "a socket record that is truncated, of the wrong type or 100k levels deep: CorruptValue; owner is None, link mints a fresh token",
      (fx) =>
        Effect.gen(function* () {
          const a = yield* fx.worker()
          const b = yield* fx.worker()
          const records: ReadonlyArray<readonly [string, string]> = [
            ["truncated JSON", '{"instanceId":"x","conn'],
            ["a number for a string", '{"instanceId":7,"connectionId":"c"}'],
            ["a missing field", '{"instanceId":"x"}'],
            ["a 100k-deep array", arrayBomb],
            ["a 4 MB value", JSON.stringify({ instanceId: "x".repeat(4 * 1024 * 1024) })]
          ]
          for (const [i, [label, raw]] of records.entries()) {
            const token = `bad-record-${i}`
            yield* fx.putRaw(fx.keys.socket(token), raw)
            const corrupt = yield* failsWith(within(label, 30_000, fx.store.readSocket(token)), "CorruptValue")
            assert.isBelow(corrupt.message.length, 500, label)
            assert.strictEqual(
              (yield* failsWith(fx.store.claimSocket(token, { instanceId: a.id, connectionId: "c" }), "CorruptValue"))
                ._tag,
              "CorruptValue"
            )
            // documented by TokenManager: an unreadable record is no owner for a lookup …
            deepStrictEqual(yield* within(label, 30_000, b.tokens.owner(token)), Option.none(), label)
            assert.strictEqual(yield* b.mailbox.send(token, update(i)), "no-owner", label)
            // … and a taken token for a link: the tab gets a fresh token of its own
            const linked = yield* within(label, 30_000, a.tokens.link(token, `conn-${i}`))
            assert.isTrue(linked.fresh, label)
            assert.notStrictEqual(linked.token, token, label)
            deepStrictEqual(
              yield* fx.store.readSocket(linked.token),
              Option.some<SocketRecord>({ instanceId: a.id, connectionId: `conn-${i}` })
            )
            // the corrupt record is left as it was (it is someone's data, not ours to delete)
            deepStrictEqual(yield* fx.getRaw(fx.keys.socket(token)), Option.some(raw), label)
          }
          // a scan skips every corrupt record and lists the good ones
          const listed = yield* within("scan", 30_000, Stream.runCollect(a.tokens.tokens))
          assert.strictEqual(listed.length, records.length)
          for (const [token] of listed) assert.notInclude(token, "bad-record-")
          assert.isTrue(yield* a.health.healthy)
          assert.isTrue(yield* b.health.healthy)
        })
    )

    backend.test(
      "a value the app builds 100k levels deep: InvalidSliceValue or InvalidUpdate, nothing written, the token free at once",
      (fx) =>
        Effect.gen(function* () {
          const a = yield* fx.worker()
          const b = yield* fx.worker()
          let tree: Tree = { children: [] }
          for (let i = 0; i < depth; i++) tree = { children: [tree] }
          yield* a.states.modify("deep", Nested, () => [null, { children: [{ children: [] }] }])
          const stored = yield* fx.getRaw(fx.keys.slice("deep", "nested"))
          const invalid = yield* failsWith(
            within(
              "modify",
              15_000,
              a.states.modify("deep", Nested, () => [null, tree])
            ),
            "InvalidSliceValue"
          )
          assert.strictEqual(invalid.slice, "nested")
          assert.isBelow(invalid.message.length, 500)
          deepStrictEqual(yield* fx.getRaw(fx.keys.slice("deep", "nested")), stored)
          // the lock was let go: another worker's modification goes through at once
          deepStrictEqual(yield* fx.store.holder("deep"), Option.none())
          assert.strictEqual(
            yield* within(
              "the next modification",
              15_000,
              b.states.modify("deep", Nested, (t) => [t.children.length, t])
            ),
            1
          )
          // an update too deep to encode is refused before it is sent
          yield* a.tokens.link("tab", "sid")
          const refused = yield* failsWith(
            within("send", 15_000, b.mailbox.send("tab", JSON.parse(arrayBomb))),
            "InvalidUpdate"
          )
          assert.isBelow(refused.message.length, 500)
          // and so is one for a socket of the sender's own, checked by the schema alone
          const refusedHere = yield* failsWith(
            within("send here", 15_000, a.mailbox.send("tab", JSON.parse(arrayBomb))),
            "InvalidUpdate"
          )
          assert.isBelow(refusedHere.message.length, 500)
          assert.strictEqual(a.received.length, 0)
          assert.strictEqual(yield* b.mailbox.send("tab", update(1)), "sent")
          yield* fx.until(
            "the next update",
            Effect.sync(() => a.received.length === 1)
          )
          assert.isTrue(yield* a.health.healthy)
        })
    )

    backend.test(
      "mailbox entries from a newer schema, 100k levels deep or 4 MB: skipped or read as documented; the reader goes on",
      (fx) =>
        Effect.gen(function* () {
          const a = yield* fx.worker()
          const b = yield* fx.worker()
          yield* a.tokens.link("token1", "sid1")
          const undecodable = yield* dropped("undecodable")
          const append = { maxLen: 1_000, ttlMs: 60_000 }
          const wire = (n: number) => ({ n, at: update(n).at.toISOString(), tags: [`t${n}`] })
          // A newer envelope that only adds fields: read, the additions ignored.
          yield* fx.store.mailboxAppend(
            a.id,
            JSON.stringify({ token: "token1", update: { ...wire(1), priority: "high" }, forwarded: false, v: 2 }),
            append
          )
          // A newer update shape this worker cannot read: skipped.
          yield* fx.store.mailboxAppend(
            a.id,
            JSON.stringify({ token: "token1", update: { count: 2, at: { epochMs: 1 } }, v: 2 }),
            append
          )
          yield* fx.store.mailboxAppend(a.id, arrayBomb, append)
          yield* fx.store.mailboxAppend(a.id, `{"token":"token1","update":${treeBomb}}`, append)
          yield* fx.store.mailboxAppend(
            a.id,
            JSON.stringify({ token: "token1", update: { ...wire(3), tags: [large] } }),
            append
          )
          yield* fx.store.mailboxAppend(a.id, `{"token":"token1","update":${arrayBomb}}`, append)
          assert.strictEqual(yield* b.mailbox.send("token1", update(4)), "sent")
          yield* fx.until(
            "A receives the last update",
            Effect.sync(() => a.received.some(([, value]) => value.n === 4))
          )
          deepStrictEqual(
            a.received.map(([, value]) => value.n),
            [1, 3, 4]
          )
          assert.strictEqual((yield* dropped("undecodable")) - undecodable, 4)
          const skipped = warnings(fx.logs, "mailbox: skipping entry")
          assert.strictEqual(skipped.length, 4)
          for (const line of skipped) assert.isBelow(line.message.length, 500)
          assert.isTrue(yield* a.health.healthy)
        })
    )
  })
