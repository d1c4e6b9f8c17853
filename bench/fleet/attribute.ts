/**
 * Where a Redis's time goes, per top-level command (a script by its name): every command
 * logged for `seconds` (`SLOWLOG` with a threshold of 0), summed. `node --import tsx
 * bench/fleet/attribute.ts PORT SECONDS`.
 */
import { createHash } from "node:crypto"
import { Redis } from "ioredis"
import { singleServer } from "../../src/internal/redis/script.js"
import * as Scripts from "../../src/internal/redis/scripts/index.js"

const [port = "6379", seconds = "5"] = process.argv.slice(2)
const names = new Map<string, string>()
for (const script of Object.values(Scripts) as Array<{ name?: string; lua?: (d: typeof singleServer) => string }>) {
  if (typeof script?.lua !== "function" || script.name === undefined) continue
  names.set(createHash("sha1").update(script.lua(singleServer)).digest("hex"), script.name)
}
const redis = new Redis(Number(port), "127.0.0.1")
await redis.config("SET", "slowlog-max-len", "10000000")
await redis.config("SET", "slowlog-log-slower-than", "0")
await redis.slowlog("RESET")
const cpu0 = await redis.info("cpu")
const stats0 = await redis.info("stats")
await new Promise((r) => setTimeout(r, Number(seconds) * 1000))
const cpu1 = await redis.info("cpu")
const stats1 = await redis.info("stats")
await redis.config("SET", "slowlog-log-slower-than", "-1")
const log = (await redis.slowlog("GET", "-1")) as Array<[number, number, number, Array<string>, string]>
await redis.slowlog("RESET")
const used = (info: string) =>
  ["used_cpu_sys", "used_cpu_user"].reduce((sum, k) => sum + Number(new RegExp(`${k}:([0-9.]+)`).exec(info)![1]), 0)
const by = new Map<string, { count: number; us: number }>()
let total = 0
let inner = 0
for (const [, , us, args, client] of log) {
  // a command a script ran is logged too, from no client: its time is in the script's
  if (client === "?:0") {
    inner++
    continue
  }
  const cmd = args[0]!.toLowerCase()
  const key = cmd === "evalsha" ? `script ${names.get(args[1]!) ?? args[1]!.slice(0, 8)}` : cmd
  const entry = by.get(key) ?? { count: 0, us: 0 }
  entry.count++
  entry.us += us
  by.set(key, entry)
  total += us
}
const stat = (info: string, k: string) => Number(new RegExp(`${k}:([0-9]+)`).exec(info)![1])
const reads = stat(stats1, "total_reads_processed") - stat(stats0, "total_reads_processed")
const writes = stat(stats1, "total_writes_processed") - stat(stats0, "total_writes_processed")
console.log(`socket reads ${reads}, writes ${writes}`)
const cpuUs = (used(cpu1) - used(cpu0)) * 1e6
console.log(
  `requests ${log.length - inner} (and ${inner} run by scripts), exec ${Math.round(total / 1000)} ms, redis cpu ${Math.round(cpuUs / 1000)} ms`
)
for (const [key, { count, us }] of [...by].sort((a, b) => b[1].us - a[1].us)) {
  console.log(
    `${key.padEnd(40)} ${String(count).padStart(7)} ${(us / 1000).toFixed(1).padStart(8)} ms  ${(us / count).toFixed(1)} µs`
  )
}
redis.disconnect()
