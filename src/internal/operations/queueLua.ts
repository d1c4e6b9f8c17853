/**
 * The Lua shared by the scripts of a token's queue of waiting workers
 * (docs/protocol.md#the-queue-hand-off): two sorted sets, `queue` (worker id scored by arrival
 * order, head first) and `deadlines` (worker id scored by its deadline on the server's clock,
 * `lockMs` after its last enqueue or refresh). An entry is in both or in neither; both keys expire
 * with the newest deadline. A third, `ids`, holds the lock id each worker was queued under
 * (`<worker> <lock id>`, score 0): a grant installs it as the lock, so the grantee holds the
 * lock from the grant on, and the grant's notice carries what a claim would have read.
 *
 * Each fragment reads the named locals of the script it is spliced into (`lock`, `fence`,
 * `queue`, `deadlines`, `ids`, `instanceId`, `lockMs`, `tokenMs`, `handoffMs`, `noticePrefix`,
 * `granted`, `contended`)
 * and the `now` of `serverNow`. The reads come before the writes (`findLate`, `countQueued`),
 * so that a key of another kind refuses a whole step before anything is written.
 *
 * @internal
 */
import type { Dialect } from "../redis/script.js"

/** The server's clock in ms, `serverMillis()`: every deadline is written and read on it. @internal */
export const serverClock = `
local function serverMillis()
  local time = redis.call("TIME")
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
`

/** The server's clock in ms, as `now` (`serverClock`). @internal */
export const serverNow = `${serverClock}local now = serverMillis()
`

/**
 * `quiet`: whether none of the queue's three keys exists (the token has never been contended,
 * or not for a while): the step then skips the reads and writes of entries it would not find
 * (an uncontended modification's two steps cost a third of their commands). `late`: the
 * entries whose deadline has passed. It also reads the queue, so a queue key of another kind
 * refuses the step here, before any write.
 *
 * @internal
 */
export const findLate = `
local quiet = redis.call("EXISTS", queue, deadlines, ids) == 0
local late = {}
if not quiet then
  redis.call("ZCARD", queue)
  redis.call("ZCARD", ids)
  late = redis.call("ZRANGEBYSCORE", deadlines, "-inf", now)
end
`

/**
 * `idOf(worker)`: the lock id the worker is queued under, or `false`; `forget(worker)` drops
 * it. A worker id has no space, so its members are those between `<worker> ` and `<worker>!`.
 *
 * @internal
 */
export const ids = `
local function idOf(worker)
  local found = redis.call("ZRANGEBYLEX", ids, "[" .. worker .. " ", "(" .. worker .. "!", "LIMIT", 0, 1)[1]
  return found and string.sub(found, #worker + 2) or false
end
local function forget(worker)
  redis.call("ZREMRANGEBYLEX", ids, "[" .. worker .. " ", "(" .. worker .. "!")
end
`

/** Drop the `late` entries from the queue's keys (Redis deletes a sorted set with its last member). @internal */
export const dropLate = `
for _, member in ipairs(late) do
  redis.call("ZREM", queue, member)
  redis.call("ZREM", deadlines, member)
  forget(member)
end
`

/** `queued`: the live entries other than the caller's worker (after `findLate`). Reads only. @internal */
export const countQueued = `
local queued = 0
if not quiet then
  queued = redis.call("ZCOUNT", deadlines, "(" .. now, "+inf")
  local own = redis.call("ZSCORE", deadlines, instanceId)
  if own and tonumber(own) > now then
    queued = queued - 1
  end
end
`

/**
 * `enqueue(member, atHead, id)`: a worker not yet queued goes to the tail (1 + the last score)
 * or, `atHead`, to the head (the first score - 1); one already queued keeps its place. Either
 * way its deadline is `lockMs` from now, it is queued under the lock id `id` from now on (none
 * for ""), and the keys live at least that long: their TTL is only ever lengthened, since a
 * worker with a shorter lock expiration than another's must not cut the other's entry short
 * (a new key, without a TTL, reads -1).
 *
 * @internal
 */
export const enqueue = `
local function enqueue(member, atHead, id)
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
  forget(member)
  if id ~= "" then
    redis.call("ZADD", ids, 0, member .. " " .. id)
  end
  for _, key in ipairs({queue, deadlines, ids}) do
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
 * `grantNext(carry)`: when the lock is free and someone is queued, the head leaves the queue
 * and the lock becomes its own: the lock id it was queued under, for `handoffMs` (it extends
 * the lock as it holds it), with the fence incremented, and that worker alone is told by
 * `granted .. " " .. <fence> .. " " .. <json>`, where the JSON array holds the workers still
 * queued, the lock id, then the name and value (`false`: none) of each slice of `carry` (the
 * slice keys the step has at hand, their TTL refreshed as a claim refreshes it). A slice that
 * cannot be read (a key of another kind) is left out: the grantee then claims the grant to read
 * it, and hears the error. A head queued without a lock id, or a fence that is not a number,
 * gets a pending grant (`?<worker>`, which no lock id can equal) and the notice
 * `granted .. " " .. <fence>` (the fence as it stands: the notice names the grant) or
 * `granted` alone; it claims it. Defines `fenceNow` too.
 *
 * @internal
 */
export const grantNext = (dialect: Dialect) => `${fenceNow}
local function grantNext(carry)
  if redis.call("EXISTS", lock) == 1 then
    return
  end
  local head = redis.call("ZRANGE", queue, 0, 0)[1]
  if not head then
    return
  end
  local named = fenceNow()
  local id = idOf(head)
  redis.call("ZREM", queue, head)
  redis.call("ZREM", deadlines, head)
  if not (named and id) then
    redis.call("SET", lock, "?" .. head, "PX", handoffMs)
    redis.call("${dialect.publish}", noticePrefix .. head, named and (granted .. " " .. named) or granted)
    return
  end
  local fenced = redis.call("INCR", fence)
  redis.call("PEXPIRE", fence, tokenMs)
  redis.call("SET", lock, id, "PX", handoffMs)
  local carried = {redis.call("ZCARD", queue), id}
  for _, key in ipairs(carry) do
    local found = redis.pcall("GETEX", key, "PX", tokenMs)
    local at = string.find(key, "}:s:", 1, true)
    if type(found) ~= "table" and at then
      carried[#carried + 1] = string.sub(key, at + 4)
      carried[#carried + 1] = found
    end
  end
  redis.call("${dialect.publish}", noticePrefix .. head, granted .. " " .. fenced .. " " .. cjson.encode(carried))
end
`

/**
 * `pendingFor(value, worker)`: whether the lock's value is a grant the worker has not
 * claimed: a pending grant to it, or the lock id it is still recorded as queued under (a
 * grant installs it; taking or releasing the lock forgets it).
 *
 * @internal
 */
export const pendingFor = `
local function pendingFor(value, worker)
  if not value then
    return false
  end
  return value == "?" .. worker or value == idOf(worker)
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
