/**
 * TLS for tests: whether this machine's redis-server speaks it, and a self-signed
 * certificate for 127.0.0.1 to serve it with.
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import * as RedisServer from "./RedisServer.js"

/** Whether this machine's redis-server was built with TLS (an unknown option fails at once). */
export const redisHasTls = (): boolean => {
  try {
    execFileSync("redis-server", ["--port", "0", "--tls-port", "0"], { stdio: "pipe", timeout: 5_000 })
    return true
  } catch (error) {
    const output = String((error as { stdout?: unknown }).stdout ?? "") + String((error as { stderr?: unknown }).stderr)
    return !output.includes("Bad directive") && !output.includes("FATAL CONFIG")
  }
}

/** A self-signed certificate for 127.0.0.1 (`cert`, `key`), in a directory removed with the scope. */
export const selfSignedCertificate = Effect.gen(function* () {
  const dir = fs.mkdtempSync(path.join(RedisServer.runDir(), "tls-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
  const cert = path.join(dir, "cert.pem")
  const key = path.join(dir, "key.pem")
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1"
    ],
    { stdio: "pipe" }
  )
  return { cert, key }
})
