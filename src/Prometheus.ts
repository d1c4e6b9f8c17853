/**
 * Effect's metrics in the Prometheus text exposition format (version 0.0.4), for a
 * `/metrics` endpoint: every metric of the process's registry, leasehold's and the
 * app's alike.
 *
 * ```ts
 * HttpRouter.get("/metrics", Effect.map(Prometheus.render, (body) =>
 *   HttpServerResponse.text(body, { contentType: Prometheus.contentType })))
 * ```
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import type * as MetricKey from "effect/MetricKey"
import * as MetricKeyType from "effect/MetricKeyType"
import type * as MetricLabel from "effect/MetricLabel"
import type * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"

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
  readonly help: Option.Option<string>
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

const labels = (tags: ReadonlyArray<MetricLabel.MetricLabel>, extra: ReadonlyArray<readonly [string, string]> = []) => {
  const all = [...tags.map((tag) => [labelName(tag.key), tag.value] as const), ...extra]
  return all.length === 0 ? "" : `{${all.map(([key, value]) => `${key}="${escapeLabel(value)}"`).join(",")}}`
}

const typeOf = (key: MetricKey.MetricKey.Untyped): Type | undefined => {
  const keyType = key.keyType
  if (MetricKeyType.isCounterKey(keyType) || MetricKeyType.isFrequencyKey(keyType)) return "counter"
  if (MetricKeyType.isGaugeKey(keyType)) return "gauge"
  if (MetricKeyType.isHistogramKey(keyType)) return "histogram"
  if (MetricKeyType.isSummaryKey(keyType)) return "summary"
  return undefined
}

const samplesOf = (name: string, pair: MetricPair.MetricPair.Untyped): ReadonlyArray<string> => {
  const tags = pair.metricKey.tags
  const state = pair.metricState
  if (MetricState.isCounterState(state) || MetricState.isGaugeState(state)) {
    const value = MetricState.isCounterState(state) ? state.count : state.value
    return [`${name}${labels(tags)} ${number(value)}`]
  }
  if (MetricState.isFrequencyState(state)) {
    return [...state.occurrences].map(([key, count]) => `${name}${labels(tags, [["key", key]])} ${number(count)}`)
  }
  if (MetricState.isHistogramState(state)) {
    // Effect's buckets are cumulative already, as the format wants them.
    const buckets = state.buckets.filter(([bound]) => bound !== Number.POSITIVE_INFINITY)
    return [
      ...buckets.map(([bound, count]) => `${name}_bucket${labels(tags, [["le", number(bound)]])} ${number(count)}`),
      `${name}_bucket${labels(tags, [["le", "+Inf"]])} ${number(state.count)}`,
      `${name}_sum${labels(tags)} ${number(state.sum)}`,
      `${name}_count${labels(tags)} ${number(state.count)}`
    ]
  }
  if (MetricState.isSummaryState(state)) {
    return [
      ...state.quantiles.map(
        ([quantile, value]) =>
          `${name}${labels(tags, [["quantile", number(quantile)]])} ${number(Option.getOrElse(value, () => Number.NaN))}`
      ),
      `${name}_sum${labels(tags)} ${number(state.sum)}`,
      `${name}_count${labels(tags)} ${number(state.count)}`
    ]
  }
  return []
}

/**
 * Render metric pairs: one family per name (its `# HELP` from the description, its
 * `# TYPE`), sorted by name; series of one name with different tags share the family.
 * Frequencies become counters with a `key` label. A name used with two different types
 * keeps the first and drops the others, since the format allows one type per name.
 *
 * @since 0.1.0
 * @category rendering
 */
export const format = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, Family>()
  for (const pair of pairs) {
    const type = typeOf(pair.metricKey)
    if (type === undefined) continue
    const name = metricName(pair.metricKey.name)
    let family = families.get(name)
    if (family === undefined) {
      family = { name, type, help: pair.metricKey.description, series: [] }
      families.set(name, family)
    } else if (family.type !== type) {
      continue
    }
    family.series.push([labels(pair.metricKey.tags), samplesOf(name, pair)])
  }
  const lines: Array<string> = []
  for (const family of [...families.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (Option.isSome(family.help)) lines.push(`# HELP ${family.name} ${escapeHelp(family.help.value)}`)
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
