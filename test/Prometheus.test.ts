import { assert, describe, it } from "@effect/vitest"
import { deepStrictEqual } from "@effect/vitest/utils"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Prometheus from "../src/Prometheus.js"

const family = (text: string, name: string) =>
  text
    .split("\n")
    .filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`) || line.includes(` ${name} `))

describe("Prometheus", () => {
  it.effect("counters and gauges, with help, type and escaped labels", () =>
    Effect.gen(function* () {
      const counter = Metric.counter("prom_test_requests_total", { description: "requests\nserved", incremental: true })
      yield* Metric.update(Metric.withAttributes(counter, { route: 'a"b\\c' }), 3)
      yield* Metric.update(Metric.withAttributes(counter, { route: "plain" }), 1)
      const gauge = Metric.gauge("prom_test_open")
      yield* Metric.update(gauge, 2)
      const text = yield* Prometheus.render
      deepStrictEqual(family(text, "prom_test_requests_total"), [
        "# HELP prom_test_requests_total requests\\nserved",
        "# TYPE prom_test_requests_total counter",
        'prom_test_requests_total{route="a\\"b\\\\c"} 3',
        'prom_test_requests_total{route="plain"} 1'
      ])
      deepStrictEqual(family(text, "prom_test_open"), ["# TYPE prom_test_open gauge", "prom_test_open 2"])
      assert.isTrue(text.endsWith("\n"))
    })
  )

  it.effect("a histogram gives cumulative buckets ending in +Inf, a sum and a count", () =>
    Effect.gen(function* () {
      const histogram = Metric.histogram("prom_test_wait_ms", {
        boundaries: Metric.boundariesFromIterable([1, 10]),
        description: "wait"
      })
      for (const value of [0.5, 5, 50]) yield* Metric.update(histogram, value)
      const text = yield* Prometheus.render
      deepStrictEqual(family(text, "prom_test_wait_ms").slice(0, 2), [
        "# HELP prom_test_wait_ms wait",
        "# TYPE prom_test_wait_ms histogram"
      ])
      const lines = text.split("\n").filter((line) => line.startsWith("prom_test_wait_ms_"))
      deepStrictEqual(lines, [
        'prom_test_wait_ms_bucket{le="1"} 1',
        'prom_test_wait_ms_bucket{le="10"} 2',
        'prom_test_wait_ms_bucket{le="+Inf"} 3',
        "prom_test_wait_ms_sum 55.5",
        "prom_test_wait_ms_count 3"
      ])
    })
  )

  it("names outside the charset are rewritten; a name reused with another type keeps the first", () => {
    const text = Prometheus.format([])
    assert.strictEqual(text, "")
    const counter = Metric.counter("prom-test.dotted")
    const gauge = Metric.gauge("prom_test_dotted")
    Effect.runSync(Effect.andThen(Metric.update(counter, 1), Metric.update(gauge, 7)))
    const rendered = Effect.runSync(Prometheus.render)
    deepStrictEqual(family(rendered, "prom_test_dotted"), ["# TYPE prom_test_dotted counter", "prom_test_dotted 1"])
  })

  it.effect("a frequency becomes a counter with a key label", () =>
    Effect.gen(function* () {
      const frequency = Metric.frequency("prom_test_kinds")
      yield* Metric.update(frequency, "x")
      yield* Metric.update(frequency, "x")
      yield* Metric.update(frequency, "y")
      const text = yield* Prometheus.render
      deepStrictEqual(family(text, "prom_test_kinds"), [
        "# TYPE prom_test_kinds counter",
        'prom_test_kinds{key="x"} 2',
        'prom_test_kinds{key="y"} 1'
      ])
    })
  )
})
