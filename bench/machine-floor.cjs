/**
 * The machine's floor for `bench:e2e`: a plain Node server in the shape of the counter app
 * with no Effect and no leasehold. `node:cluster` forks `WORKERS` workers sharing `PORT`
 * (round-robin, as the app's primary does); each answers `GET /healthz` with a small JSON
 * body and speaks the app's socket protocol on `/ws` (`hello`, `state`, then an `update`
 * per `bump`, read-increment-write on an in-process Map). Printing `up` once every worker
 * listens. What the same load costs a call on this machine before any app does anything.
 */
const cluster = require("node:cluster")
const http = require("node:http")
const { WebSocketServer } = require("ws")

const workers = Number(process.env.WORKERS ?? "1")
const port = Number(process.env.PORT)

if (cluster.isPrimary) {
  let listening = 0
  cluster.on("listening", () => {
    if (++listening === workers) console.log("up")
  })
  for (let i = 0; i < workers; i++) cluster.fork()
  const stop = () => {
    for (const worker of Object.values(cluster.workers ?? {})) worker?.kill("SIGKILL")
    process.exit(0)
  }
  process.on("SIGTERM", stop)
  process.on("SIGINT", stop)
} else {
  const counts = new Map()
  const server = http.createServer((req, res) => {
    req.resume()
    if (req.method === "GET" && req.url === "/healthz") {
      const body = JSON.stringify({ ok: true })
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
      res.end(body)
    } else {
      res.writeHead(404)
      res.end()
    }
  })
  const sockets = new WebSocketServer({ server, path: "/ws" })
  sockets.on("connection", (socket, req) => {
    const token = new URL(req.url, "http://x").searchParams.get("token") ?? "t"
    socket.send(JSON.stringify({ type: "hello", token, instanceId: String(process.pid) }))
    socket.send(JSON.stringify({ type: "state", n: counts.get(token) ?? 0, v: 0 }))
    socket.on("message", (data) => {
      const message = JSON.parse(data.toString())
      if (message.type !== "bump") return
      const n = (counts.get(token) ?? 0) + message.by
      counts.set(token, n)
      socket.send(JSON.stringify({ type: "update", n, v: n }))
    })
  })
  server.listen(port, "127.0.0.1")
}
