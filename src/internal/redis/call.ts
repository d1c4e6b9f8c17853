/**
 * How the Redis driver runs a described operation (`Driver.call`): the script's keys and
 * arguments from the description, the script on the command connection (or, for a step a
 * replica must acknowledge, on the acknowledged one with `minReplicasAck`), then its reply
 * decoded and read. A reply of another shape is `StoreRefused`.
 *
 * What the Redis driver does around some operations (the last grant it remembers, a read
 * of no slices made without a round trip) is `around`'s, by operation.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import { type AcknowledgedError, StoreRefused } from "../../StoreError.js"
import type { AnyOperation, OperationContext } from "../operations/operation.js"
import { unexpectedReply } from "../operations/operation.js"
import type { Driver } from "../store/driver.js"
import type { Acknowledged } from "./acknowledged.js"
import { invoke } from "./script.js"
import type { Topology } from "./topology.js"

/** What the driver does around an operation: its call (`effect`) made into another. @internal */
export type Around = (effect: Effect.Effect<any, AcknowledgedError>, args: any) => Effect.Effect<any, AcknowledgedError>

/** @internal */
export const makeCall = (
  env: OperationContext,
  run: Topology["run"],
  acknowledged: Acknowledged | undefined,
  around: ReadonlyMap<AnyOperation, Around>
): Driver["call"] => {
  const callOf = (operation: AnyOperation, args: unknown): Effect.Effect<unknown, AcknowledgedError> => {
    const { name, script } = operation
    const input = operation.input(env, args)
    const send = (connection: object) => invoke(connection, script, input)
    const read = (reply: unknown): Effect.Effect<unknown, StoreRefused> => {
      const decoded = script.decode(reply)
      if (decoded === undefined) return Effect.fail(unexpectedReply(name, reply))
      const out = operation.read(decoded, args, env.lockMs)
      return out instanceof StoreRefused ? Effect.fail(out) : Effect.succeed(out)
    }
    const { wrote } = operation
    if (wrote === undefined || acknowledged === undefined) return Effect.flatMap(run(name, send), read)
    return Effect.flatMap(
      acknowledged.run(name, send, (reply) => {
        // a reply that does not decode fails in `read`, acknowledged or not
        const decoded = script.decode(reply)
        return decoded === undefined || wrote(decoded, args)
      }),
      read
    )
  }
  return ((operation: AnyOperation, args: unknown) => {
    const made = around.get(operation)
    return made === undefined ? callOf(operation, args) : made(callOf(operation, args), args)
  }) as Driver["call"]
}
