/**
 * The state of every supervised loop of a worker, for health checks.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/**
 * What a supervised loop is doing. `since` is the Clock time (ms) of the last change.
 *
 * @since 0.1.0
 * @category models
 */
export type LoopState =
  | { readonly _tag: "Running"; readonly since: number }
  | { readonly _tag: "Retrying"; readonly since: number; readonly errors: number; readonly lastError: string }
  | { readonly _tag: "Failed"; readonly since: number; readonly error: string }

/**
 * @since 0.1.0
 * @category models
 */
export interface LoopHealth {
  readonly name: string
  readonly state: LoopState
}

/**
 * @since 0.1.0
 * @category models
 */
export declare namespace Health {
  /**
   * @since 0.1.0
   * @category models
   */
  export interface Service {
    /** Every loop that is supervised now, or ended by failure, sorted by name. */
    readonly loops: Effect.Effect<ReadonlyArray<LoopHealth>>
    /** `true` when every loop is running. */
    readonly healthy: Effect.Effect<boolean>
    /** Record a loop's state (used by the supervisor). */
    readonly set: (name: string, state: LoopState) => Effect.Effect<void>
    /** Forget a loop that ended by interruption (used by the supervisor). */
    readonly remove: (name: string) => Effect.Effect<void>
  }
}

/**
 * @since 0.1.0
 * @category tags
 */
export class Health extends Context.Service<Health, Health.Service>()("leasehold/Health") {}

/**
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Health.Service> = Effect.sync(() => {
  const states = new Map<string, LoopState>()
  const loops = Effect.sync(() =>
    [...states.entries()]
      .map(([name, state]): LoopHealth => ({ name, state }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  )
  return Health.of({
    loops,
    healthy: Effect.sync(() => [...states.values()].every((state) => state._tag === "Running")),
    set: (name, state) =>
      Effect.sync(() => {
        states.set(name, state)
      }),
    remove: (name) =>
      Effect.sync(() => {
        states.delete(name)
      })
  })
})

/**
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<Health> = Layer.effect(Health, make)
