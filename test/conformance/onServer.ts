/**
 * The parts of a conformance fixture that act on one redis-server directly (raw writes and
 * expiries, counts, blocked clients, subscribers, a hang, dropped subscriptions): shared by
 * the backends that run the store against a single server.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { untilReal } from "../support/poll.js"
import * as RedisServer from "../support/RedisServer.js"
import type { Fixture } from "./backend.js"

/** `uncounted`: the `cmdstat_<name>` entries left out of `commandsProcessed` (the harness's own). */
export const onServer = (
  server: RedisServer.RedisServer,
  uncounted: ReadonlySet<string>
): Pick<
  Fixture,
  | "awaitBlockedRead"
  | "putRaw"
  | "putRawExpiring"
  | "expireRaw"
  | "keyCount"
  | "commandsProcessed"
  | "channelSubscribers"
  | "quiet"
  | "hang"
  | "dropSubscriptions"
> => ({
  awaitBlockedRead: untilReal(
    "a blocked client on the server",
    Effect.map(Effect.orDie(server.info("clients")), (info) => Number(info.blocked_clients) > 0),
    { within: 2_000 }
  ),
  putRaw: (key, value) => Effect.orDie(server.command("SET", key, value)),
  putRawExpiring: (key, value, ttlMs) => Effect.orDie(server.command("SET", key, value, "PX", ttlMs)),
  expireRaw: (key, ttlMs) => Effect.asVoid(Effect.orDie(server.command("PEXPIRE", key, ttlMs))),
  keyCount: Effect.orDie(server.dbsize),
  commandsProcessed: Option.some(
    Effect.orDie(
      Effect.map(server.info("commandstats"), (stats) => RedisServer.commandCalls(stats, (name) => uncounted.has(name)))
    )
  ),
  channelSubscribers: Option.some((channel) => Effect.orDie(server.numsub(channel))),
  quiet: {
    _tag: "Publish",
    publish: (channel, message) => Effect.asVoid(Effect.orDie(server.command("PUBLISH", channel, message)))
  },
  hang: Option.some({ begin: server.pause, end: server.resume }),
  dropSubscriptions: Effect.orDie(server.clientKill("pubsub"))
})
