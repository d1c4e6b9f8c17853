/**
 * A tab's socket linked to its token (`linkTab`): a fresh token for a socket that asks for
 * none, the token asked for when it is free, and, when another socket holds it, a reconnect
 * of the same page (same client id: the old socket replaced at once) or a reload (the old
 * socket goes within `reloadGrace`) told from a duplicate tab (a fresh token).
 *
 * @internal
 */
import { randomUUID } from "node:crypto"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { TokenManager } from "../../TokenManager.js"
import type { Registry } from "./registry.js"

/**
 * How long a socket whose token another socket holds waits for that one to go before it
 * is taken for a duplicate tab. A reload opens the new socket while the server may still
 * be closing the old one (its record goes when the close is handled); a duplicate tab's
 * original socket stays open, so the wait ends with a fresh token.
 */
export const reloadGrace = Duration.seconds(1)

const reloadPoll = Duration.millis(50)

/** The close code of a socket whose client opened a newer one on this worker (it had not seen the old one close). */
export const replacedCloseCode = 4002

/**
 * Link a socket to its token, telling a reconnect of the same page (same client id), and a
 * reload (the old socket goes within the grace), from a duplicate tab.
 *
 * @internal
 */
export const linkTab = (asked: string | undefined, id: string, client: string | undefined, registry: Registry) =>
  Effect.gen(function* () {
    const tokens = yield* TokenManager
    const link = (token: string) =>
      tokens.link(token, id).pipe(
        Effect.catchTag("RecordNotStored", (error) =>
          // Linked here; the record is written once the store is back (see TokenManager).
          // A fresh token must still reach the tab, or its socket and its reloads part ways.
          Effect.as(Effect.logWarning(error.message), {
            token: error.token,
            fresh: error.fresh === true,
            takenOver: false
          })
        )
      )
    const linked = yield* link(asked ?? randomUUID())
    if (asked === undefined || !linked.fresh) return linked
    // The same page, whose old socket this worker has not seen close (a connection left
    // half-open by a network loss or a sleep): the new one takes its place at once. A
    // duplicated tab has a client id of its own. A holder on another worker is waited for.
    const holder = registry.find(asked)
    if (client !== undefined && holder !== undefined && holder.client === client) {
      yield* registry.close(asked, holder.id, {
        code: replacedCloseCode,
        reason: "replaced by a newer socket of the same client"
      })
      yield* tokens.disconnect(asked, holder.id).pipe(Effect.ignore)
      yield* tokens.disconnect(linked.token, id)
      return yield* link(asked)
    }
    const gone = tokens.owner(asked, { refresh: true }).pipe(
      Effect.map(Option.isNone),
      Effect.orElseSucceed(() => false),
      Effect.delay(reloadPoll),
      Effect.repeat({ until: (gone) => gone }),
      Effect.timeoutOption(reloadGrace)
    )
    if (Option.isNone(yield* gone)) return linked
    // The other socket went: this is its tab, reloaded. Give the fresh token back and take the tab's own.
    yield* tokens.disconnect(linked.token, id)
    return yield* link(asked)
  })
