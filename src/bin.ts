#!/usr/bin/env node
/**
 * The `leasehold` command: `leasehold inspect token <token>` and
 * `leasehold inspect instance <id>` against a Redis URL (`--url`, or
 * `LEASEHOLD_REDIS_URL`), in text or, with `--json`, as one JSON object. It only reads.
 *
 * Exit codes: 0 on success, 1 when the store cannot be reached or refuses, 2 for bad
 * input (a token that is not valid, such as a pattern).
 *
 * @since 0.1.0
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as References from "effect/References"
import * as Inspect from "./Inspect.js"
import { validateInstanceId, validateToken } from "./internal/validate.js"
import * as LeaseholdConfig from "./LeaseholdConfig.js"
import * as RedisStore from "./RedisStore.js"
import type { Store } from "./Store.js"
import type { InvalidInstanceId, InvalidToken } from "./StoreError.js"

const url = Flag.Redacted("url").pipe(Flag.withDescription("Redis URL (default: LEASEHOLD_REDIS_URL)"), Flag.optional)
const prefix = Flag.String("prefix").pipe(
  Flag.withDescription("key prefix (default: LEASEHOLD_KEY_PREFIX, or leasehold)"),
  Flag.optional
)
const json = Flag.Boolean("json").pipe(Flag.withDescription("print one JSON object"), Flag.withDefault(false))
const cluster = Flag.Boolean("cluster").pipe(
  Flag.withDescription("the URL lists seed nodes of a Redis Cluster (default: LEASEHOLD_REDIS_CLUSTER)"),
  Flag.withDefault(false)
)

const common = { url, prefix, json, cluster }

/** The exit code of a failure: 2 for bad input, 1 for the store. */
let exitCode = 0

/** Input refused before any connection, and the configuration: what exits with 2. */
const invalidInput: ReadonlySet<string> = new Set(["InvalidToken", "InvalidInstanceId", "InvalidConfig"])

const withStore = <A>(
  options: {
    readonly url: Option.Option<Redacted.Redacted>
    readonly prefix: Option.Option<string>
    readonly cluster: boolean
  },
  checked: Effect.Effect<string, InvalidToken | InvalidInstanceId>,
  effect: Effect.Effect<A, unknown, Store>
) =>
  Effect.gen(function* () {
    // Before any connection: a pattern or other bad input never reaches the server.
    yield* checked
    // The environment's knobs, with the options given on the command line over them; a
    // missing Redis URL is the store's InvalidConfig.
    const config = LeaseholdConfig.layerConfig(
      Config.map(
        LeaseholdConfig.config,
        (fromEnv): LeaseholdConfig.Input => ({
          ...fromEnv,
          ...(Option.isSome(options.url) ? { redisUrl: options.url } : {}),
          ...(Option.isSome(options.prefix) ? { keyPrefix: options.prefix.value } : {}),
          ...(options.cluster ? { redisCluster: true } : {})
        })
      )
    )
    return yield* effect.pipe(Effect.provide(RedisStore.layerFromSettings.pipe(Layer.provide(config))))
  }).pipe(
    Effect.catch((error: unknown) => {
      const tagged = error as { readonly _tag?: string; readonly message?: string; readonly knob?: string }
      exitCode = invalidInput.has(tagged._tag ?? "") ? 2 : 1
      const hint = tagged.knob === "redisUrl" ? " (pass --url or set LEASEHOLD_REDIS_URL)" : ""
      return Console.error(`leasehold inspect: ${tagged.message ?? String(error)}${hint}`)
    })
  )

const tokenCommand = Command.make(
  "token",
  { token: Argument.String("token"), ...common },
  ({ token, json, ...options }) =>
    withStore(
      options,
      validateToken(token),
      Effect.flatMap(Inspect.token(token), (report) =>
        Console.log(json ? JSON.stringify(Inspect.tokenJson(report)) : Inspect.tokenText(report))
      )
    )
).pipe(Command.withDescription("the lock, queued workers, slices and socket record of one token"))

const instanceCommand = Command.make(
  "instance",
  { instanceId: Argument.String("instance-id"), ...common },
  ({ instanceId, json, ...options }) =>
    withStore(
      options,
      validateInstanceId(instanceId),
      Effect.flatMap(Inspect.instance(instanceId), (report) =>
        Console.log(json ? JSON.stringify(Inspect.instanceJson(report)) : Inspect.instanceText(report))
      )
    )
).pipe(Command.withDescription("the mailbox of one worker and where its reader is"))

const inspect = Command.make("inspect").pipe(
  Command.withDescription("read what leasehold keeps in Redis, without writing anything"),
  Command.withSubcommands([tokenCommand, instanceCommand])
)

const leasehold = Command.make("leasehold").pipe(Command.withSubcommands([inspect]))

Command.run(leasehold, { version: "0.2.0" }).pipe(
  Effect.tap(() =>
    Effect.sync(() => {
      process.exitCode = exitCode
    })
  ),
  Effect.provide(NodeServices.layer),
  Effect.provideService(References.MinimumLogLevel, "None"),
  NodeRuntime.runMain({ disableErrorReporting: false })
)
