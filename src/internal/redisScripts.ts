/**
 * The Lua scripts of `RedisStore`. Each one is one atomic step of DESIGN §3 and touches
 * only keys of one token (all carry the `{<token>}` hash tag), so every script runs on
 * one Cluster slot. Channels are not keys: they travel in ARGV. On a cluster the scripts
 * publish with SPUBLISH (`shardedScripts`): a token's signal channel carries the token's
 * hash tag, so it lives in the script's own slot.
 *
 * Redis does not roll back a script that fails half-way, so a script that writes before
 * a step that can fail (a GETEX on a key of the wrong type) undoes its write itself.
 *
 * @internal
 */

/** A script as `defineCommand` takes it; without `numberOfKeys` the caller passes the key count first. */
export interface ScriptDefinition {
  readonly lua: string
  readonly numberOfKeys?: number
}

/**
 * The waiter part shared by the lock scripts, as Lua text over the given KEYS/ARGV slots.
 * The waiter set is a sorted set: each instance id scored with its own deadline (the
 * server's clock, in ms, `lockMs` after its last registration), so an instance that stops
 * registering (a worker that died) leaves the count after one lock expiration, however
 * often the others register. `count` reads the server's clock into `now` and the members
 * whose deadline has not passed, other than the caller, into `contenders`; it runs before
 * the script writes anything, so a waiter key of the wrong type fails the whole script with
 * nothing changed (and the later writes on that key cannot fail). `register` is
 * `registerWaiter`'s ZREMRANGEBYSCORE (the expired members) + ZADD + PEXPIRE + PUBLISH
 * contended.
 */
const waiterLua = (slots: {
  readonly waiters: string
  readonly instanceId: string
  readonly register: string
  readonly lockMs: string
  readonly channel: string
  readonly contended: string
}) => ({
  count: `${serverNow}
local contenders = 0
if ${slots.instanceId} ~= "" then
  contenders = redis.call("ZCOUNT", ${slots.waiters}, "(" .. now, "+inf")
  local own = redis.call("ZSCORE", ${slots.waiters}, ${slots.instanceId})
  if own and tonumber(own) > now then
    contenders = contenders - 1
  end
end
`,
  register: `
if ${slots.register} == "1" then
${registerLua(slots)}
end
`
})

/** The server's clock in ms, as `now`: every waiter deadline is written and read on it. */
const serverNow = `
local time = redis.call("TIME")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
`

/**
 * The instance leaves, and the expired members with it: when the last live member leaves,
 * the set is empty and Redis deletes it (nothing of a token's lock outlives its waiters).
 */
const leaveLua = (slots: { readonly waiters: string; readonly instanceId: string }) => `
  redis.call("ZREMRANGEBYSCORE", ${slots.waiters}, "-inf", now)
  redis.call("ZREM", ${slots.waiters}, ${slots.instanceId})
`

/** Drop the expired members, (re)score the instance `lockMs` from `now`, keep the key as long as its newest member, say so. */
const registerLua = (slots: {
  readonly waiters: string
  readonly instanceId: string
  readonly lockMs: string
  readonly channel: string
  readonly contended: string
}) => `
  redis.call("ZREMRANGEBYSCORE", ${slots.waiters}, "-inf", now)
  redis.call("ZADD", ${slots.waiters}, now + tonumber(${slots.lockMs}), ${slots.instanceId})
  redis.call("PEXPIRE", ${slots.waiters}, ${slots.lockMs})
  redis.call("PUBLISH", ${slots.channel}, ${slots.contended})
`

/**
 * KEYS: lock, fence, waiters, slice... ARGV: lockId, lockMs, tokenMs, instanceId (or "" for
 * no waiter options), register ("1"/"0"), channel, contended message.
 * Returns `{1, fence, contenders, value-or-false...}` when granted (the instance left the
 * waiter set), `{0, pttl}` when held (the instance registered if asked).
 * `false` (not nil) marks a missing slice: a Lua array ends at the first nil, while
 * `false` becomes a nil bulk reply in place.
 */
