/**
 * The checks of `LeaseholdConfig.resolve`: each knob's range and every relation between
 * knobs, in a fixed order, the first problem found said as plain words (`Problem`) that
 * `LeaseholdConfig` makes its `InvalidConfig` of.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import type { Input, Settings } from "../../LeaseholdConfig.js"
import type { Problem } from "./environment.js"

const prefixPattern = /^[A-Za-z0-9_.:-]{1,64}$/

/** A master name: what `sentinel monitor` names are in practice (no space, quote or control character). */
const masterNamePattern = /^[A-Za-z0-9_.:-]{1,128}$/

/** The knobs that are counts, not durations. */
const counts = new Set(["mailboxMaxLen", "maxValueBytes", "minReplicasAck"])

const fmt = (d: Duration.Duration) => `${Duration.toMillis(d)}ms`

const problem = (knob: string, value: string, reason: string, other?: { knob: string; value: string }): Problem =>
  other === undefined ? { knob, value, reason } : { knob, value, reason, other }

/** Duration clamps negative numbers to zero; refuse them as given, before they are decoded. */
const checkSigns = (input: Input): Problem | undefined => {
  for (const [knob, value] of Object.entries(input)) {
    if (typeof value === "number" && !counts.has(knob) && !(value >= 0)) {
      return problem(
        knob,
        `${value}ms`,
        knob === "leaseQuantum" || knob === "dataFlushInterval" || knob === "leaseCommitWindow"
          ? "must be zero or a positive duration"
          : "must be a positive duration"
      )
    }
  }
  return undefined
}

/** Each duration on its own: finite, and positive or (the quantum, the commit window, the flush interval) at least zero. */
const checkDurations = (settings: Settings): Problem | undefined => {
  const positive: ReadonlyArray<[string, Duration.Duration]> = [
    ["lockExpiration", settings.lockExpiration],
    ["lockWarningThreshold", settings.lockWarningThreshold],
    ["tokenExpiration", settings.tokenExpiration],
    ["leaseHoldTime", settings.leaseHoldTime],
    ["handoffTimeout", settings.handoffTimeout],
    ["presenceExpiration", settings.presenceExpiration],
    ["retryDelayInitial", settings.retryDelayInitial],
    ["retryDelayMax", settings.retryDelayMax],
    ["commandTimeout", settings.commandTimeout],
    ["connectTimeout", settings.connectTimeout],
    ["replicaAckTimeout", settings.replicaAckTimeout]
  ]
  for (const [knob, value] of positive) {
    const millis = Duration.toMillis(value)
    if (!Number.isFinite(millis) || millis <= 0) return problem(knob, fmt(value), "must be a positive duration")
  }
  const quantum = Duration.toMillis(settings.leaseQuantum)
  if (!Number.isFinite(quantum) || quantum < 0) {
    return problem("leaseQuantum", fmt(settings.leaseQuantum), "must be zero or a positive duration")
  }
  const commitWindow = Duration.toMillis(settings.leaseCommitWindow)
  if (
    !Number.isFinite(commitWindow) ||
    commitWindow < 0 ||
    commitWindow >= Duration.toMillis(settings.lockExpiration)
  ) {
    return problem(
      "leaseCommitWindow",
      fmt(settings.leaseCommitWindow),
      "must be zero or a positive duration below the lock expiration"
    )
  }
  const flushInterval = Duration.toMillis(settings.dataFlushInterval)
  if (!Number.isFinite(flushInterval) || flushInterval < 0) {
    return problem("dataFlushInterval", fmt(settings.dataFlushInterval), "must be zero or a positive duration")
  }
  return undefined
}

/** The durations against the lock's and the token's expirations. */
const checkExpirations = (settings: Settings): Problem | undefined => {
  const lock = { knob: "lockExpiration", value: fmt(settings.lockExpiration) }
  if (Duration.isGreaterThanOrEqualTo(settings.lockWarningThreshold, settings.lockExpiration)) {
    return problem("lockWarningThreshold", fmt(settings.lockWarningThreshold), "must be less than lockExpiration", lock)
  }
  if (Duration.isLessThanOrEqualTo(settings.tokenExpiration, settings.lockExpiration)) {
    // A lock that outlives the state it protects would hold nothing; the fence would restart.
    return problem("tokenExpiration", fmt(settings.tokenExpiration), "must be greater than lockExpiration", lock)
  }
  if (Duration.isGreaterThanOrEqualTo(settings.leaseHoldTime, settings.lockExpiration)) {
    return problem("leaseHoldTime", fmt(settings.leaseHoldTime), "must be less than lockExpiration", lock)
  }
  if (Duration.isGreaterThanOrEqualTo(settings.handoffTimeout, settings.lockExpiration)) {
    // A grant reserved longer than a lock lives would outlast the waiters' own deadlines.
    return problem("handoffTimeout", fmt(settings.handoffTimeout), "must be less than lockExpiration", lock)
  }
  if (Duration.isGreaterThanOrEqualTo(settings.presenceExpiration, settings.tokenExpiration)) {
    // A record expires by itself before its owner could be found absent: presence would decide nothing.
    return problem("presenceExpiration", fmt(settings.presenceExpiration), "must be less than tokenExpiration", {
      knob: "tokenExpiration",
      value: fmt(settings.tokenExpiration)
    })
  }
  if (Duration.toMillis(settings.presenceExpiration) < 30) {
    // Refreshed every third of it: below 10 ms a refresh is a busy loop, and a worker's
    // answer (one round trip each way) would rarely arrive in time.
    return problem("presenceExpiration", fmt(settings.presenceExpiration), "must be at least 30ms")
  }
  return undefined
}

