// @ts-check
/**
 * leasehold's browser client: a dependency-free ES module, loaded by a page as it is. Its
 * types, and what each export does, are in `index.d.ts` beside it; this file is checked
 * against them (`npm run typecheck`). The wire protocol is docs/protocol.md's "The socket
 * session".
 */

/** @typedef {import("./index.js").Applied} Applied */
/** @typedef {import("./index.js").Reason} Reason */
/** @typedef {import("./index.js").Backoff} Backoff */
/** @typedef {import("./index.js").Status} Status */
/** @typedef {import("./index.js").Reply} Reply */
/**
 * @template U
 * @typedef {import("./index.js").Answer<U>} Answer
 */
/**
 * @template {object} E
 * @template {object} U
 * @typedef {import("./index.js").Outbox<E, U>} OutboxContract
 */

const encoder = new TextEncoder()

/**
 * How long a link lasts before the reconnection back-off starts again from its base (an
 * answer to an event resets it sooner): a server that accepts and then closes at once is
 * retried later and later, not every `base`.
 */
const stableAfterMs = 5000

export class SendError extends Error {
  /**
   * @param {string} message
   * @param {Applied} applied
   * @param {Reason} reason
   */
  constructor(message, applied, reason) {
    super(message)
    /** @type {"SendError"} */
    this.name = "SendError"
    this.applied = applied
    this.reason = reason
  }
}

/** @type {typeof import("./index.js").retryDelay} */
export const retryDelay = (attempt, random, backoff = {}) => {
  const base = backoff.base ?? 250
  const cap = Math.max(base, backoff.cap ?? 5000)
  // 2^attempt overflows to Infinity long after the cap is reached; min() keeps it finite.
  const ceiling = Math.min(cap, base * 2 ** Math.max(1, attempt))
  // Full jitter over [base, ceiling]: tabs cut off by the same worker's death spread their
  // reconnections instead of arriving together, and none retries sooner than `base`.
  return base + random * (ceiling - base)
}

/**
 * One event until its answer. `sends` counts its transmissions whose outcome is unknown: a
 * `resend` answer proves it was never applied (the server applies only L+1, and a resent
 * applied seq is answered as a duplicate), so it goes back to 0.
 *
 * @template E, U
 * @typedef {object} Entry
 * @property {E} event
 * @property {number | undefined} seq
 * @property {boolean} inFlight
 * @property {number} sends
 * @property {number} bytes
 * @property {(answer: Answer<U>) => void} resolve
 * @property {(error: SendError) => void} reject
 */

/**
 * @template {object} E
 * @template {object} U
 * @implements {OutboxContract<E, U>}
 */
export class Outbox {
  constructor() {
    /** @type {Array<Entry<E, U>>} */
    this.entries = []
    this.next = 1
    this.inFlight = 0
    /** @type {number | undefined} the cap of the current link; undefined when unlinked */
    this.cap = undefined
    /** @type {((frame: string) => void) | undefined} */
    this.transmit = undefined
    /**
     * The lowest seq the server asked to resend from. Sending pauses until every frame in flight is
     * answered: only then is each unanswered event known not to be applied, so it can be
     * numbered again without an in-flight answer being taken for another event's.
     * @type {number | undefined}
     */
    this.resendFrom = undefined
    /** Sending held after an answer of unknown outcome, until `release`. */
    this.held = false
    /** Consecutive answers of unknown outcome: the session's pause before resending grows with it. */
    this.failures = 0
  }

  get size() {
    return this.entries.length
  }

  /** @param {E} event */
  push(event) {
    return /** @type {Promise<Answer<U>>} */ (
      new Promise((resolve, reject) => {
        try {
          JSON.stringify(event)
        } catch (cause) {
          // checked here, once: an event that cannot be written would stop every later one in `pump`
          reject(new SendError(`the event cannot be written as JSON: ${String(cause)}`, false, "invalid"))
          return
        }
        this.entries.push({ event, seq: undefined, inFlight: false, sends: 0, bytes: 0, resolve, reject })
        this.pump()
      })
    )
  }

  /**
   * @param {number} maxFrameBytes
   * @param {(frame: string) => void} transmit
   */
  link(maxFrameBytes, transmit) {
    this.unlink()
    this.cap = maxFrameBytes
    this.transmit = transmit
    this.pump()
  }

