import { assert, describe, it } from "@effect/vitest"
import { TokenMarks } from "../src/internal/session/tokenMarks.js"

describe("TokenMarks", () => {
  it("a mark holds until its deadline, and is dropped once past it", () => {
    const marks = new TokenMarks()
    marks.mark("t", 0, 100)
    assert.isTrue(marks.has("t", 0))
    assert.isTrue(marks.has("t", 99.5))
    assert.isFalse(marks.has("u", 50))
    assert.isFalse(marks.has("t", 100))
    assert.strictEqual(marks.size, 0)
  })

  it("a mark cleared is gone; marked again, its deadline is the new one", () => {
    const marks = new TokenMarks()
    marks.mark("t", 0, 100)
    marks.clear("t")
    assert.isFalse(marks.has("t", 1))
    marks.mark("t", 0, 100)
    marks.mark("t", 50, 300)
    assert.isTrue(marks.has("t", 200))
  })

  it("the expired marks are swept once the map has doubled since the last sweep, the live ones kept", () => {
    const marks = new TokenMarks()
    // 1,024 marks that end at 10, then more at 20: the 1,025th sweeps the ended ones
    for (let i = 0; i < 1024; i++) marks.mark(`old-${i}`, 0, 10)
    assert.strictEqual(marks.size, 1024)
    marks.mark("new-0", 15, 20)
    assert.strictEqual(marks.size, 1)
    assert.isTrue(marks.has("new-0", 15))
    // live marks are never swept: 2,048 live ones grow the map past 1,024
    const live = new TokenMarks()
    for (let i = 0; i < 2048; i++) live.mark(`t-${i}`, 0, 1_000)
    assert.strictEqual(live.size, 2048)
    assert.isTrue(live.has("t-0", 1) && live.has("t-2047", 1))
  })
})

describe("TokenMarks.hasUnlessProbe", () => {
  it("answers marked but every n-th time it is asked, counted from the mark; a new mark counts again", () => {
    const marks = new TokenMarks()
    assert.isFalse(marks.hasUnlessProbe("t", 0, 4))
    marks.mark("t", 0, 100)
    const answers = Array.from({ length: 8 }, () => marks.hasUnlessProbe("t", 1, 4))
    assert.deepStrictEqual(answers, [true, true, true, false, true, true, true, false])
    marks.mark("t", 2, 100)
    assert.deepStrictEqual(
      Array.from({ length: 4 }, () => marks.hasUnlessProbe("t", 3, 4)),
      [true, true, true, false]
    )
    assert.isFalse(marks.hasUnlessProbe("t", 100, 4))
  })
})
