/**
 * The tabs of `bench:fleet`, in a process of their own (the driver forks one per 2,000 tabs):
 * each tab a WebSocket on a worker picked at random, with a client id, sending
 * `{"type":"bump","by":1,"seq":S}` as a Poisson process at `rate` per second, plus a burst of
 * `burst` events at a random moment of every `burstEvery` seconds. The load is open: a tab
 * sends on schedule whether or not its earlier events were answered. Each answer carrying a
 * `seq` is timed from that frame's send.
 *
 * Driven over the IPC channel:
 * - `connect {ports, tokens}` → `connected {failed}` once every tab has its `state`;
 * - `start {measure}`: the tabs start sending; with `measure` the window opens;
 * - `stop` → `stopped {sent, answered, refused, latencies}`: sending stops; the frames sent in the
 *   window, the answers received in it, the frames answered other than `update`, and the times
 *   (ms) of the window's frames answered so far;
 * - `drain {ms}` → `drained {pending, late}`: waits until every frame sent is answered (or `ms`);
 *   `late` adds the window's frames answered after `stop` to its latencies;
 * - `final` → `final {tabs: [token, applied, n, unknown]}`: each tab's events applied (by their
 *   answers: updates, duplicates, errors saying so), its counter, and its events of unknown outcome
 *   read with `GET /api/state` from its worker;
 * - `close`: the sockets close, the process exits.
 */
import { randomUUID } from "node:crypto"
import * as http from "node:http"
import WebSocket from "ws"

interface Tab {
  /** The token in use: the server's `hello` names it. */
  token: string
  readonly port: number
  readonly socket: WebSocket
  /** When each unanswered `seq` was sent, and whether in the window. */
  readonly sent: Map<number, { readonly at: number; readonly measured: boolean }>
  seq: number
  /** Answered with an update (timed). */
  answered: number
  /** Applied, by its answer: an update, a duplicate, an error that says so. */
  applied: number
  /** Of unknown outcome, by its answer (the bench does not resend). */
  unknown: number
  timer?: NodeJS.Timeout | undefined
  burstTimer?: NodeJS.Timeout | undefined
}

const rate = Number(process.env.FLEET_RATE ?? "1")
const burst = Number(process.env.FLEET_BURST ?? "10")
const burstEveryMs = Number(process.env.FLEET_BURST_EVERY_S ?? "20") * 1000

const tabs: Array<Tab> = []
let sending = false
let measuring = false
let windowSent = 0
let windowAnswered = 0
let refused = 0
let latencies: Array<number> = []
const late: Array<number> = []

const reply = (message: object) => process.send!(message)

const open = (token: string, port: number) =>
  new Promise<Tab | undefined>((resolve) => {
    const socket = new WebSocket(`ws://127.0.0.1:${port}/ws?token=${token}&client=${randomUUID().slice(0, 8)}`)
    const tab: Tab = { token, port, socket, sent: new Map(), seq: 0, answered: 0, applied: 0, unknown: 0 }
    socket.on("message", (data) => {
      const frame = JSON.parse(data.toString()) as { type: string; seq?: number; token?: string }
      if (frame.type === "hello" && frame.token !== undefined) tab.token = frame.token
      if (frame.type === "state" && frame.seq === undefined) return resolve(tab)
      if (frame.seq === undefined) return
      const sent = tab.sent.get(frame.seq)
      if (sent === undefined) return
      tab.sent.delete(frame.seq)
      if (frame.type !== "update") {
        refused++
        // applied all the same: a duplicate (applied by an earlier run of its burst whose
        // answer was lost, the store's reply timed out), or an error saying so; of unknown
        // outcome: an error saying that, or forgotten
        const answer = frame as { duplicate?: boolean; applied?: boolean | "unknown" }
        if (answer.duplicate === true || answer.applied === true) tab.applied++
        else if (answer.applied === "unknown" || frame.type === "forgotten") tab.unknown++
        return
      }
      tab.answered++
      tab.applied++
      const ms = performance.now() - sent.at
      if (measuring) windowAnswered++
      if (sent.measured) (measuring ? latencies : late).push(ms)
    })
    socket.on("error", () => resolve(undefined))
    socket.on("close", () => resolve(undefined))
  })