  unlink() {
    for (const entry of this.entries) entry.inFlight = false
    this.inFlight = 0
    this.held = false
    this.cap = undefined
    this.transmit = undefined
    this.resendFrom = undefined
  }

  refuseLargest() {
    /** @type {Entry<E, U> | undefined} */
    let largest
    for (const entry of this.entries) {
      if (entry.sends > 0 && (largest === undefined || entry.bytes > largest.bytes)) largest = entry
    }
    if (largest === undefined) return
    this.remove(largest)
    // The frame closing the socket was refused unread; an earlier transmission may have been applied.
    largest.reject(
      new SendError(
        `the event's frame (${largest.bytes} bytes) is over the server's frame cap`,
        largest.sends > 1 ? "unknown" : false,
        "too_large"
      )
    )
  }

  /** @param {Reply} reply */
  answer(reply) {
    if (reply.type === "forgotten") {
      // The server does not know this client: no frame in flight on this link was applied
      // (the ones before were answered, the ones after are answered `forgotten` too), so
      // only what earlier links carried is of unknown outcome.
      for (const entry of this.entries) {
        if (!entry.inFlight) continue
        entry.inFlight = false
        entry.sends--
      }
      this.inFlight = 0
      return "forgotten"
    }
    const entry = this.entries.find((entry) => entry.seq === reply.seq)
    if (entry === undefined) return undefined
    if (entry.inFlight) {
      entry.inFlight = false
      this.inFlight--
    }
    switch (reply.type) {
      case "update":
      case "state":
        this.remove(entry)
        this.failures = 0
        entry.resolve({
          update: /** @type {U} */ (updateOf(reply)),
          duplicate: reply.duplicate === true,
          overtaken: reply.overtaken === true
        })
        break
      case "error":
        if (reply.applied === false) {
          this.remove(entry)
          entry.reject(new SendError(reply.message, false, "refused"))
          break
        }
        if (reply.applied === true) {
          // Applied, its answer unwritable (the update schema refused it): final, since a
          // resend would be answered with a state the server cannot write either.
          this.remove(entry)
          this.failures = 0
          entry.reject(new SendError(reply.message, true, "unanswerable"))
          break
        }
        // Of unknown outcome (the store failed around the commit): sent again with the same
        // seq, it is applied then or answered as a duplicate. After a pause, not at once: the
        // store is likely still failing.
        this.failures++
        this.held = true
        this.pump()
        return "retry"
      case "resend":
        entry.sends = 0
        // The lowest asked: a frame dropped unread (a full queue) is answered with its own seq,
        // the frames queued before it may still be applied, and nothing after the first frame
        // not applied can be.
        this.resendFrom = Math.min(this.resendFrom ?? reply.from, reply.from)
        break
    }
    this.pump()
    return undefined
  }

  release() {
    this.held = false
    this.pump()
  }

  /** @param {"new_token" | "forgotten"} reason */
  restart(reason) {
    const message =
      reason === "new_token"
        ? "the server gave the tab a new token before answering the event"
        : "the server no longer knows this client: the event's outcome is unknown"
    for (const entry of [...this.entries]) {
      if (entry.sends > 0) {
        this.remove(entry)
        entry.reject(new SendError(message, "unknown", reason))
      } else {
        entry.seq = undefined
      }
    }
    this.next = 1
    this.resendFrom = undefined
  }

  close() {
    const entries = this.entries
    this.entries = []
    this.unlink()
    for (const entry of entries) {
      entry.reject(
        new SendError("the session was closed before the event's answer", entry.sends > 0 ? "unknown" : false, "closed")
      )
    }
  }

  /** @param {Entry<E, U>} entry */
  remove(entry) {
    const index = this.entries.indexOf(entry)
    if (index >= 0) this.entries.splice(index, 1)
    if (entry.inFlight) {
      entry.inFlight = false
      this.inFlight--
    }
  }

