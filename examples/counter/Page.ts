/**
 * `GET /`: the page. It keeps its token in sessionStorage (a reload keeps it, another tab
 * starts without one), shows the counter, the worker serving its socket and the socket's
 * state, and reconnects by itself with a growing delay.
 */
export const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>leasehold counter</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem; color: #222; }
  #count { font-size: 4rem; font-variant-numeric: tabular-nums; margin: 1rem 0; }
  button { font-size: 1.25rem; padding: .5rem 1.5rem; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; font-size: .875rem; color: #555; }
  dd { margin: 0; font-family: ui-monospace, monospace; word-break: break-all; }
  #status[data-state="open"] { color: #080; }
  #status[data-state="closed"] { color: #b00; }
  #error { color: #b00; min-height: 1.5em; }
</style>
</head>
<body>
<h1>Counter</h1>
<div id="count" aria-live="polite">–</div>
<button id="bump" type="button">+1</button>
<p id="error"></p>
<dl>
  <dt>connection</dt><dd id="status" data-state="connecting">connecting</dd>
  <dt>worker</dt><dd id="worker">–</dd>
  <dt>token</dt><dd id="token">–</dd>
</dl>
<script>
(() => {
  const key = "leasehold-token"
  const $ = (id) => document.getElementById(id)
  let socket
  let retry = 0
  const setStatus = (state) => { $("status").textContent = state; $("status").dataset.state = state }
  const connect = () => {
    const token = sessionStorage.getItem(key)
    const url = new URL("/ws", location.href)
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:"
    if (token) url.searchParams.set("token", token)
    setStatus("connecting")
    socket = new WebSocket(url)
    socket.onopen = () => { retry = 0; setStatus("open") }
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data)
      switch (message.type) {
        case "new_token": sessionStorage.setItem(key, message.token); break
        case "hello": $("worker").textContent = message.instanceId; $("token").textContent = message.token; break
        case "state": case "update": $("count").textContent = String(message.n); $("error").textContent = ""; break
        case "error": $("error").textContent = message.message; break
      }
    }
    socket.onclose = () => {
      setStatus("closed")
      const delay = Math.min(5000, 250 * 2 ** retry++)
      setTimeout(connect, delay)
    }
  }
  $("bump").onclick = () => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "bump", by: 1 }))
    else $("error").textContent = "not connected; reconnecting…"
  }
  connect()
})()
</script>
</body>
</html>
`
