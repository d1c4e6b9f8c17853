/**
 * The API caller of `bench:fleet`, in a process of its own: `POST /api/bump?token=T&by=1` for
 * a tab picked at random, through a worker picked at random, `rate` times a second on a
 * steady schedule (open: a call goes out on time whether or not the earlier ones were
 * answered), on keep-alive connections. Driven over the IPC channel as the tabs' generator is
 * (bench/fleet/generator.ts): `start {measure, ports, tokens}`, `stop` → `stopped {sent,
 * answered, failed, latencies}`, `drain {ms}` → `drained {pending, late}`, `final` →
 * `final {tabs: [token, answered]}` (the calls answered 200 per tab, over the whole run).
 */
import * as http from "node:http"

const rate = Number(process.env.FLEET_API_RATE ?? "100")

let ports: ReadonlyArray<number> = []
let tokens: ReadonlyArray<string> = []
let timer: NodeJS.Timeout | undefined
let measuring = false
let windowSent = 0
let windowAnswered = 0
let failed = 0
let pending = 0
let latencies: Array<number> = []
const late: Array<number> = []
const answeredByToken = new Map<string, number>()
/** Calls answered otherwise than 200 (a store error may come after the write), per tab. */
const unknownByToken = new Map<string, number>()
const agents = new Map<number, http.Agent>()

const reply = (message: object) => process.send!(message)

const agentFor = (port: number) => {
  let agent = agents.get(port)
  if (agent === undefined) {
    agent = new http.Agent({ keepAlive: true, maxSockets: 32 })
    agents.set(port, agent)
  }
  return agent
}

const call = () => {
  const token = tokens[Math.floor(Math.random() * tokens.length)]!
  const port = ports[Math.floor(Math.random() * ports.length)]!
  const measured = measuring
  const at = performance.now()
  if (measured) windowSent++
  pending++
  const done = (ok: boolean) => {
    pending--
    if (!ok) {
      failed++
      unknownByToken.set(token, (unknownByToken.get(token) ?? 0) + 1)
      return
    }
    answeredByToken.set(token, (answeredByToken.get(token) ?? 0) + 1)
    if (measuring) windowAnswered++
    if (measured) (measuring ? latencies : late).push(performance.now() - at)
  }
  http
    .request(
      { host: "127.0.0.1", port, method: "POST", path: `/api/bump?token=${token}&by=1`, agent: agentFor(port) },
      (response) => {
        response.resume()
        response.on("end", () => done(response.statusCode === 200))
      }
    )
    .on("error", () => done(false))
    .end()
}

const start = (measure: boolean) => {
  measuring = measure
  windowSent = 0
  windowAnswered = 0
  failed = 0
  latencies = []
  late.length = 0
  const began = performance.now()
  let made = 0
  // Catch up on the schedule after a late timer, so the rate holds under load.
  timer = setInterval(() => {
    const due = Math.floor(((performance.now() - began) / 1000) * rate)
    for (; made < due; made++) call()
  }, 5)
}

const drain = async (ms: number) => {
  const deadline = performance.now() + ms
  while (pending > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 50))
  reply({ type: "drained", pending, late })
}

process.on("message", (message: { type: string; [key: string]: any }) => {
  switch (message.type) {
    case "start":
      ports = message.ports
      tokens = message.tokens
      start(message.measure === true)
      break
    case "stop":
      clearInterval(timer)
      measuring = false
      reply({ type: "stopped", sent: windowSent, answered: windowAnswered, failed, latencies })
      break
    case "drain":
      void drain(message.ms)
      break
    case "final":
      reply({ type: "final", tabs: [...answeredByToken], unknown: [...unknownByToken] })
      break
    case "close":
      for (const agent of agents.values()) agent.destroy()
      process.exit(0)
  }
})
process.on("disconnect", () => process.exit(0))
