/**
 * The Lua shared by the scripts that touch a token's waiter set: a sorted set of instance
 * ids, each scored with its own deadline on the server's clock (ms), `lockMs` after its last
 * registration. A member past its deadline counts for nobody, so an instance that stops
 * registering (a worker that died) leaves the count one lock expiration after its last
 * registration, however often others register.
 *
 * Each fragment reads the named locals of the script it is spliced into (`waiters`,
 * `instanceId`, `lockMs`, `channel`, `contended`) and the `now` that `serverNow` defines.
 *
 * @internal
 */
import type { Dialect } from "../script.js"

/** The server's clock in ms, as `now`: every deadline is written and read on it. @internal */
export const serverNow = `
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
`

/**
 * `contenders`: the members whose deadline has not passed, other than the caller's instance
 * (0 when `instanceId` is ""). It only reads, and runs before the script writes anything, so
 * a waiter key of the wrong type fails the whole script with nothing changed (and the later
 * writes on that key cannot fail).
 *
 * @internal
 */
export const countOthers = `
local contenders = 0
if instanceId ~= "" then
  contenders = redis.call("ZCOUNT", waiters, "(" .. now, "+inf")
  local own = redis.call("ZSCORE", waiters, instanceId)
  if own and tonumber(own) > now then
    contenders = contenders - 1
  end
end
`

/** Drop the expired members, (re)score the instance `lockMs` from `now`, keep the key as long as its newest member, say so. @internal */
export const register = (dialect: Dialect) => `
redis.call("ZREMRANGEBYSCORE", waiters, "-inf", now)
redis.call("ZADD", waiters, now + tonumber(lockMs), instanceId)
redis.call("PEXPIRE", waiters, lockMs)
redis.call("${dialect.publish}", channel, contended)
`

/**
 * The instance leaves, and the expired members with it: when the last live member leaves,
 * the set is empty and Redis deletes it.
 *
 * @internal
 */
export const leave = `
redis.call("ZREMRANGEBYSCORE", waiters, "-inf", now)
redis.call("ZREM", waiters, instanceId)
`
