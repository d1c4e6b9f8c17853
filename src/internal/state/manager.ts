/**
 * The state manager's operations over a worker's leases: a worker's layers
 * (internal/worker.ts) build them over the worker's own leases, which its shutdown flushes.
 * There is one set of leases per worker: two under one instance id would take each other's
 * locks.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { LeaseholdConfig } from "../../LeaseholdConfig.js"
import type { ModifyOptions, Slice, StateManager, Values } from "../../StateManager.js"
import { Store } from "../../Store.js"
import { Lease } from "../lease.js"
import { validateToken } from "../validate.js"
import { decodeOr } from "./decode.js"
import { type ModifyContext, run, runPure } from "./modify.js"

/**
 * The state manager over a worker's leases: `get` reads a leased token's slices from its
 * lease, and every modification runs in one of its sessions.
 */
export const make: Effect.Effect<StateManager.Service, never, Lease | Store | LeaseholdConfig> = Effect.gen(
  function* () {
    const store = yield* Store
    const lease = yield* Lease
    const { maxValueBytes } = yield* LeaseholdConfig
    const env: ModifyContext = { lease, maxValueBytes }

    const get = <A, I>(token: string, s: Slice<A, I>) =>
      Effect.gen(function* () {
        yield* validateToken(token)
        const cached = lease.cached(token, s.name)
        const raw = Option.isSome(cached)
          ? cached.value
          : ((yield* store.readSlices(token, [s.name]))[0] ?? Option.none())
        return yield* decodeOr(token, s, raw)
      })

    const modifyEffect = <A, I, B, E, R>(
      token: string,
      s: Slice<A, I>,
      f: (value: A) => Effect.Effect<readonly [B, A], E, R>,
      options?: ModifyOptions
    ) => run(env, token, [s], (values) => Effect.map(f(values[0] as A), ([b, next]) => [b, [next]] as const), options)

    const modifyAll = <S extends Record<string, Slice<any, any>>, B, E, R>(
      token: string,
      record: S,
      f: (values: Values<S>) => Effect.Effect<readonly [B, Values<S>], E, R>,
      options?: ModifyOptions
    ) => {
      const keys = Object.keys(record)
      return run(
        env,
        token,
        keys.map((key) => record[key]!),
        (values) =>
          Effect.map(
            f(Object.fromEntries(keys.map((key, i) => [key, values[i]])) as Values<S>),
            ([b, next]) => [b, keys.map((key) => next[key])] as const
          ),
        options
      )
    }

    const modifyAllPure = <S extends Record<string, Slice<any, any>>, B>(
      token: string,
      record: S,
      f: (values: Values<S>) => readonly [B, Values<S>],
      options?: ModifyOptions
    ) => {
      const keys = Object.keys(record)
      return runPure(
        env,
        token,
        keys.map((key) => record[key]!),
        (values) => {
          const named: Record<string, unknown> = {}
          for (let i = 0; i < keys.length; i++) named[keys[i]!] = values[i]
          const [b, next] = f(named as Values<S>)
          return [b, keys.map((key) => next[key])] as const
        },
        options
      )
    }

    const service: StateManager.Service = {
      get,
      modify: (token, s, f, options) =>
        runPure(
          env,
          token,
          [s],
          (values) => {
            const [b, next] = f(values[0] as any)
            return [b, [next]] as const
          },
          options
        ),
      modifyEffect,
      modifyAll,
      modifyAllPure
    }
    return service
  }
)
