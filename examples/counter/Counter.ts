/**
 * The counter of a tab: one slice of its state, changed under the token's lock.
 *
 * Besides the value, the slice keeps a version `v` (one more on every change, assigned
 * under the lock, so versions order a token's changes totally) and `epoch`, the time its
 * first change was made: a counter whose slice expired starts again at version 1 with a
 * later epoch. `(epoch, v)` is what the socket's owner compares to put updates that
 * travelled through different workers back in order.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Mailbox from "leasehold/Mailbox"
import * as State from "leasehold/StateManager"
import { StateManager } from "leasehold/StateManager"

/** The stored counter, and the update sent to the tab's socket after each change. */
export const Count = Schema.Struct({
  n: Schema.Int,
  v: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  epoch: Schema.Number
})
export type Count = typeof Count.Type

/** Sending counts to the tabs' sockets, typed by the schema the worker is built with. */
export const Updates = Mailbox.typed(Count)

/** The slice; a tab without one starts at zero, version 0. */
export const Counter = State.slice("counter", Count, { n: 0, v: 0, epoch: 0 })

/** The largest step a bump may take. */
export const maxStep = 1_000_000

/** A bump that would take the counter out of the range of exact integers. */
export class CounterOverflow extends Data.TaggedError("CounterOverflow")<{
  readonly token: string
  readonly n: number
  readonly by: number
}> {
  override get message(): string {
    return `counter of token ${this.token} is ${this.n}: adding ${this.by} leaves the range of exact integers`
  }
}

/** Whether `a` is a later state of the same token than `b`. */
export const isNewer = (a: Pick<Count, "v" | "epoch">, b: Pick<Count, "v" | "epoch">): boolean =>
  a.epoch > b.epoch || (a.epoch === b.epoch && a.v > b.v)

/**
 * Add `by` to the token's counter; the new count (`bumpAll` of one step). An overflow
 * leaves the count as it was (nothing is written) and fails the bump.
 */
export const bump = (token: string, by: number) => Effect.flatMap(StateManager, (states) => bumpWith(states, token, by))

/** `bump` with the state manager at hand (a socket's handler looks it up once). */
export const bumpWith = (states: StateManager["Service"], token: string, by: number) =>
  Effect.flatMap(bumpAll(states, token, [by]), (results) => Effect.fromResult(results[0]!))

/** One step of a bump on `count`: the new count, or the overflow that leaves it as it was. */
const step = (token: string, count: Count, by: number, now: number): Result.Result<Count, CounterOverflow> => {
  const n = count.n + by
  if (!Number.isSafeInteger(n)) return Result.fail(new CounterOverflow({ token, n: count.n, by }))
  return Result.succeed({ n, v: count.v + 1, epoch: count.v === 0 ? now : count.epoch })
}

/**
 * Bumps of one token by each of `steps`, in order, in one modification: what each gave, a
 * count (its own version) or an overflow (which changes nothing, and the next step goes on
 * from the count before it). One turn of the lock and one write for them all, made before
 * any of the counts is returned: a socket's burst of bumps costs one modification, not one
 * each, and each bump's update still follows the write that holds it. A plain function
 * (`modify`): on the embedded store it runs inside one step of the store, on Redis in one
 * script when this worker holds the last values (else, as when the session decides it when
 * its turn comes, with no step of this fiber in between); each costs less than an effectful
 * one. Nothing is written when every step overflowed.
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

/** The token's counter now. */
export const read = (token: string) => Effect.flatMap(StateManager, (states) => states.get(token, Counter))
