/**
 * The counter of a tab: one slice of its state, and the socket session whose `bump` events
 * change it. Its version `v` (one more per change, under the lock) and `epoch` (the time of
 * its first change; a slice that expired starts again with a later one) order a token's
 * updates, however many workers they travelled through.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SocketSession from "leasehold/SocketSession"
import * as State from "leasehold/StateManager"
import { StateManager } from "leasehold/StateManager"

/** The stored counter, and the update sent to the tab's socket after each change. */
export const Count = Schema.Struct({
  n: Schema.Int,
  v: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  epoch: Schema.Number
})
export type Count = typeof Count.Type

/** The slice; a tab without one starts at zero, version 0. */
export const Counter = State.slice("counter", Count, { n: 0, v: 0, epoch: 0 })

/** The largest step a bump may take. */
export const maxStep = 1_000_000

/** A step of a bump: an integer within ±`maxStep`. */
export const Step = Schema.Int.check(
  Schema.isBetween(
    { minimum: -maxStep, maximum: maxStep },
    { message: `must be an integer between -${maxStep} and ${maxStep}` }
  )
)

/** The one event a tab sends: `{"type":"bump","by":K}`. */
export const Bump = Schema.Struct({ type: Schema.Literal("bump"), by: Step })

/** A bump that would take the counter out of the range of exact integers. */
export class CounterOverflow extends Data.TaggedError("CounterOverflow")<{
  readonly token?: string | undefined
  readonly n: number
  readonly by: number
}> {
  override get message(): string {
    const of = this.token === undefined ? "" : ` of token ${this.token}`
    return `counter${of} is ${this.n}: adding ${this.by} leaves the range of exact integers`
  }
}

/** Whether `a` is a later state of the same token than `b`. */
export const isNewer = (a: Pick<Count, "v" | "epoch">, b: Pick<Count, "v" | "epoch">): boolean =>
  a.epoch > b.epoch || (a.epoch === b.epoch && a.v > b.v)

/** One step of a bump on `count`: the new count, or the overflow that leaves it as it was. */
const step = (token: string | undefined, count: Count, by: number, now: number) => {
  const n = count.n + by
  if (!Number.isSafeInteger(n)) return Result.fail(new CounterOverflow({ token, n: count.n, by }))
  return Result.succeed({ n, v: count.v + 1, epoch: count.v === 0 ? now : count.epoch })
}

/**
 * The tab's socket: each `bump` applied under the token's lock, answered with the new count.
 * A pure handler (`decide`): the events waiting together are one plain modification.
 */
export const session = SocketSession.make({
  events: Bump,
  updates: Count,
  slices: { counter: Counter },
  decide: (bump, { counter }, now) =>
    Result.map(step(undefined, counter, bump.by, now), (next) => [next, { counter: next }] as const),
  view: ({ counter }) => counter,
  isNewer
})

/**
 * Bumps by each of `steps` in one modification: each a count, or an overflow that changes
 * nothing (the next goes on from the count before it). A plain function: one store step.
 */
export const bumpAll = (states: StateManager["Service"], token: string, steps: ReadonlyArray<number>) =>
  Effect.clockWith((clock) => {
    const now = clock.currentTimeMillisUnsafe()
    return states.modify(
      token,
      Counter,
      (count): readonly [ReadonlyArray<Result.Result<Count, CounterOverflow>>, Count] => {
        const results: Array<Result.Result<Count, CounterOverflow>> = []
        let current = count
        for (const by of steps) {
          const result = step(token, current, by, now)
          if (Result.isSuccess(result)) current = result.success
          results.push(result)
        }
        return [results, current]
      },
      { event: "bump" }
    )
  })

/** Add `by` to the token's counter: the new count, or an overflow that changes nothing. */
export const bump = (token: string, by: number) =>
  Effect.flatMap(StateManager, (states) =>
    Effect.flatMap(bumpAll(states, token, [by]), (results) => Effect.fromResult(results[0]!))
  )

/** The token's counter now. */
export const read = (token: string) => Effect.flatMap(StateManager, (states) => states.get(token, Counter))
