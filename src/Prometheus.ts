/**
 * Effect's metrics in the Prometheus text exposition format (version 0.0.4), for a
 * `/metrics` endpoint: every metric of the process's registry, leasehold's and the
 * app's alike.
 *
 * ```ts
 * import { Effect } from "effect"
 * import { HttpRouter, HttpServerResponse } from "effect/http"
 * import { Prometheus } from "leasehold"
 *
 * const metrics = HttpRouter.add("GET", "/metrics", Effect.map(Prometheus.render, (body) =>
 *   HttpServerResponse.text(body, { contentType: Prometheus.contentType })))
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"

/**
 * The `Content-Type` of the text format.
 *
 * @since 0.1.0
 * @category constants
 */
export const contentType = "text/plain; version=0.0.4; charset=utf-8"

type Type = "counter" | "gauge" | "histogram" | "summary"

interface Family {
  readonly name: string
  readonly type: Type
  readonly help: string | undefined
  /** Each series' samples, keyed by its labels: series are sorted, a histogram's buckets keep their order. */
  readonly series: Array<readonly [labels: string, samples: ReadonlyArray<string>]>
}

// A name may come from anywhere in the app; anything outside the format's charset would
// make a scraper reject the whole page.
const metricName = (name: string): string => {
  const cleaned = name.replace(/[^a-zA-Z0-9_:]/g, "_")
  return /^[a-zA-Z_:]/.test(cleaned) ? cleaned : `_${cleaned}`
}

const labelName = (name: string): string => {
  const cleaned = name.replace(/[^a-zA-Z0-9_]/g, "_")
  return /^[a-zA-Z_]/.test(cleaned) ? cleaned : `_${cleaned}`
}

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')

const escapeHelp = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

const number = (value: number | bigint): string => {
  if (typeof value === "bigint") return value.toString()
  if (Number.isNaN(value)) return "NaN"
  if (value === Number.POSITIVE_INFINITY) return "+Inf"
  if (value === Number.NEGATIVE_INFINITY) return "-Inf"
  return String(value)
}

type Attributes = Metric.Metric.AttributeSet | undefined

const labels = (attributes: Attributes, extra: ReadonlyArray<readonly [string, string]> = []) => {
  const all = [...Object.entries(attributes ?? {}).map(([key, value]) => [labelName(key), value] as const), ...extra]
  return all.length === 0 ? "" : `{${all.map(([key, value]) => `${key}="${escapeLabel(value)}"`).join(",")}}`
}

const types: Record<Metric.Metric.Snapshot["type"], Type> = {
  Counter: "counter",
  Frequency: "counter",
  Gauge: "gauge",
  Histogram: "histogram",
  Summary: "summary"
}

const samplesOf = (name: string, snapshot: Metric.Metric.Snapshot): ReadonlyArray<string> => {
  const tags = snapshot.attributes
  switch (snapshot.type) {
    case "Counter":
      return [`${name}${labels(tags)} ${number(snapshot.state.count)}`]
    case "Gauge":
      return [`${name}${labels(tags)} ${number(snapshot.state.value)}`]
    case "Frequency":
      return [...snapshot.state.occurrences].map(
        ([key, count]) => `${name}${labels(tags, [["key", key]])} ${number(count)}`
      )
    case "Histogram": {
      // Effect's buckets are cumulative already, as the format wants them.
      const state = snapshot.state
      const buckets = state.buckets.filter(([bound]) => bound !== Number.POSITIVE_INFINITY)
      return [
        ...buckets.map(([bound, count]) => `${name}_bucket${labels(tags, [["le", number(bound)]])} ${number(count)}`),
        `${name}_bucket${labels(tags, [["le", "+Inf"]])} ${number(state.count)}`,
        `${name}_sum${labels(tags)} ${number(state.sum)}`,
        `${name}_count${labels(tags)} ${number(state.count)}`
      ]
    }
    case "Summary": {
      const state = snapshot.state
      return [
        ...state.quantiles.map(
          ([quantile, value]) =>
            `${name}${labels(tags, [["quantile", number(quantile)]])} ${number(value ?? Number.NaN)}`
        ),
        `${name}_sum${labels(tags)} ${number(state.sum)}`,
        `${name}_count${labels(tags)} ${number(state.count)}`
      ]
    }
  }
}

/**
 * Render metric snapshots: one family per name (its `# HELP` from the description, its
 * `# TYPE`), sorted by name; series of one name with different tags share the family.
 * Frequencies become counters with a `key` label. A name used with two different types
 * keeps the first and drops the others, since the format allows one type per name.
 *
 * @since 0.1.0
 * @category rendering
 */
export const format = (snapshots: ReadonlyArray<Metric.Metric.Snapshot>): string => {
  const families = new Map<string, Family>()
  for (const snapshot of snapshots) {
    const type = types[snapshot.type]
    const name = metricName(snapshot.id)
    let family = families.get(name)
    if (family === undefined) {
      family = { name, type, help: snapshot.description, series: [] }
      families.set(name, family)
    } else if (family.type !== type) {
      continue
    }
    family.series.push([labels(snapshot.attributes), samplesOf(name, snapshot)])
  }
  const lines: Array<string> = []
  for (const family of [...families.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (family.help !== undefined) lines.push(`# HELP ${family.name} ${escapeHelp(family.help)}`)
    lines.push(`# TYPE ${family.name} ${family.type}`)
    for (const [, samples] of family.series.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) lines.push(...samples)
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`
}

/**
 * Every metric of the process, rendered.
 *
 * @since 0.1.0
 * @category rendering
 */
export const render: Effect.Effect<string> = Effect.map(Metric.snapshot, format)
