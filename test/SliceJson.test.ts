import { assert, describe, it } from "@effect/vitest"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { jsonCodec } from "../src/internal/state/json.js"

// A slice's stored text is read and written in two steps (JSON, then the schema's JSON codec)
// rather than through `Schema.fromJsonString`: every outcome must be the composed schema's,
// its text on success and its error message on failure.

class Point extends Schema.Class<Point>("Point")({ x: Schema.Number, y: Schema.Number }) {}

const schemas = {
  counter: Schema.Struct({ n: Schema.Number }),
  finite: Schema.Struct({ n: Schema.Finite, tags: Schema.Array(Schema.String) }),
  optional: Schema.Struct({ a: Schema.optional(Schema.String), b: Schema.NullOr(Schema.Boolean) }),
  date: Schema.Struct({ at: Schema.Date }),
  option: Schema.Struct({ maybe: Schema.Option(Schema.Number) }),
  point: Point,
  bigint: Schema.Struct({ big: Schema.BigInt }),
  record: Schema.Record(Schema.String, Schema.Number),
  tuple: Schema.Tuple([Schema.String, Schema.Number])
}

const values: Record<keyof typeof schemas, ReadonlyArray<unknown>> = {
  counter: [{ n: 1 }, { n: Number.POSITIVE_INFINITY }, { n: Number.NaN }, { n: "1" }, { m: 1 }, null, undefined],
  finite: [
    { n: 1.5, tags: ["a"] },
    { n: Number.NaN, tags: [] },
    { n: 1, tags: [1] }
  ],
  optional: [{ b: null }, { a: "x", b: true }, { a: 1, b: null }, { b: undefined }],
  date: [{ at: new Date(0) }, { at: new Date(Number.NaN) }, { at: "2020" }],
  option: [{ maybe: Option.some(1) }, { maybe: Option.none() }, { maybe: 1 }],
  point: [new Point({ x: 1, y: 2 }), { x: 1, y: 2 }, { x: 1 }],
  bigint: [{ big: 12345678901234567890n }, { big: 1 }],
  record: [{ a: 1, b: 2 }, { a: "1" }, {}],
  tuple: [["a", 1], ["a"], [1, "a"]]
}

const texts = [
  '{"n":1}',
  '{"n":"Infinity"}',
  '{"n":"NaN"}',
  '{"n":"x"}',
  '{"n":1,"extra":true}',
  "{",
  "",
  "null",
  '"text"',
  '{"at":"1970-01-01T00:00:00.000Z"}',
  '{"at":"not a date"}',
  '{"maybe":{"_tag":"Some","value":1}}',
  '{"maybe":{"_tag":"None"}}',
  '{"x":1,"y":2}',
  '{"big":"12345678901234567890"}',
  '{"big":1}',
  '{"a":1,"b":2}',
  '["a",1]',
  '{"n":1.5,"tags":["a"]}',
  '{"b":null}',
  '{"a":1,"b":null}',
  ' \n{ "n" : 2 } '
]

/** The same outcome: equal successes, or errors with the same message. */
const same = (label: string, actual: Result.Result<unknown, Schema.SchemaError>, expected: typeof actual) => {
  if (Result.isSuccess(expected)) {
    assert.isTrue(Result.isSuccess(actual), `${label}: succeeds as the composed schema does`)
    assert.deepStrictEqual(Result.getOrThrow(actual), expected.success, label)
  } else {
    assert.isTrue(Result.isFailure(actual), `${label}: fails as the composed schema does`)
    if (Result.isFailure(actual)) assert.strictEqual(actual.failure.message, expected.failure.message, label)
  }
}

describe("a slice's JSON codec", () => {
  for (const [name, schema] of Object.entries(schemas) as Array<[keyof typeof schemas, Schema.Codec<any, any>]>) {
    it(`${name}: decodes and encodes as Schema.fromJsonString of its JSON codec`, () => {
      const composed = Schema.fromJsonString(Schema.toCodecJson(schema))
      const codec = jsonCodec(schema)
      for (const text of texts) {
        same(`decode ${name} ${JSON.stringify(text)}`, codec.decode(text), Schema.decodeUnknownResult(composed)(text))
      }
      for (const value of values[name]) {
        same(`encode ${name} ${String(value)}`, codec.encode(value), Schema.encodeResult(composed)(value))
      }
    })
  }

  it("a value JSON cannot write fails as the composed schema does", () => {
    const schema = Schema.Struct({ any: Schema.Unknown })
    const composed = Schema.fromJsonString(Schema.toCodecJson(schema))
    const codec = jsonCodec(schema)
    const circular: Record<string, unknown> = {}
    circular.self = circular
    for (const value of [{ any: circular }, { any: 1n }, { any: () => 1 }, { any: Symbol("s") }, { any: [1] }]) {
      same(`encode ${String(value.any)}`, codec.encode(value), Schema.encodeResult(composed)(value))
    }
    const unknown = Schema.fromJsonString(Schema.toCodecJson(Schema.Unknown))
    for (const value of [undefined, () => 1, 1]) {
      same(`encode ${String(value)}`, jsonCodec(Schema.Unknown).encode(value), Schema.encodeResult(unknown)(value))
    }
  })

  it("text nested too deeply to parse fails as a parse error, not a thrown one", () => {
    const schema = Schema.Struct({ n: Schema.Number })
    const codec = jsonCodec(schema)
    const deep = `${"[".repeat(200_000)}${"]".repeat(200_000)}`
    assert.isTrue(Result.isFailure(codec.decode(deep)))
  })
})
