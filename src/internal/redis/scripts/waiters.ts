/**
 * The waiter set on its own: register (always publishes `contended`, also when already a
 * member, so no re-registration is silent), deregister, count the others, list the live
 * members. The lock scripts do the same in their own steps (`waiterLua`).
 *
 * @internal
 */
import { asArray, define } from "../script.js"
import { countOthers, leave, register as registerLua, serverNow } from "./waiterLua.js"

/** @internal */
export const register = define({
  name: "leaseholdRegisterWaiter",
  keys: ["waiters"],
  args: ["instanceId", "lockMs", "channel", "contended"],
  body: (dialect) => `${serverNow}${registerLua(dialect)}
return 1
`,
  decode: (reply): true | undefined => (reply === 1 ? true : undefined)
})

/** @internal */
export const deregister = define({
  name: "leaseholdDeregisterWaiter",
  keys: ["waiters"],
  args: ["instanceId"],
  body: () => `${serverNow}${leave}
return 1
`,
  decode: (reply): true | undefined => (reply === 1 ? true : undefined)
})

/** @internal */
export const otherContenders = define({
  name: "leaseholdOtherContenders",
  keys: ["waiters"],
  args: ["instanceId"],
  body: () => `${serverNow}${countOthers}
return contenders
`,
  decode: (reply): number | undefined => (typeof reply === "number" ? reply : undefined)
})

/** The members whose deadline has not passed. Reads only. @internal */
export const live = define({
  name: "leaseholdWaiters",
  keys: ["waiters"],
  args: [],
  body: () => `${serverNow}
return redis.call("ZRANGEBYSCORE", waiters, "(" .. now, "+inf")
`,
  decode: (reply): ReadonlyArray<string> | undefined => {
    const list = asArray(reply)
    return list?.every((member) => typeof member === "string") ? (list as ReadonlyArray<string>) : undefined
  }
})