const tryAcquireWaiter = waiterLua({
  waiters: "KEYS[3]",
  instanceId: "ARGV[4]",
  register: "ARGV[5]",
  lockMs: "ARGV[2]",
  channel: "ARGV[6]",
  contended: "ARGV[7]"
})
const tryAcquire: ScriptDefinition = {
  lua: `${tryAcquireWaiter.count}
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
${tryAcquireWaiter.register}
  return {0, redis.call("PTTL", KEYS[1])}
end
local result = {1, 0, 0}
for i = 4, #KEYS do
  local value = redis.pcall("GETEX", KEYS[i], "PX", ARGV[3])
  if type(value) == "table" and value.err then
    redis.call("DEL", KEYS[1])
    return value
  end
  result[i] = value
end
local fence = redis.pcall("INCR", KEYS[2])
if type(fence) == "table" and fence.err then
  redis.call("DEL", KEYS[1])
  return fence
end
redis.call("PEXPIRE", KEYS[2], ARGV[3])
result[2] = fence
if ARGV[4] ~= "" then
${leaveLua({ waiters: "KEYS[3]", instanceId: "ARGV[4]" })}
end
result[3] = contenders
return result
`
}

/**
 * KEYS: lock, waiters. ARGV: lockId, channel, released message, instanceId (or ""),
 * register ("1"/"0"), contended message, lockMs.
 * Returns `{released (1/0), contenders}`. `released` is published only when deleted,
 * `contended` (when asked) after it, whoever held the lock.
 */
const releaseWaiter = waiterLua({
  waiters: "KEYS[2]",
  instanceId: "ARGV[4]",
  register: "ARGV[5]",
  lockMs: "ARGV[7]",
  channel: "ARGV[2]",
  contended: "ARGV[6]"
})
const release: ScriptDefinition = {
  numberOfKeys: 2,
  lua: `${releaseWaiter.count}
local released = 0
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("DEL", KEYS[1])
  redis.call("PUBLISH", ARGV[2], ARGV[3])
  released = 1
end
${releaseWaiter.register}
return {released, contenders}
`
}

/**
 * KEYS: lock, slice... ARGV: lockId, tokenMs, value...
 * Returns `{1}` when written, `{0, holder-or-false}` when `lockId` no longer holds the lock
 * (nothing written). SET overwrites a key of any type, so no write can fail half-way.
 */
const writeIfHolder: ScriptDefinition = {
  lua: `
local holder = redis.call("GET", KEYS[1])
if holder ~= ARGV[1] then
  return {0, holder}
end
for i = 2, #KEYS do
  redis.call("SET", KEYS[i], ARGV[i + 1], "PX", ARGV[2])
end
return {1}
`
}

/**
 * KEYS: lock, waiters, slice... ARGV: lockId, tokenMs, channel, released message,
 * instanceId (or ""), register ("1"/"0"), contended message, lockMs, value...
 * Returns `{1, contenders}` when written and released, `{0, holder-or-false}` when `lockId`
 * no longer holds the lock (nothing written, published or registered).
 */
const commitWaiter = waiterLua({
  waiters: "KEYS[2]",
  instanceId: "ARGV[5]",
  register: "ARGV[6]",
  lockMs: "ARGV[8]",
  channel: "ARGV[3]",
  contended: "ARGV[7]"
})
const commitAndRelease: ScriptDefinition = {
  lua: `
local holder = redis.call("GET", KEYS[1])
if holder ~= ARGV[1] then
  return {0, holder}
end
${commitWaiter.count}
for i = 3, #KEYS do
  redis.call("SET", KEYS[i], ARGV[i + 6], "PX", ARGV[2])
end
redis.call("DEL", KEYS[1])
redis.call("PUBLISH", ARGV[3], ARGV[4])
${commitWaiter.register}
return {1, contenders}
`
}

/** KEYS: lock. ARGV: lockId, lockMs. Returns 1 when extended. */
const extend: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
`
}

/** KEYS: lock, fence. Returns nil when free, else `{lockId, fence-or-false, pttl}`. */
const holder: ScriptDefinition = {
  numberOfKeys: 2,
  lua: `
