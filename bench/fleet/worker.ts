/**
 * A worker of `bench:fleet`, measured from outside: the server `FLEET_ENTRY` names (the
 * counter example's `examples/counter/main.ts`, or bench/fleet/baseline.ts) run as it is, in
 * a process the driver forks with an IPC channel and `--expose-gc`. Nothing of this reaches
 * the library or the example. On the channel it answers
 * - `{"type":"heap"}` with `{"type":"heap","bytes"}`: the heap in use after full collections;
 * - `{"type":"cpu"}` with `{"type":"cpu","us"}`: the process's CPU time so far (user + system).
 */
import * as path from "node:path"
import { pathToFileURL } from "node:url"

const gc = (globalThis as { gc?: () => void }).gc

process.on("message", (message: { readonly type?: string }) => {
  if (message.type === "heap") {
    if (gc === undefined) throw new Error("bench/fleet/worker.ts needs node --expose-gc")
    for (let i = 0; i < 3; i++) gc()
    process.send!({ type: "heap", bytes: process.memoryUsage().heapUsed })
  } else if (message.type === "cpu") {
    const usage = process.cpuUsage()
    process.send!({ type: "cpu", us: usage.user + usage.system })
  }
})
// The channel must not keep a server that was told to stop alive.
process.channel?.unref()

const entry = process.env.FLEET_ENTRY
if (entry === undefined) throw new Error("FLEET_ENTRY must name the server's entry point")
await import(pathToFileURL(path.resolve(entry)).href)