const send = (tab: Tab) => {
  if (tab.socket.readyState !== WebSocket.OPEN) return
  const seq = ++tab.seq
  tab.sent.set(seq, { at: performance.now(), measured: measuring })
  if (measuring) windowSent++
  tab.socket.send(`{"type":"bump","by":1,"seq":${seq}}`)
}

/** The next event of the tab's Poisson process. */
const schedule = (tab: Tab) => {
  tab.timer = setTimeout(
    () => {
      if (!sending) return
      send(tab)
      schedule(tab)
    },
    (-Math.log(1 - Math.random()) / rate) * 1000
  )
}

/** The tab's burst, at a random moment of the next period, then the next one's. */
const scheduleBurst = (tab: Tab, periodStart: number) => {
  const at = periodStart + Math.random() * burstEveryMs
  tab.burstTimer = setTimeout(
    () => {
      if (!sending) return
      for (let i = 0; i < burst; i++) send(tab)
      scheduleBurst(tab, periodStart + burstEveryMs)
    },
    Math.max(0, at - performance.now())
  )
}

const connect = async (ports: ReadonlyArray<number>, tokens: ReadonlyArray<string>) => {
  let failed = 0
  let next = 0
  const opener = async () => {
    while (next < tokens.length) {
      const token = tokens[next++]!
      const tab = await open(token, ports[Math.floor(Math.random() * ports.length)]!)
      if (tab === undefined) failed++
      else tabs.push(tab)
    }
  }
  await Promise.all(Array.from({ length: 64 }, opener))
  reply({ type: "connected", failed })
}

const start = (measure: boolean) => {
  sending = true
  measuring = measure
  windowSent = 0
  windowAnswered = 0
  refused = 0
  latencies = []
  late.length = 0
  const now = performance.now()
  for (const tab of tabs) {
    schedule(tab)
    scheduleBurst(tab, now)
  }
}

const stop = () => {
  sending = false
  measuring = false
  for (const tab of tabs) {
    clearTimeout(tab.timer)
    clearTimeout(tab.burstTimer)
  }
  reply({ type: "stopped", sent: windowSent, answered: windowAnswered, refused, latencies })
}

const pendingCount = () => tabs.reduce((sum, tab) => sum + tab.sent.size, 0)

const drain = async (ms: number) => {
  const deadline = performance.now() + ms
  while (pendingCount() > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50))
  reply({ type: "drained", pending: pendingCount(), late })
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 16 })

const readState = (tab: Tab) =>
  new Promise<number>((resolve) => {
    http
      .get({ host: "127.0.0.1", port: tab.port, path: `/api/state?token=${tab.token}`, agent }, (response) => {
        let text = ""
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => {
          text += chunk
        })
        response.on("end", () => resolve(response.statusCode === 200 ? (JSON.parse(text) as { n: number }).n : -1))
      })
      .on("error", () => resolve(-1))
  })

const final = async () => {
  const rows: Array<readonly [string, number, number, number]> = []
  let next = 0
  const reader = async () => {
    while (next < tabs.length) {
      const tab = tabs[next++]!
      rows.push([tab.token, tab.applied, await readState(tab), tab.unknown])
    }
  }
  await Promise.all(Array.from({ length: 16 }, reader))
  reply({ type: "final", tabs: rows })
}

process.on("message", (message: { type: string; [key: string]: any }) => {
  switch (message.type) {
    case "connect":
      void connect(message.ports, message.tokens)
      break
    case "start":
      start(message.measure === true)
      break
    case "stop":
      stop()
      break
    case "drain":
      void drain(message.ms)
      break
    case "final":
      void final()
      break
    case "close":
      for (const tab of tabs) tab.socket.terminate()
      agent.destroy()
      process.exit(0)
  }
})
// Without its driver, the process has nothing to do.
process.on("disconnect", () => process.exit(0))