local id = redis.call("GET", KEYS[1])
if not id then
  return false
end
return {id, redis.call("GET", KEYS[2]), redis.call("PTTL", KEYS[1])}
`
}

/** KEYS: waiters. ARGV: instanceId, lockMs, channel, contended message. Always publishes. */
const registerWaiter: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${serverNow}
${registerLua({ waiters: "KEYS[1]", instanceId: "ARGV[1]", lockMs: "ARGV[2]", channel: "ARGV[3]", contended: "ARGV[4]" })}
return 1
`
}

/** KEYS: waiters. ARGV: instanceId. */
const deregisterWaiter: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${serverNow}
${leaveLua({ waiters: "KEYS[1]", instanceId: "ARGV[1]" })}
return 1
`
}

/** KEYS: waiters. ARGV: instanceId. The members whose deadline has not passed, other than the instance. */
const otherContenders: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${waiterLua({ waiters: "KEYS[1]", instanceId: "ARGV[1]", register: "", lockMs: "", channel: "", contended: "" }).count}
return contenders
`
}

/** KEYS: waiters. The members whose deadline has not passed. Reads only. */
const waiters: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${serverNow}
return redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. now, "+inf")
`
}

/** KEYS: slice... ARGV: tokenMs. Values in order, `false` (nil bulk) where missing. */
const readSlices: ScriptDefinition = {
  lua: `
local result = {}
for i = 1, #KEYS do
  result[i] = redis.call("GETEX", KEYS[i], "PX", ARGV[1])
end
return result
`
}

/** KEYS: socket. ARGV: record JSON, tokenMs. Returns `{1}` when claimed, else `{0, existing}`. */
const claimSocket: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return {1}
end
return {0, redis.call("GET", KEYS[1])}
`
}

/**
 * Shared head of the owner-checked socket scripts: a record that does not decode, or
 * decodes to anything but an object naming exactly this instance and connection, is
 * never touched.
 */
const socketOwnerCheck = `
local raw = redis.call("GET", KEYS[1])
if not raw then
  return 0
end
local ok, record = pcall(cjson.decode, raw)
if not ok or type(record) ~= "table" then
  return 0
end
if record.instanceId ~= ARGV[1] or record.connectionId ~= ARGV[2] then
  return 0
end
`

/** KEYS: socket. ARGV: instanceId, connectionId. Returns 1 when deleted. */
const deleteSocketIfOwner: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${socketOwnerCheck}
redis.call("DEL", KEYS[1])
return 1
`
}

/** KEYS: socket. ARGV: instanceId, connectionId, tokenMs. Returns 1 when refreshed. */
const refreshSocket: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `${socketOwnerCheck}
redis.call("PEXPIRE", KEYS[1], ARGV[3])
return 1
`
}

/**
 * KEYS: mailbox. ARGV: maxLen, payload, ttlMs. XADD with approximate trimming; a stream
 * without an expiry gets one (a reader's longer expiry is kept). Returns the entry id.
 */
const mailboxAppend: ScriptDefinition = {
  numberOfKeys: 1,
  lua: `
local id = redis.call("XADD", KEYS[1], "MAXLEN", "~", ARGV[1], "*", "payload", ARGV[2])
if redis.call("PTTL", KEYS[1]) == -1 then
  redis.call("PEXPIRE", KEYS[1], ARGV[3])
end
return id
`
}

/**
 * KEYS: keys of one token. Returns `{type, pttl, size}` per key: the size is STRLEN of a
 * string, ZCARD of a sorted set (the waiter set), 0 otherwise. Reads only.
 */
const describeKeys: ScriptDefinition = {
  lua: `
local out = {}
for i, key in ipairs(KEYS) do
  local kind = redis.call("TYPE", key)["ok"]
  local size = 0
  if kind == "string" then
    size = redis.call("STRLEN", key)
  elseif kind == "zset" then
    size = redis.call("ZCARD", key)
  end
  out[i] = {kind, redis.call("PTTL", key), size}
