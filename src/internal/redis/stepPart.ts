/**
 * The one-step modification of the Redis `Driver` (`Store.Stepping`): a token this worker
 * modified last, and let go, is modified again in one round trip. The caller's function runs
 * on the values the last grant left (`LastGrant`), under the fence the step will take; one
 * script then commits it if nothing has changed since (`commitIfUnchanged`: the lock free,
 * nobody queued, the fence and every value as they were). Refused, or with nothing known,
 * the step answers `false` and the modification takes the lock the queued way, the function
 * running again on the values it reads then. A worker that alone modifies a token thus
 * spends one round trip per modification instead of two; one whose token others modify pays
 * a refused step now and then (`LastGrant`'s back-off).
 *
 * Only a grant of the step's own: a modification that `when` puts under this worker's
 * lease goes the lease's way.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { queueKeys } from "../operations/queueKeys.js"
import type { Driver } from "../store/driver.js"
import type { Context } from "./driver.js"
import * as Scripts from "./scripts/index.js"

const notDone = Effect.succeed(false)

/** @internal */
export const stepPart = ({ keys, lastGrant, runAcknowledged, tokenMs }: Context) =>
  ({
    modifyInStep: (token, slices, decide, { when, written }) =>
      // Uninterruptible from the lookup on: the token is taken for this step, and every way
      // out gives it back or forgets it; once decided, the outcome is awaited even if the
      // caller is interrupted meanwhile, as on the queued way (the script may be made all the same).
      Effect.uninterruptible(
        Effect.suspend(() => {
          const asked = when === undefined ? {} : when()
          // not for a step of its own (a lease serves its own modifications)
          if (asked === undefined || asked.holder !== undefined) return notDone
          const known = lastGrant.lookup(token, slices)
          if (known === undefined) return notDone
          const entries = decide(known.values, known.fence + 1)
          // the last entry of a slice wins, as in the other stores
          const next = new Map(entries)
          const values: Array<string> = []
          for (const [i, name] of slices.entries()) {
            const expected = known.values[i]!
            const value = next.get(name)
            values.push(Option.isSome(expected) ? `=${expected.value}` : "-", value === undefined ? "" : `=${value}`)
          }
          return runAcknowledged(
            "commitIfUnchanged",
            Scripts.commitIfUnchanged,
            {
              keys: queueKeys(keys, token),
              restKeys: slices.map((name) => keys.slice(token, name)),
              args: { expected: String(known.fence), tokenMs },
              restArgs: values
            },
            (reply) => reply._tag === "Committed"
          ).pipe(
            Effect.map((reply) => {
              if (reply._tag === "Refused") {
                lastGrant.refused(token)
                return false
              }
              // written: done (the fence is the one the check expected, plus one)
              lastGrant.committed(token, reply.fence, entries)
              written?.(known.values, entries)
              return true
            })
          )
        }).pipe(
          // Made or not, nobody knows (a timeout, a replica that did not acknowledge), or the
          // function threw: the token is not known here either, nor taken any longer; no
          // back-off, this was no contention.
          Effect.onError(() => Effect.sync(() => lastGrant.forget(token)))
        )
      )
  }) satisfies Partial<Driver>
