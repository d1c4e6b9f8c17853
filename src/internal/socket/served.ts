/**
 * A session's worker once built (`SocketSession.layer`): its settings checked, the events
 * other workers ask it to apply served (`apply.ts`) until the session's layer closes, and the
 * sockets whose token another worker now holds closed with 4001.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as LeaseholdConfig from "../../LeaseholdConfig.js"
import { Mailbox } from "../../Mailbox.js"
import type { Options } from "../../SocketSession.js"
import * as StateManager from "../../StateManager.js"
import { TokenManager } from "../../TokenManager.js"
import * as Untyped from "../mailbox/untyped.js"
import * as Apply from "./apply.js"
import { lostCloseCode } from "./connection.js"
import type { Registry } from "./registry.js"
import * as Seq from "./seq.js"

/**
 * How long a closing session lets the calls it is serving finish, at most: a call's
 * modification takes milliseconds while the store answers, and the worker's shutdown has its
 * own deadline (`LEASEHOLD_SHUTDOWN_TIMEOUT_MS`) for its leases' writes after.
 */
const callsDrain = Duration.seconds(2)

/**
 * The settings a session refuses: `leaseDurability: "memory"` (an event is answered once it
 * is stored), and a `maxValueBytes` below the `seq` slice's worst case.
 */
const checkSettings = (settings: LeaseholdConfig.LeaseholdConfig["Service"]) => {
  if (settings.leaseDurability === "memory") {
    return Effect.fail(
      new LeaseholdConfig.InvalidConfig({
        knob: "leaseDurability",
        value: "memory",
        reason: "acknowledges a change before it is stored: a socket session answers an event once it is stored"
      })
    )
  }
  if (settings.maxValueBytes < Seq.maxEncodedBytes) {
    return Effect.fail(
      new LeaseholdConfig.InvalidConfig({
        knob: "maxValueBytes",
        value: String(settings.maxValueBytes),
        reason: `below ${Seq.maxEncodedBytes} bytes, the most the session's slice ${Seq.seqSlice.name} takes: every event of a token whose slice grew past it would fail`
      })
    )
  }
  return Effect.void
}

/**
 * The session's part of a built worker, in the session layer's scope: closed before the
 * worker's own (its loops stopped, its leases written), so no call is served after.
 *
 * @internal
 */
export const serve = <Ev, EvI, U, UI, S extends Record<string, StateManager.Slice<any, any>>, E, R>(
  definition: Options<Ev, EvI, U, UI, S, E, R>,
  registry: Registry
): Effect.Effect<
  void,
  LeaseholdConfig.InvalidConfig,
  LeaseholdConfig.LeaseholdConfig | TokenManager | StateManager.StateManager | Mailbox | Scope.Scope | R
> =>
  Effect.gen(function* () {
    const settings = yield* LeaseholdConfig.LeaseholdConfig
    yield* checkSettings(settings)
    const tokens = yield* TokenManager
    // events applied from outside the sockets (`apply`), and those other workers ask this one to apply
    const mailbox = yield* Mailbox
    const applier = Apply.makeApplier({
      definition,
      states: yield* StateManager.StateManager,
      tokens,
      registry,
      send: Untyped.sendOf(mailbox),
      caller: Untyped.callerOf(mailbox),
      timeout: settings.lockExpiration,
      context: yield* Effect.context<R>()
    })
    Apply.install(applier)
    const { calls } = applier.caller
    calls.serve = Apply.serveCall(applier)
    // The calls being served finish and are answered (the worker is whole until the session's
    // layer has closed), for at most `callsDrain`; then none is served any more.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        calls.serve = undefined
        return Effect.andThen(
          Effect.timeoutOption(FiberSet.awaitEmpty(calls.serving), Duration.min(settings.lockExpiration, callsDrain)),
          FiberSet.clear(calls.serving)
        )
      })
    )
    yield* Effect.forkScoped(
      Stream.runForEach(tokens.lost, (lost) =>
        registry.close(lost.token, lost.connectionId, { code: lostCloseCode, reason: "token held by another worker" })
      ).pipe(Effect.interruptible)
    )
  })
