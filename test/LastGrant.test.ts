import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Option from "effect/Option"
import * as LastGrant from "../src/internal/redis/lastGrant.js"

/** A grant of `token` under `lockId` at `fence` that read `value` of "s", then its release writing `wrote`. */
const grantAndRelease = (
  known: LastGrant.LastGrant,
  token: string,
  fence: number,
  value: string | null,
  wrote?: string
) => {
  known.granted(`w:${fence}`, token, fence, ["s"], [value])
  known.released(`w:${fence}`, token, wrote === undefined ? [] : [["s", wrote]], true)
}

describe("LastGrant", () => {
  it("knows what a grant read and its release wrote, under the grant's fence", () => {
    const known = LastGrant.make()
    assert.isUndefined(known.lookup("t", ["s"]))
    grantAndRelease(known, "t", 3, "a", "b")
    // a slice the grant did not read is not known
    assert.isUndefined(known.lookup("t", ["s", "other"]))
    deepStrictEqual(known.lookup("t", ["s"]), { fence: 3, values: [Option.some("b")] })
    known.committed("t", 4, [["s", "c"]])
    deepStrictEqual(known.lookup("t", ["s"]), { fence: 4, values: [Option.some("c")] })
  })

  it("a step in flight takes the token: a second modification finds nothing until its outcome", () => {
    const known = LastGrant.make()
    grantAndRelease(known, "t", 1, null, "a")
    assert.isDefined(known.lookup("t", ["s"]))
    assert.isUndefined(known.lookup("t", ["s"]))
    known.committed("t", 2, [["s", "b"]])
    deepStrictEqual(known.lookup("t", ["s"]), { fence: 2, values: [Option.some("b")] })
    // an outcome unknown: forgotten, with no back-off (the next release is remembered)
    known.forget("t")
    assert.isUndefined(known.lookup("t", ["s"]))
    grantAndRelease(known, "t", 3, "b", "c")
    assert.strictEqual(known.lookup("t", ["s"])?.fence, 3)
  })

  it("a release of a grant not seen here, or a write under a grant otherwise, forgets the token", () => {
    const known = LastGrant.make()
    grantAndRelease(known, "t", 1, null, "a")
    known.released("notice:2", "t", [["s", "b"]], true)
    assert.isUndefined(known.lookup("t", ["s"]))
    grantAndRelease(known, "t", 3, "b", "c")
    known.granted("w:4", "t", 4, ["s"], ["c"])
    known.forgetGrant("w:4")
    assert.isUndefined(known.lookup("t", ["s"]))
  })

  it("a lost release, a grant written under otherwise, a release of another token: nothing known", () => {
    const known = LastGrant.make()
    known.granted("w:1", "t", 1, ["s"], [null])
    known.released("w:1", "t", [], false)
    assert.isUndefined(known.lookup("t", ["s"]))
    known.granted("w:2", "t", 2, ["s"], [null])
    known.forgetGrant("w:2")
    known.released("w:2", "t", [["s", "x"]], true)
    assert.isUndefined(known.lookup("t", ["s"]))
    known.granted("w:3", "t", 3, ["s"], [null])
    known.released("w:3", "u", [], true)
    assert.isUndefined(known.lookup("t", ["s"]))
    assert.isUndefined(known.lookup("u", ["s"]))
  })

  it("a refused token is not known for its next 2, then 4 releases; a commit resets the back-off", () => {
    const known = LastGrant.make()
    let fence = 0
    grantAndRelease(known, "t", ++fence, null, "1")
    known.refused("t")
    assert.isUndefined(known.lookup("t", ["s"]))
    for (let i = 0; i < 2; i++) {
      grantAndRelease(known, "t", ++fence, "1", "2")
      assert.isUndefined(known.lookup("t", ["s"]), `release ${i + 1} after one refusal`)
    }
    grantAndRelease(known, "t", ++fence, "1", "2")
    assert.strictEqual(known.lookup("t", ["s"])?.fence, fence)
    known.refused("t")
    for (let i = 0; i < 4; i++) {
      grantAndRelease(known, "t", ++fence, "1", "2")
      assert.isUndefined(known.lookup("t", ["s"]), `release ${i + 1} after two refusals in a row`)
    }
    grantAndRelease(known, "t", ++fence, "1", "2")
    known.committed("t", ++fence, [])
    known.refused("t")
    // one refusal in a row again: 2 releases
    for (let i = 0; i < 2; i++) grantAndRelease(known, "t", ++fence, "1", "2")
    grantAndRelease(known, "t", ++fence, "1", "2")
    assert.strictEqual(known.lookup("t", ["s"])?.fence, fence)
  })

  it("bounded: the least recently used token leaves first; a large state is not known", () => {
    const known = LastGrant.make()
    for (let i = 0; i <= LastGrant.maxTokens; i++) grantAndRelease(known, `t${i}`, 1, null, "v")
    assert.isUndefined(known.lookup("t0", ["s"]))
    assert.isDefined(known.lookup("t1", ["s"]))
    assert.isDefined(known.lookup(`t${LastGrant.maxTokens}`, ["s"]))
    grantAndRelease(known, "big", 1, null, "x".repeat(LastGrant.maxChars + 1))
    assert.isUndefined(known.lookup("big", ["s"]))
    grantAndRelease(known, "grows", 1, null, "x")
    assert.isDefined(known.lookup("grows", ["s"]))
    known.committed("grows", 2, [["s", "x".repeat(LastGrant.maxChars + 1)]])
    assert.isUndefined(known.lookup("grows", ["s"]))
  })
})
