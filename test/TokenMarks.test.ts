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

  it("marked again, a token's deadline is the new one", () => {
    const marks = new TokenMarks()
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
    // live marks are never swept, and the next sweep waits for the map to double: 1,500 marks
    // (the 1,025th swept none: the next sweep is at 2,048), then later ones, the first 1,500 ended
    const grown = new TokenMarks()
    for (let i = 0; i < 1500; i++) grown.mark(`t-${i}`, 0, 1_000)
    grown.mark("late-0", 5_000, 6_000)
    assert.strictEqual(grown.size, 1501)
    for (let i = 1; i <= 547; i++) grown.mark(`late-${i}`, 5_000, 6_000)
    assert.strictEqual(grown.size, 2048)
    grown.mark("last", 5_000, 6_000)
    assert.strictEqual(grown.size, 549)
    assert.isTrue(grown.has("late-0", 5_000) && grown.has("last", 5_000))
  })
})