  /** Send what can be sent now, in order: numbered events first (they precede the others). */
  pump() {
    const transmit = this.transmit
    const cap = this.cap
    if (transmit === undefined || cap === undefined || this.held) return
    if (this.entries.some((entry) => entry.seq !== undefined && !entry.inFlight)) {
      // Numbered events go again: only once every frame in flight is answered, so that no
      // answer is taken for another event's and the resent ones keep their order.
      if (this.inFlight > 0) return
      // Numbered again only when none may have been applied (each was answered `resend`);
      // one of unknown outcome keeps its seq, and the server's answers settle the rest.
      if (this.resendFrom !== undefined && this.entries.every((entry) => entry.sends === 0)) {
        let seq = this.resendFrom
        for (const entry of this.entries) if (entry.seq !== undefined) entry.seq = seq++
        this.next = seq
      }
      this.resendFrom = undefined
    }
    for (const entry of [...this.entries]) {
      if (entry.inFlight) continue
      const seq = entry.seq ?? this.next
      const frame = JSON.stringify({ ...entry.event, seq })
      const bytes = encoder.encode(frame).length
      if (bytes > cap) {
        this.remove(entry)
        // A numbered event refused here leaves a gap in the seqs; the server answers the next
        // one `resend`, and the events are numbered again from the gap.
        entry.reject(
          new SendError(
            `the event's frame (${bytes} bytes) is over the server's frame cap (${cap} bytes)`,
            entry.sends > 0 ? "unknown" : false,
            "too_large"
          )
        )
        continue
      }
      if (entry.seq === undefined) {
        entry.seq = seq
        this.next = seq + 1
      }
      entry.bytes = bytes
      entry.inFlight = true
      entry.sends++
      this.inFlight++
      transmit(frame)
    }
  }
}

/**
 * The app's update in a server message: its fields without the protocol's.
 *
 * @param {{ readonly [field: string]: unknown }} message
 */
const updateOf = (message) => {
  const { type: _type, seq: _seq, duplicate: _duplicate, overtaken: _overtaken, ...update } = message
  return update
}

/** A client id: 128 random bits in base64url (22 characters of `[A-Za-z0-9_-]`). */
const newClientId = () => {
  const bytes = crypto.getRandomValues(new Uint8Array(16))
  return btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "")
}

/**
 * `sessionStorage` where there is one (a tab's own, copied into a duplicated tab); in memory
 * elsewhere (a worker, Node), or when the browser refuses storage.
 */
const tokenStore = () => {
  /** @type {Storage | undefined} */
  let storage
  try {
    storage = globalThis.sessionStorage
  } catch {
    storage = undefined
  }
  /** @type {Map<string, string>} */
  const memory = new Map()
  return {
    /** @param {string} key */
    get: (key) => {
      try {
        return storage?.getItem(key) ?? memory.get(key)
      } catch {
        return memory.get(key)
      }
    },
    /**
     * @param {string} key
     * @param {string} value
     */
    set: (key, value) => {
      memory.set(key, value)
      try {
        storage?.setItem(key, value)
      } catch {
        // quota or privacy settings: the token lives as long as the page
      }
    }
  }
}

/** @param {string} url */
const socketUrl = (url) => {
  const resolved = new URL(url, globalThis.location?.href)
  if (resolved.protocol === "http:") resolved.protocol = "ws:"
  else if (resolved.protocol === "https:") resolved.protocol = "wss:"
  return resolved
}

