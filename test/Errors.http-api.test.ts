/**
 * leasehold's errors are Schema tagged errors: an app declares them in an `HttpApi`
 * endpoint, its server encodes them to JSON and its client decodes them back, typed.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiClient from "effect/http-api/HttpApiClient"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { InvalidConfig } from "../src/LeaseholdConfig.js"
import { InvalidUpdate } from "../src/Mailbox.js"
import { InvalidSliceValue, LockExpired, ValueTooLarge } from "../src/StateError.js"
import {
  CorruptValue,
  DataDirError,
  InvalidClaim,
  InvalidInstanceId,
  InvalidLockId,
  InvalidSliceName,
  InvalidToken,
  LockLost,
  NotAcknowledged,
  RecordNotStored,
  StoreRefused,
  StoreUnavailable
} from "../src/StoreError.js"

/** One endpoint per error, each answering with the error it is asked for. */
const Api = HttpApi.make("errors").add(
  HttpApiGroup.make("state")
    .add(
      HttpApiEndpoint.get("modify", "/modify/:case", {
        params: { case: Schema.String },
        success: Schema.String,
        error: [
          LockExpired.pipe(HttpApiSchema.status(409)),
          InvalidToken.pipe(HttpApiSchema.status(400)),
          InvalidSliceName.pipe(HttpApiSchema.status(400)),
          InvalidSliceValue.pipe(HttpApiSchema.status(400)),
          ValueTooLarge.pipe(HttpApiSchema.status(413)),
          StoreUnavailable.pipe(HttpApiSchema.status(503)),
          StoreRefused.pipe(HttpApiSchema.status(503)),
          NotAcknowledged.pipe(HttpApiSchema.status(503))
        ]
      })
    )
    .add(
      HttpApiEndpoint.get("other", "/other/:case", {
        params: { case: Schema.String },
        success: Schema.String,
        error: [
          InvalidInstanceId,
          InvalidLockId,
          InvalidClaim,
          CorruptValue,
          LockLost,
          DataDirError,
          RecordNotStored,
          InvalidUpdate,
          InvalidConfig
        ]
      })
    )
)

const lockExpired = new LockExpired({
  token: "tab-1",
  event: Option.some("bump"),
  expected: "w1:7",
  current: Option.none(),
  lockExpirationMs: 2000
})
// What RedisStore wraps: the library's own Error, kept as the cause.
const unavailable = new StoreUnavailable({
  operation: "commit",
  reason: "connection closed",
  cause: new Error("Connection is closed.")
})
const notStored = new RecordNotStored({
  token: "tab-2",
  connectionId: "c1",
  cause: new StoreRefused({ operation: "claim", reply: "OOM command not allowed" }),
  fresh: true
})
const dataDir = new DataDirError({ path: "/var/lib/x", operation: "lock", reason: "held", cause: { code: "EEXIST" } })
const invalidConfig = new InvalidConfig({
  knob: "lockExpiration",
  value: "2000 millis",
  other: { knob: "tokenExpiration", value: "3 seconds" },
  reason: "must be shorter"
})

const GroupsLive = HttpApiBuilder.group(Api, "state", (handlers) =>
  handlers
    .handle("modify", ({ params }) =>
      params.case === "expired"
        ? Effect.fail(lockExpired)
        : params.case === "unavailable"
          ? Effect.fail(unavailable)
          : Effect.fail(new InvalidSliceName({ slice: "a b", reason: "characters outside [A-Za-z0-9_.:-]" }))
    )
    .handle("other", ({ params }) =>
      params.case === "not-stored"
        ? Effect.fail(notStored)
        : params.case === "data-dir"
          ? Effect.fail(dataDir)
          : Effect.fail(invalidConfig)
    )
)

const ServerLive = HttpRouter.serve(HttpApiBuilder.layer(Api).pipe(Layer.provide(GroupsLive)), {
  disableListenLog: true,
  disableLogger: true
}).pipe(Layer.provideMerge(NodeHttpServer.layerTest))