end
return out
`
}

/**
 * Every script, by the command name `defineCommand` gives it. The names carry a prefix so
 * they never shadow a built-in ioredis command.
 *
 * @internal
 */
export const scripts = {
  leaseholdTryAcquire: tryAcquire,
  leaseholdRelease: release,
  leaseholdWriteIfHolder: writeIfHolder,
  leaseholdCommitAndRelease: commitAndRelease,
  leaseholdExtend: extend,
  leaseholdHolder: holder,
  leaseholdRegisterWaiter: registerWaiter,
  leaseholdDeregisterWaiter: deregisterWaiter,
  leaseholdOtherContenders: otherContenders,
  leaseholdWaiters: waiters,
  leaseholdReadSlices: readSlices,
  leaseholdClaimSocket: claimSocket,
  leaseholdDeleteSocketIfOwner: deleteSocketIfOwner,
  leaseholdRefreshSocket: refreshSocket,
  leaseholdMailboxAppend: mailboxAppend,
  leaseholdDescribeKeys: describeKeys
} as const satisfies Record<string, ScriptDefinition>

/**
 * `scripts` for a Redis Cluster: every PUBLISH becomes SPUBLISH (Redis 7), so a signal
 * reaches the shard-channel subscribers of the token's own node instead of being
 * broadcast through the whole cluster bus.
 *
 * @internal
 */
export const shardedScripts: typeof scripts = Object.fromEntries(
  Object.entries(scripts).map(([name, script]) => [
    name,
    { ...script, lua: script.lua.replaceAll('redis.call("PUBLISH"', 'redis.call("SPUBLISH"') }
  ])
) as unknown as typeof scripts

/** A reply whose shape the caller checks: scripts return nested arrays of strings, numbers and nils. @internal */
export type ScriptReply = unknown

/**
 * The commands `defineCommand` adds to a connection. Scripts without a fixed key count
 * take it as their first argument.
 *
 * @internal
 */
export interface ScriptCommands {
  leaseholdTryAcquire(numberOfKeys: number, ...keysAndArgs: Array<string>): Promise<ScriptReply>
  leaseholdRelease(
    lock: string,
    waiters: string,
    lockId: string,
    channel: string,
    released: string,
    instanceId: string,
    register: string,
    contended: string,
    lockMs: string
  ): Promise<ScriptReply>
  leaseholdWriteIfHolder(numberOfKeys: number, ...keysAndArgs: Array<string>): Promise<ScriptReply>
  leaseholdCommitAndRelease(numberOfKeys: number, ...keysAndArgs: Array<string>): Promise<ScriptReply>
  leaseholdExtend(lock: string, lockId: string, lockMs: string): Promise<ScriptReply>
  leaseholdHolder(lock: string, fence: string): Promise<ScriptReply>
  leaseholdRegisterWaiter(
    waiters: string,
    instanceId: string,
    lockMs: string,
    channel: string,
    message: string
  ): Promise<ScriptReply>
  leaseholdDeregisterWaiter(waiters: string, instanceId: string): Promise<ScriptReply>
  leaseholdOtherContenders(waiters: string, instanceId: string): Promise<ScriptReply>
  leaseholdWaiters(waiters: string): Promise<ScriptReply>
  leaseholdReadSlices(numberOfKeys: number, ...keysAndArgs: Array<string>): Promise<ScriptReply>
  leaseholdClaimSocket(socket: string, record: string, tokenMs: string): Promise<ScriptReply>
  leaseholdDeleteSocketIfOwner(socket: string, instanceId: string, connectionId: string): Promise<ScriptReply>
  leaseholdRefreshSocket(
    socket: string,
    instanceId: string,
    connectionId: string,
    tokenMs: string
  ): Promise<ScriptReply>
  leaseholdMailboxAppend(mailbox: string, maxLen: string, payload: string, ttlMs: string): Promise<ScriptReply>
  leaseholdDescribeKeys(numberOfKeys: number, ...keys: Array<string>): Promise<ScriptReply>
}
