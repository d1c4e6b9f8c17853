/**
 * The Lua shared by the scripts of a token's queue of waiting workers (DESIGN §4): two sorted
 * sets, `queue` (worker id scored by arrival order, head first) and `deadlines` (worker id
 * scored by its deadline on the server's clock, `lockMs` after its last enqueue or refresh).
 * An entry is in both or in neither; both keys expire with the newest deadline.
 *
 * Each fragment reads the named locals of the script it is spliced into (`lock`, `fence`,
 * `queue`, `deadlines`, `instanceId`, `lockMs`, `handoffMs`, `noticePrefix`, `granted`,
 * `contended`)
 * and the `now` of `serverNow`. The reads come before the writes (`findLate`, `countQueued`),
 * so that a key of another kind refuses a whole step before anything is written.
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
 * `late`: the entries whose deadline has passed. It also reads the queue, so a queue key of
 * another kind refuses the step here, before any write.
 *
 * @internal
 */
export const findLate = `
redis.call("ZCARD", queue)
local late = redis.call("ZRANGEBYSCORE", deadlines, "-inf", now)
`

/** Drop the `late` entries from both keys (Redis deletes a sorted set with its last member). @internal */
export const dropLate = `
for _, member in ipairs(late) do
  redis.call("ZREM", queue, member)
  redis.call("ZREM", deadlines, member)
end
`

/** `queued`: the live entries other than the caller's worker. Reads only. @internal */
export const countQueued = `
local queued = redis.call("ZCOUNT", deadlines, "(" .. now, "+inf")
local own = redis.call("ZSCORE", deadlines, instanceId)
if own and tonumber(own) > now then
  queued = queued - 1
end
`

/**
 * `enqueue(member, atHead)`: a worker not yet queued goes to the tail (1 + the last score) or,
 * `atHead`, to the head (the first score - 1); one already queued keeps its place. Either way
 * its deadline is `lockMs` from now, and both keys live at least that long: their TTL is only
 * ever lengthened, since a worker with a shorter lock expiration than another's must not cut
 * the other's entry short (a new key, without a TTL, reads -1).
 *
 * @internal
 */
export const enqueue = `
local function enqueue(member, atHead)
  if not redis.call("ZSCORE", queue, member) then
    local score = 1
    if atHead then
      local first = redis.call("ZRANGE", queue, 0, 0, "WITHSCORES")
      if first[2] then
        score = tonumber(first[2]) - 1
      end
    else
      local last = redis.call("ZRANGE", queue, -1, -1, "WITHSCORES")
      if last[2] then
        score = tonumber(last[2]) + 1
      end
    end
    redis.call("ZADD", queue, score, member)
  end
  redis.call("ZADD", deadlines, now + tonumber(lockMs), member)
  for _, key in ipairs({queue, deadlines}) do
    if redis.call("PTTL", key) < tonumber(lockMs) then
      redis.call("PEXPIRE", key, lockMs)
    end
  end
end
`

/**
 * `fenceNow()` (spliced in with `grantNext`): the token's fence as a grant names it, the
 * string stored (`"0"` when there is none: the next claim's INCR makes it 1), or `nil` when
 * it is not a canonical whole number (a key of another kind included: read with pcall, it
 * refuses nothing here). The fence only moves at a claim, so it still equals what a grant
 * read while nobody has claimed since.
 */
const fenceNow = `
local function fenceNow()
  local current = redis.pcall("GET", fence)
  if not current then
    return "0"
  end
  if type(current) == "string" and #current <= 16 and (current == "0" or string.match(current, "^[1-9]%d*$")) then
    return current
  end
  return nil
end
`

/**
 * `grantNext()`: when the lock is free and someone is queued, the head leaves the queue, the
 * lock becomes its pending grant (`?<worker>`, which no lock id can equal, for `handoffMs`)
 * and that worker alone is told, by `granted .. " " .. <fence>`: the notice names the grant
 * (the fence as it stands, see `fenceNow`), so a claim made on a late notice can be told from
 * one on a grant that expired unclaimed. A fence that is not a number gives the notice
 * without one (its claim is then an ordinary attempt). Defines `fenceNow` too.
 *
 * @internal
 */
export const grantNext = (dialect: Dialect) => `${fenceNow}
local function grantNext()
  if redis.call("EXISTS", lock) == 1 then
    return
  end
  local head = redis.call("ZRANGE", queue, 0, 0)[1]
  if not head then
    return
  end
  local named = fenceNow()
  redis.call("ZREM", queue, head)
  redis.call("ZREM", deadlines, head)
  redis.call("SET", lock, "?" .. head, "PX", handoffMs)
  redis.call("${dialect.publish}", noticePrefix .. head, named and (granted .. " " .. named) or granted)
end
`

/**
 * Tell the holder of the lock that a worker is queued behind it: a lock id is
 * `<worker>:<n>` (the worker is everything before the last `:`); a pending grant has no
 * holder to tell.
 *
 * @internal
 */
export const noticeHolder = (dialect: Dialect) => `
local holder = redis.call("GET", lock)
if holder and string.sub(holder, 1, 1) ~= "?" then
  local worker = string.match(holder, "^(.*):")
  if worker and worker ~= "" then
    redis.call("${dialect.publish}", noticePrefix .. worker, contended)
  end
end
`
