/**
 * The typed scripts of `RedisStore`: a call names its keys and arguments, so their order
 * on the wire is the script's own, and a reply of another shape is refused by the decoder.
 * (What each script does is the conformance suite's business, on a real server.)
 */
import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import { cluster, commandLine, singleServer } from "../src/internal/redis/script.js"
import * as Scripts from "../src/internal/redis/scripts/index.js"

describe("Redis scripts", () => {
  it("the command line follows the script's declared order, whatever the order of the call's fields", () => {
    const input = {
      keys: { ids: "x", deadlines: "d", queue: "q", fence: "f", lock: "l" },
      restKeys: ["s1", "s2"],
      args: {
        contended: "c",
        granted: "g",
        noticePrefix: "n",
        claim: "",
        instanceId: "i",
        handoffMs: 3,
        tokenMs: 2,
        lockMs: 1,
        lockId: "id"
      }
    }
    deepStrictEqual(commandLine(Scripts.acquireQueued, input), [
      "leaseholdAcquireQueued",
      "7",
      "l",
      "f",
      "q",
      "d",
      "x",
      "s1",
      "s2",
      "id",
      "1",
      "2",
      "3",
      "i",
      "",
      "n",
      "g",
      "c"
    ])
  })

  it("the Lua opens with one named local per key and argument, in the same order", () => {
    const lua = Scripts.releaseQueued.lua(singleServer)
    const header = lua.split("\n").slice(0, 15)
    deepStrictEqual(header, [
      "local lock = KEYS[1]",
      "local fence = KEYS[2]",
      "local queue = KEYS[3]",
      "local deadlines = KEYS[4]",
      "local ids = KEYS[5]",
      "local slices = {unpack(KEYS, 6)}",
      "local lockId = ARGV[1]",
      "local lockMs = ARGV[2]",
      "local tokenMs = ARGV[3]",
      "local handoffMs = ARGV[4]",
      "local instanceId = ARGV[5]",
      "local requeue = ARGV[6]",
      "local queueAs = ARGV[7]",
      "local noticePrefix = ARGV[8]",
      "local granted = ARGV[9]"
    ])
  })

  it("the dialect chooses the publish command; no other text differs", () => {
    for (const script of Scripts.all) {
      const single = script.lua(singleServer)
      const sharded = script.lua(cluster)
      assert.notInclude(single, "SPUBLISH", script.name)
      assert.strictEqual(sharded, single.replaceAll('"PUBLISH"', '"SPUBLISH"'), script.name)
    }
  })

  it("a reply of another shape decodes to nothing", () => {
    assert.isUndefined(Scripts.tryAcquire.decode([1, "7"]))
    assert.isUndefined(Scripts.tryAcquire.decode([1, 7, 3]))
    assert.isUndefined(Scripts.tryAcquire.decode("OK"))
    deepStrictEqual(Scripts.tryAcquire.decode([1, 7, "v", null]), { _tag: "Acquired", fence: 7, values: ["v", null] })
    deepStrictEqual(Scripts.tryAcquire.decode([0, 120]), { _tag: "Held", pttl: 120 })
    deepStrictEqual(Scripts.release.decode(1), { released: true })
    deepStrictEqual(Scripts.release.decode(0), { released: false })
    assert.isUndefined(Scripts.release.decode([1]))
    deepStrictEqual(Scripts.commitAndRelease.decode([1]), { _tag: "Written" })
    deepStrictEqual(Scripts.commitAndRelease.decode([0, null]), { _tag: "Lost", holder: null })
    assert.isUndefined(Scripts.commitAndRelease.decode([0, 3]))
    assert.isUndefined(Scripts.holder.decode(["id", 3, 10]))
    assert.isUndefined(Scripts.describeKeys.decode([["string", 10]]))
  })

  it("the queue scripts' replies, and replies of another shape", () => {
    deepStrictEqual(Scripts.acquireQueued.decode([1, 7, 2, "v", null]), {
      _tag: "Acquired",
      fence: 7,
      queued: 2,
      values: ["v", null]
    })
    deepStrictEqual(Scripts.acquireQueued.decode([0, 120]), { _tag: "Queued", pttl: 120 })
    assert.isUndefined(Scripts.acquireQueued.decode([1, "7", 0]))
    assert.isUndefined(Scripts.acquireQueued.decode([0, "120"]))
    deepStrictEqual(Scripts.releaseQueued.decode([1, 3]), { released: true, queued: 3 })
    assert.isUndefined(Scripts.releaseQueued.decode([1]))
    deepStrictEqual(Scripts.commitAndReleaseQueued.decode([1, 2]), { _tag: "Written", queued: 2 })
    deepStrictEqual(Scripts.commitAndReleaseQueued.decode([0, "B:1"]), { _tag: "Lost", holder: "B:1" })
    assert.isUndefined(Scripts.commitAndReleaseQueued.decode([1]))
    assert.isUndefined(Scripts.queue.decode(["a", 1]))
    assert.isUndefined(Scripts.queueLength.decode("1"))
    assert.isUndefined(Scripts.leaveQueue.decode("OK"))
  })

  it("a call that misnames a key or an argument does not compile", () => {
    const line = () =>
      commandLine(Scripts.extend, {
        keys: { lock: "l", fence: "f", queue: "q", ids: "i" },
        // @ts-expect-error: the argument is `lockId`
        args: { lockID: "id", claim: "", lockMs: 1, tokenMs: 2 }
      })
    const keys = { lock: "l", fence: "f", queue: "q", ids: "i" }
    const missing = () =>
      // @ts-expect-error: `lockMs` is missing
      commandLine(Scripts.extend, { keys, args: { lockId: "id", claim: "", tokenMs: 2 } })
    assert.isFunction(line)
    assert.isFunction(missing)
  })
})
