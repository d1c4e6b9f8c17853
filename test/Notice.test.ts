/**
 * The wire form of a worker's notices: `granted:<token> <fence>` and `contended:<token>`.
 * A token may contain `:` but never a space, so the fence is never read as part of it, and
 * a notice of the older form (no number) is a `Granted` without a fence.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import { decodeNotice, decodeTokenNotice, encodeNotice } from "../src/internal/codec.js"

describe("notices on the wire", () => {
  it("a Granted notice carries its fence after a space, and decodes with it, whatever the token", () => {
    for (const token of ["tok", "a:b", "a:7", "x.y-z_1:2:3"]) {
      const wire = encodeNotice(token, { _tag: "Granted", fence: 7 })
      assert.strictEqual(wire, `granted:${token} 7`)
      deepStrictEqual(decodeTokenNotice(wire), { token, notice: { _tag: "Granted", fence: 7 } })
      deepStrictEqual(decodeNotice(token, wire), { _tag: "Granted", fence: 7 })
    }
    deepStrictEqual(decodeNotice("tok", "granted:tok 0"), { _tag: "Granted", fence: 0 })
    // the token "a" is not the token "a:7"
    assert.isUndefined(decodeNotice("a", "granted:a:7 3"))
    assert.isUndefined(decodeNotice("a:7", "granted:a 7"))
  })

  it("a Granted notice without a number (the older form) is a Granted without a fence", () => {
    assert.strictEqual(encodeNotice("a:b", { _tag: "Granted" }), "granted:a:b")
    deepStrictEqual(decodeTokenNotice("granted:a:b"), { token: "a:b", notice: { _tag: "Granted" } })
    deepStrictEqual(decodeNotice("a:b", "granted:a:b"), { _tag: "Granted" })
  })

  it("what is not a fence after the space makes no notice", () => {
    for (const wire of [
      "granted:tok x",
      "granted:tok -1",
      "granted:tok 1.5",
      "granted:tok 07",
      "granted:tok ",
      "granted: 7"
    ]) {
      assert.isUndefined(decodeTokenNotice(wire), wire)
      assert.isUndefined(decodeNotice("tok", wire), wire)
    }
    assert.isUndefined(decodeTokenNotice(`granted:tok ${"9".repeat(17)}`))
    deepStrictEqual(decodeNotice("a:b", "contended:a:b"), { _tag: "Contended" })
  })
})
