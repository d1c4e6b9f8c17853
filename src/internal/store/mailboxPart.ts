/**
 * The front's mailboxes (`Store.Mailboxes`): append (to an instance, or to the owner of a
 * token's socket record), read (blocking or not), trim, expire, and the reader's cursor,
 * with whole milliseconds and counts.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { SocketRecord, Store } from "../../Store.js"
import { type AcknowledgedError, CorruptValue, type InvalidInstanceId, type InvalidToken } from "../../StoreError.js"
import { decodeSocketRecord } from "../codec.js"
import * as Operations from "../operations/index.js"
import { instanceIdError, tokenError } from "../validate.js"
import { checked, stepOf, wholeMs } from "./checked.js"
import type { Driver } from "./driver.js"

/**
 * `mailboxAppendToOwner`: the driver's one step where it has one, else the record read,
 * then the append to the instance it names. Either way a record that does not decode, or
 * names an invalid instance, fails the same and appends nothing.
 */
const appendToOwner = (
  driver: Driver,
  token: string,
  payload: string,
  maxLen: number,
  ttlMs: number
): Effect.Effect<Option.Option<SocketRecord>, InvalidToken | InvalidInstanceId | CorruptValue | AcknowledgedError> => {
  const key = driver.keys.socket(token)
  const recordOf = (raw: string) =>
    Effect.flatMap(Effect.fromResult(decodeSocketRecord(key, raw)), (record) => {
      const invalid = instanceIdError(record.instanceId)
      return invalid === undefined ? Effect.succeed(record) : Effect.fail(invalid)
    })
  const inOneStep = driver.mailboxAppendToOwner
  if (inOneStep === undefined) {
    return Effect.flatMap(driver.readSocket(token), (raw) =>
      Option.isNone(raw)
        ? Effect.succeed(Option.none<SocketRecord>())
        : Effect.flatMap(recordOf(raw.value), (record) =>
            Effect.as(
              driver.call(Operations.mailboxAppend, { instanceId: record.instanceId, payload, maxLen, ttlMs }),
              Option.some(record)
            )
          )
    )
  }
  return Effect.flatMap(inOneStep(token, payload, maxLen, ttlMs), ({ id, record }) => {
    if (record === undefined) return Effect.succeed(Option.none<SocketRecord>())
    const decoded = recordOf(record)
    // The step appended only for a record naming a valid instance: it and the check here agree.
    return id === undefined
      ? Effect.flatMap(decoded, () =>
          Effect.fail(new CorruptValue({ key, raw: record, reason: "names no instance the store accepts" }))
        )
      : Effect.map(decoded, Option.some)
  })
}

/** Mailboxes: append, read (blocking or not), trim, expire, and the reader's cursor. @internal */
export const mailboxPart = (driver: Driver) => {
  const step = stepOf(driver)
  return {
    mailboxAppend: (instanceId, payload, options) =>
      step(Operations.mailboxAppend, {
        instanceId,
        payload,
        maxLen: options.maxLen,
        ttlMs: wholeMs(options.ttlMs)
      }),
    mailboxAppendToOwner: (token, payload, options) =>
      checked(tokenError(token), () => appendToOwner(driver, token, payload, options.maxLen, wholeMs(options.ttlMs))),
    mailboxRead: (instanceId, afterId, options) =>
      checked(instanceIdError(instanceId), () =>
        Effect.suspend(() => {
          const count = Math.floor(options.count)
          if (!(count >= 1)) return Effect.succeed([])
          // Whole milliseconds, as XREAD BLOCK takes them; under 1 ms means no wait.
          const blockMs = options.blockMs === undefined ? 0 : Math.ceil(options.blockMs)
          return driver.mailboxRead(instanceId, afterId, count, blockMs >= 1 ? blockMs : 0)
        })
      ),
    mailboxTrim: (instanceId, maxLen) =>
      checked(instanceIdError(instanceId), () => driver.mailboxTrim(instanceId, maxLen)),
    mailboxExpire: (instanceId, ttlMs) =>
      checked(instanceIdError(instanceId), () => driver.mailboxExpire(instanceId, wholeMs(ttlMs))),
    mailboxLength: (instanceId) => checked(instanceIdError(instanceId), () => driver.mailboxLength(instanceId)),
    mailboxSetCursor: (instanceId, id, ttlMs) =>
      checked(instanceIdError(instanceId), () => driver.mailboxSetCursor(instanceId, id, wholeMs(ttlMs))),
    mailboxCursor: (instanceId) => checked(instanceIdError(instanceId), () => driver.mailboxCursor(instanceId))
  } satisfies Partial<Store.Service>
}
