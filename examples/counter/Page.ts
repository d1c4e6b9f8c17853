/**
 * `GET /`: the page, on the browser client (`leasehold/client`, served as the package ships
 * it), which keeps the tab's token in sessionStorage, reconnects, and applies each bump once.
 */
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

/** Where the page loads the client from. */
export const clientPath = "/leasehold/client.js"

/** The client module, read once at start. */
export const client = readFileSync(fileURLToPath(import.meta.resolve("leasehold/client")), "utf8")

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
<script type="module">
  import { connect } from "${clientPath}"

  const $ = (id) => document.getElementById(id)
  const show = (count) => { $("count").textContent = String(count.n); $("error").textContent = "" }
  const session = connect({
    url: "/ws",
    onState: show,
    onUpdate: show,
    onError: (message) => { $("error").textContent = message },
    onStatus: (status) => {
      $("status").textContent = status.state
      $("status").dataset.state = status.state
      if (status.state === "open") { $("worker").textContent = status.instanceId; $("token").textContent = status.token }
    }
  })
  $("bump").onclick = () => session.send({ type: "bump", by: 1 }).catch((error) => { $("error").textContent = error.message })
</script>
</body>
</html>
`
