/**
 * The wire form of a worker's notices: `granted:<token> <fence>`, with what a grant that
 * installed the grantee's lock id carries after a second space, and `contended:<token>`.
 * A token may contain `:` but never a space, so the fence is never read as part of it, and
 * a notice of the older form (no number) is a `Granted` without a fence.
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Option from "effect/Option"
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

  it("a grant that installed the grantee's lock id carries the lock id, the workers queued and the slices", () => {
    // as the scripts publish it (Redis's cjson escapes "/", which JSON reads the same)
    const wire = `granted:a:b 12 [2,"w1:7","counter","{\\"n\\":1,\\"p\\":\\"a\\/b\\"}","gone",false]`
    deepStrictEqual(decodeNotice("a:b", wire), {
      _tag: "Granted",
      fence: 12,
      handedOver: {
        lockId: "w1:7",
        queued: 2,
        values: new Map([
          ["counter", Option.some('{"n":1,"p":"a/b"}')],
          ["gone", Option.none()]
        ])
      }
    })
    // nothing carried
    deepStrictEqual(decodeNotice("t", 'granted:t 3 [0,"w:1"]'), {
      _tag: "Granted",
      fence: 3,
      handedOver: { lockId: "w:1", queued: 0, values: new Map() }
    })
  })

  it("a carried part that does not decode leaves a plain Granted with its fence: the grantee claims it", () => {
    for (const tail of [
      "not json",
      "{}",
      "[]",
      '[1,"w:1","a"]',
      '["1","w:1"]',
      '[-1,"w:1"]',
      '[1,""]',
      '[1,"w:1",3,"v"]',
      '[1,"w:1","a",3]',
      '[1,"w:1","a",null]'
    ]) {
      deepStrictEqual(decodeNotice("t", `granted:t 5 ${tail}`), { _tag: "Granted", fence: 5 }, tail)
    }
    // the fence must still be one
    assert.isUndefined(decodeNotice("t", 'granted:t x [0,"w:1"]'))
  })
})