layer(ServerLive)("leasehold's errors over an HttpApi", (it) => {
  it.effect("a LockExpired comes back to the client typed, equal in tag, fields and message", () =>
    Effect.gen(function* () {
      const client = yield* HttpApiClient.make(Api)
      const error = yield* Effect.flip(client.state.modify({ params: { case: "expired" } }))
      assert.strictEqual(error._tag, "LockExpired")
      assert.instanceOf(error, LockExpired)
      if (error._tag !== "LockExpired") return
      assert.isTrue(Schema.toEquivalence(LockExpired)(error, lockExpired))
      assert.strictEqual(error.message, lockExpired.message)
    })
  )

  it.effect("a StoreUnavailable with an Error cause travels as JSON; the cause comes back as an Error", () =>
    Effect.gen(function* () {
      const client = yield* HttpApiClient.make(Api)
      const error = yield* Effect.flip(client.state.modify({ params: { case: "unavailable" } }))
      assert.instanceOf(error, StoreUnavailable)
      if (error._tag !== "StoreUnavailable") return
      assert.strictEqual(error.operation, "commit")
      assert.strictEqual(error.message, unavailable.message)
      assert.instanceOf(error.cause, Error)
      assert.strictEqual((error.cause as Error).message, "Connection is closed.")
    })
  )

  it.effect("an invalid slice name has its own tag", () =>
    Effect.gen(function* () {
      const client = yield* HttpApiClient.make(Api)
      const error = yield* Effect.flip(client.state.modify({ params: { case: "slice" } }))
      assert.strictEqual(error._tag, "InvalidSliceName")
    })
  )

  it.effect("errors holding other errors, literals and optional fields round-trip", () =>
    Effect.gen(function* () {
      const client = yield* HttpApiClient.make(Api)
      const stored = yield* Effect.flip(client.state.other({ params: { case: "not-stored" } }))
      assert.instanceOf(stored, RecordNotStored)
      if (stored._tag !== "RecordNotStored") return
      assert.instanceOf(stored.cause, StoreRefused)
      assert.strictEqual(stored.fresh, true)
      assert.strictEqual(stored.message, notStored.message)
      const dir = yield* Effect.flip(client.state.other({ params: { case: "data-dir" } }))
      assert.instanceOf(dir, DataDirError)
      if (dir._tag !== "DataDirError") return
      assert.strictEqual(dir.operation, "lock")
      assert.deepStrictEqual(dir.cause, { code: "EEXIST" })
      const config = yield* Effect.flip(client.state.other({ params: { case: "config" } }))
      assert.instanceOf(config, InvalidConfig)
      assert.strictEqual(config.message, invalidConfig.message)
    })
  )
})

describe("leasehold's errors as schemas", () => {
  it.effect("every error encodes to JSON and decodes to an equal error", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [Schema.Codec<any, any>, unknown]> = [
        [LockExpired, lockExpired],
        [StoreUnavailable, unavailable],
        [RecordNotStored, notStored],
        [DataDirError, dataDir],
        [InvalidConfig, invalidConfig],
        [InvalidToken, new InvalidToken({ token: "a*", reason: "characters outside [A-Za-z0-9_.:-]" })],
        [InvalidInstanceId, new InvalidInstanceId({ instanceId: "w 1", reason: "x" })],
        [InvalidLockId, new InvalidLockId({ lockId: "?B", reason: "x" })],
        [InvalidClaim, new InvalidClaim({ claim: "1.5", reason: "x" })],
        [InvalidSliceValue, new InvalidSliceValue({ token: "t", slice: "s", reason: "x" })],
        [ValueTooLarge, new ValueTooLarge({ token: "t", slice: "s", bytes: 10, maxBytes: 5 })],
        [CorruptValue, new CorruptValue({ key: "k", raw: "{", reason: "not JSON" })],
        [LockLost, new LockLost({ token: "t", lockId: "l", holder: Option.some("m") })],
        [NotAcknowledged, new NotAcknowledged({ operation: "grant", acknowledged: 0, required: 1, timeoutMs: 50 })],
        [InvalidUpdate, new InvalidUpdate({ token: "t", reason: "x" })]
      ]
      for (const [schema, error] of cases) {
        const json = Schema.toCodecJson(schema)
        const encoded = yield* Schema.encodeEffect(json)(error)
        const decoded = yield* Schema.decodeUnknownEffect(json)(JSON.parse(JSON.stringify(encoded)))
        const e = error as { readonly _tag: string; readonly message: string }
        assert.strictEqual(decoded._tag, e._tag)
        assert.strictEqual(decoded.message, e.message, e._tag)
      }
    })
  )
})