export const connect = /** @satisfies {typeof import("./index.js").connect} */ (
  /**
   * @template {object} E
   * @template {object} U
   * @param {import("./index.js").Options<U>} [options]
   * @returns {import("./index.js").Session<E, U>}
   */
  (options = {}) => {
    const tokenKey = options.tokenKey ?? "leasehold-token"
    const store = tokenStore()
    /** @type {Outbox<E, U>} */
    const outbox = new Outbox()
    /** @type {string | undefined} */
    let token = store.get(tokenKey) ?? undefined
    let clientId = newClientId()
    /** @type {Status} */
    let status = { state: "connecting", attempt: 0 }
    /** @type {WebSocket | undefined} */
    let socket
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let retry
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let stable
    let attempt = 0
    let closed = false

    /** @param {Status} next */
    const report = (next) => {
      status = next
      options.onStatus?.(next)
    }

    /** @param {string} next */
    const adopt = (next) => {
      if (next === token) return
      token = next
      store.set(tokenKey, next)
      options.onToken?.(next)
    }

    const open = () => {
      timer = undefined
      if (closed) return
      const url = socketUrl(options.url ?? "/ws")
      if (token !== undefined) url.searchParams.set("token", token)
      url.searchParams.set("client", clientId)
      report({ state: "connecting", attempt })
      /** @type {WebSocket} */
      let ws
      try {
        ws = new WebSocket(url)
      } catch (cause) {
        lost(1006, String(cause))
        return
      }
      socket = ws
      ws.onmessage = (event) => {
        if (socket !== ws || typeof event.data !== "string") return
        let message
        try {
          message = JSON.parse(event.data)
        } catch {
          return
        }
        if (typeof message === "object" && message !== null) receive(ws, message)
      }
      ws.onclose = (event) => {
        if (socket === ws) lost(event.code, event.reason)
      }
    }

    /**
     * @param {number} code
     * @param {string} reason
     */
    const lost = (code, reason) => {
      socket = undefined
      if (stable !== undefined) clearTimeout(stable)
      stable = undefined
      outbox.unlink()
      if (code === 1009) outbox.refuseLargest()
      if (closed) return
      attempt++
      const retryIn = retryDelay(attempt, Math.random(), options.backoff)
      report({ state: "closed", code, reason, retryIn })
      timer = setTimeout(open, retryIn)
    }

    /**
     * @param {WebSocket} ws
     * @param {any} message
     */
    const receive = (ws, message) => {
      switch (message.type) {
        case "new_token":
          // A new token is a new state and a new L on the server: what may have been applied
          // under the old one cannot be resent, and numbering starts again at 1.
          outbox.restart("new_token")
          adopt(String(message.token))
          return
        case "hello": {
          const cap = Number(message.maxFrameBytes)
          const maxFrameBytes = Number.isFinite(cap) && cap > 0 ? cap : Number.POSITIVE_INFINITY
          adopt(String(message.token))
          if (stable !== undefined) clearTimeout(stable)
          stable = setTimeout(() => {
            stable = undefined
            attempt = 0
          }, stableAfterMs)
          report({ state: "open", token: String(message.token), instanceId: String(message.instanceId), maxFrameBytes })
          outbox.link(maxFrameBytes, (frame) => ws.send(frame))
          return
        }
        case "update":
        case "state":
          // An overtaken answer (an update, or a duplicate's state) is older than a state the
          // tab has already shown: it settles its event, and leaves the tab as it is.
          if (message.overtaken !== true) {
            if (message.type === "update") options.onUpdate?.(/** @type {U} */ (updateOf(message)))
            else options.onState?.(/** @type {U} */ (updateOf(message)))
          }
          if (typeof message.seq === "number") {
            // the server answers: the link works, whatever came before it
            attempt = 0
            outbox.answer(message)
          }
          return
        case "error":
          if (typeof message.seq !== "number") options.onError?.(String(message.message))
          else if (outbox.answer(message) === "retry" && retry === undefined) {
            retry = setTimeout(
              () => {
                retry = undefined
                outbox.release()
              },
              retryDelay(outbox.failures, Math.random(), options.backoff)
            )
          }
          return
        case "resend":
          if (Number.isSafeInteger(message.from) && message.from > 0) outbox.answer(message)
          return
        case "forgotten":
          // The server lost this client's L: the events it may have applied fail, and the page
          // goes on as a new client (a new id in the address, so a new socket) from seq 1,
          // never reusing a (client, seq) the server might have applied.
          outbox.answer(message)
          outbox.restart("forgotten")
          clientId = newClientId()
          socket = undefined
          outbox.unlink()
          ws.close(4000, "forgotten")
          report({ state: "closed", code: 4000, reason: "forgotten", retryIn: 0 })
          open()
          return
      }
    }

    open()

    return {
      send: (event) =>
        closed ? Promise.reject(new SendError("the session is closed", false, "closed")) : outbox.push(event),
      close: () => {
        if (closed) return
        closed = true
        if (timer !== undefined) clearTimeout(timer)
        if (retry !== undefined) clearTimeout(retry)
        if (stable !== undefined) clearTimeout(stable)
        const ws = socket
        socket = undefined
        ws?.close(1000, "closed")
        outbox.close()
        report({ state: "closed", code: 1000, reason: "closed" })
      },
      get token() {
        return token
      },
      get clientId() {
        return clientId
      },
      get status() {
        return status
      },
      get pending() {
        return outbox.size
      }
    }
  }
)