/** The sizes (the mailbox's length, a value's bytes) and the data directory. */
const checkSizes = (settings: Settings): Problem | undefined => {
  if (!Number.isInteger(settings.mailboxMaxLen) || settings.mailboxMaxLen < 1) {
    return problem("mailboxMaxLen", String(settings.mailboxMaxLen), "must be a positive integer")
  }
  if (!Number.isInteger(settings.maxValueBytes) || settings.maxValueBytes < 1) {
    return problem("maxValueBytes", String(settings.maxValueBytes), "must be a positive integer")
  }
  if (Option.isSome(settings.dataDir) && settings.dataDir.value.trim() === "") {
    // An empty path would resolve to the working directory and fill it with state files.
    return problem("dataDir", JSON.stringify(settings.dataDir.value), "must be a directory path, not empty")
  }
  return undefined
}

/** The Sentinel knobs against each other and the other ways to reach Redis (the list itself is read by the store). */
const checkSentinels = (settings: Settings): Problem | undefined => {
  const sentinels = { knob: "redisSentinels", value: "<redacted>" }
  if (Option.isNone(settings.redisSentinels)) {
    return Option.isSome(settings.redisSentinelName)
      ? problem("redisSentinelName", JSON.stringify(settings.redisSentinelName.value), "is set without redisSentinels")
      : undefined
  }
  if (Option.isNone(settings.redisSentinelName)) {
    return problem("redisSentinelName", "(unset)", "must name the master the Sentinels monitor", sentinels)
  }
  if (!masterNamePattern.test(settings.redisSentinelName.value)) {
    return problem(
      "redisSentinelName",
      JSON.stringify(settings.redisSentinelName.value),
      "must be 1–128 characters of [A-Za-z0-9_.:-]"
    )
  }
  if (String(Redacted.value(settings.redisSentinels.value)).trim() === "") {
    return problem("redisSentinels", '""', "must list at least one Sentinel")
  }
  if (Option.isSome(settings.redisUrl)) {
    return problem(
      "redisUrl",
      "<redacted>",
      "must be unset with redisSentinels (credentials, TLS and the database go in the Sentinel URL)",
      sentinels
    )
  }
  if (settings.redisCluster) {
    return problem("redisCluster", "true", "cannot be combined with redisSentinels", sentinels)
  }
  return undefined
}

/** The acknowledgement knobs, against the lock and the ways to reach Redis. */
const checkAcknowledgement = (settings: Settings): Problem | undefined => {
  const { minReplicasAck } = settings
  if (!Number.isSafeInteger(minReplicasAck) || minReplicasAck < 0) {
    return problem("minReplicasAck", String(minReplicasAck), "must be a whole number of replicas, 0 or more")
  }
  if (minReplicasAck > 0 && settings.redisCluster) {
    // A Cluster client spreads one connection's writes over many masters: one WAIT cannot cover them.
    return problem("minReplicasAck", String(minReplicasAck), "is not supported on a Redis Cluster", {
      knob: "redisCluster",
      value: "true"
    })
  }
  if (minReplicasAck > 0 && Duration.isGreaterThanOrEqualTo(settings.replicaAckTimeout, settings.lockExpiration)) {
    // A grant waits for its replicas while its lock's TTL runs: it could expire before its holder knew of it.
    return problem("replicaAckTimeout", fmt(settings.replicaAckTimeout), "must be less than lockExpiration", {
      knob: "lockExpiration",
      value: fmt(settings.lockExpiration)
    })
  }
  return undefined
}

const checkKeyPrefix = (settings: Settings): Problem | undefined =>
  prefixPattern.test(settings.keyPrefix)
    ? undefined
    : problem("keyPrefix", JSON.stringify(settings.keyPrefix), "must be 1–64 characters of [A-Za-z0-9_.:-]")

/**
 * The first problem with these settings (`input`: the knobs as given, whose negative
 * numbers the settings no longer show), or `undefined`.
 *
 * @internal
 */
export const firstProblem = (input: Input, settings: Settings): Problem | undefined =>
  checkSigns(input) ??
  checkDurations(settings) ??
  checkExpirations(settings) ??
  checkSizes(settings) ??
  checkSentinels(settings) ??
  checkAcknowledgement(settings) ??
  checkKeyPrefix(settings)
