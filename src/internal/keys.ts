/**
 * Key layout (docs/protocol.md, docs/design.md#keys). Every key of one token carries the hash tag
 * `{<token>}`, so each script touches one Redis Cluster slot. Callers validate tokens and names
 * first.
 *
 * @internal
 */
export interface Keys {
  readonly lock: (token: string) => string
  readonly fence: (token: string) => string
  /** The token's queue of waiting workers (sorted set: worker id scored by arrival order, head first). */
  readonly queue: (token: string) => string
  /** Each queued worker's deadline (sorted set: worker id scored by its deadline, ms on the server clock). */
  readonly queueDeadlines: (token: string) => string
  /**
   * The lock id each queued worker waits under (sorted set, every score 0: members
   * `<worker> <lock id>`, at most one per worker): a grant to the worker installs it.
   */
  readonly queueIds: (token: string) => string
  readonly slice: (token: string, name: string) => string
  readonly signal: (token: string) => string
  readonly socket: (token: string) => string
  readonly socketPattern: string
  readonly socketToken: (key: string) => string | undefined
  readonly mailbox: (instanceId: string) => string
  readonly mailboxCursor: (instanceId: string) => string
  /**
   * A worker's presence entry (a string with a TTL of the presence expiration). It carries
   * the worker's id as its hash tag: on a Cluster it lives in a slot of its own, apart
   * from any token's keys, so no script ever touches it together with a socket record.
   */
  readonly presence: (instanceId: string) => string
  /**
   * A worker's presence channel (questions to it, answers to its questions): a channel, not
   * a key, with the worker's hash tag, so a Cluster's sharded pub/sub serves it.
   */
  readonly presenceChannel: (instanceId: string) => string
  /**
   * A worker's one notice channel on a single server (and the embedded store), shared by
   * every token: a channel, not a key. The name is a prefix followed by the worker id
   * (`workerNotices("")` is the prefix the scripts append a worker id to).
   */
  readonly workerNotices: (worker: string) => string
  /**
   * A worker's notice channel for one token on a Redis Cluster: it carries the token's hash
   * tag, because a script may publish only in its own slot. Prefix and worker id, as above.
   */
  readonly tokenNotices: (token: string, worker: string) => string
  /** The SCAN pattern of every key of one (validated) token. */
  readonly tokenPattern: (token: string) => string
  /** The prefix every key of the token starts with. */
  readonly tokenHead: (token: string) => string
  /** The token of a token's key and the name after it (`fence`, `s:<slice>`...); `undefined` for any other key. */
  readonly tokenKey: (key: string) => readonly [token: string, name: string] | undefined
}

/** @internal */
export const makeKeys = (prefix: string): Keys => {
  const base = (token: string) => `${prefix}:{${token}}`
  const open = `${prefix}:{`
  const socketTail = "}:socket"
  return {
    lock: (token) => `${base(token)}:lock`,
    fence: (token) => `${base(token)}:fence`,
    queue: (token) => `${base(token)}:queue`,
    queueDeadlines: (token) => `${base(token)}:queue:d`,
    queueIds: (token) => `${base(token)}:queue:i`,
    slice: (token, name) => `${base(token)}:s:${name}`,
    signal: (token) => `${base(token)}:signal`,
    socket: (token) => `${base(token)}:socket`,
    socketPattern: `${prefix}:{*}:socket`,
    socketToken: (key) =>
      key.startsWith(open) && key.endsWith(socketTail)
        ? key.slice(open.length, key.length - socketTail.length)
        : undefined,
    mailbox: (instanceId) => `${prefix}:mailbox:${instanceId}`,
    mailboxCursor: (instanceId) => `${prefix}:cursor:${instanceId}`,
    presence: (instanceId) => `${prefix}:presence:{${instanceId}}`,
    presenceChannel: (instanceId) => `${prefix}:presence:{${instanceId}}:ask`,
    workerNotices: (worker) => `${prefix}:w:${worker}`,
    tokenNotices: (token, worker) => `${base(token)}:w:${worker}`,
    // A valid token has no glob character, so it is matched literally.
    tokenPattern: (token) => `${base(token)}:*`,
    tokenHead: (token) => `${base(token)}:`,
    tokenKey: (key) => {
      if (!key.startsWith(open)) return undefined
      // A token has no `}`: the first `}:` closes the hash tag.
      const close = key.indexOf("}:", open.length)
      return close < 0 ? undefined : [key.slice(open.length, close), key.slice(close + 2)]
    }
  }
}
