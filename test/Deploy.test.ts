/**
 * The deployment files of deploy/ (docs/deploy.md): the systemd unit's command runs with the
 * unit's environment and stops the way systemd stops it (SIGTERM to the whole group, exit 0
 * within `TimeoutStopSec`, nothing of the worker left in Redis), and the Kubernetes manifest
 * parses and keeps its promises (probes on /healthz, a grace period above the shutdown bound,
 * several replicas behind a Service that selects them). The Dockerfile is not built here.
 * The checks that need `systemd-analyze` or PyYAML say so in their names, and warn, when the
 * machine lacks them.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { connect, freePort, request, root, socketRecords } from "./app/support.js"
import * as RedisServer from "./support/RedisServer.js"

const deployDir = path.join(root, "deploy")

interface Unit {
  readonly settings: ReadonlyMap<string, ReadonlyArray<string>>
  readonly environment: Readonly<Record<string, string>>
}

/** The unit's `Key=value` lines (a key may repeat, as `Environment=` does). */
const parseUnit = (text: string): Unit => {
  const settings = new Map<string, Array<string>>()
  for (const line of text.split("\n")) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line.trim())
    if (match === null) continue
    const values = settings.get(match[1]!) ?? []
    values.push(match[2]!)
    settings.set(match[1]!, values)
  }
  const environment: Record<string, string> = {}
  for (const assignment of settings.get("Environment") ?? []) {
    const at = assignment.indexOf("=")
    environment[assignment.slice(0, at)] = assignment.slice(at + 1)
  }
  return { settings, environment }
}

const single = (unit: Unit, key: string): string => {
  const values = unit.settings.get(key) ?? []
  assert.strictEqual(values.length, 1, `${key} set once`)
  return values[0]!
}

/** The shutdown bound of the unit's command: a worker's deadline, plus 2 s for a cluster primary. */
const shutdownBoundMs = (environment: Readonly<Record<string, string>>): number => {
  const worker = Number(environment.LEASEHOLD_SHUTDOWN_TIMEOUT_MS ?? "10000")
  return Number(environment.WORKERS ?? "1") > 1 ? worker + 2_000 : worker
}

const unit = parseUnit(fs.readFileSync(path.join(deployDir, "counter.service"), "utf8"))

/** The manifest's documents, through PyYAML when the machine has it. */
const manifest = (): ReadonlyArray<any> | undefined => {
  const probe = spawnSync("python3", ["-c", "import yaml"], { stdio: "ignore" })
  if (probe.status !== 0) return undefined
  const json = execFileSync(
    "python3",
    ["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))"],
    { input: fs.readFileSync(path.join(deployDir, "kubernetes.yaml")) }
  )
  return JSON.parse(json.toString())
}

const hasSystemdAnalyze = spawnSync("systemd-analyze", ["--version"], { stdio: "ignore" }).status === 0
const documents = manifest()
const verifyTitle = hasSystemdAnalyze
  ? "systemd-analyze verify finds nothing to say"
  : "systemd-analyze verify finds nothing to say (skipped: systemd-analyze is not installed)"
const manifestTitle =
  documents === undefined
    ? "deploy/kubernetes.yaml (skipped: python3 with PyYAML is not installed)"
    : "deploy/kubernetes.yaml (parsed with PyYAML)"
if (!hasSystemdAnalyze) console.warn("Deploy.test: systemd-analyze is not installed: the unit is not verified")
if (documents === undefined)
  console.warn("Deploy.test: python3 with PyYAML is not installed: the manifest is not parsed")

/** `major.minor` of a Node version string, as a number pair. */
const nodeVersion = (version: string): readonly [number, number] => {
  const [major, minor] = version.replace(/^v/, "").split(".").map(Number)
  return [major!, minor!]
}

describe("deploy/counter.service", () => {
  it("stops with SIGTERM to the whole group, after a timeout above the shutdown bound", () => {
    assert.strictEqual(single(unit, "KillMode"), "control-group")
    assert.strictEqual(single(unit, "KillSignal"), "SIGTERM")
    assert.isAbove(Number(single(unit, "TimeoutStopSec")) * 1_000, shutdownBoundMs(unit.environment))
    assert.match(single(unit, "ExecStart"), /^\/usr\/bin\/node /)
  })

  it.skipIf(!hasSystemdAnalyze)(verifyTitle, () => {
    const result = spawnSync("systemd-analyze", ["verify", path.join(deployDir, "counter.service")], {
      encoding: "utf8"
    })
    assert.strictEqual(result.status, 0, result.stderr)
    assert.strictEqual(result.stderr.trim(), "")
  })

  it.live(
    "its command runs with its environment and exits 0 within TimeoutStopSec of a SIGTERM to its group, its socket records removed",
    () =>
      Effect.gen(function* () {
        const server = yield* RedisServer.start()
        const port = yield* freePort
        const [node, ...args] = single(unit, "ExecStart").split(" ")
        assert.strictEqual(node, "/usr/bin/node")
        // The unit's command with this test's Node in place of /usr/bin/node: one of the
        // versions the unit asks for.
        const [major, minor] = nodeVersion(process.version)
        assert.isTrue(major > 22 || (major === 22 && minor >= 19), `Node ${process.version} >= 22.19`)
        // The unit's environment, but this test's Redis and port; nothing else (no NODE_OPTIONS).
        const env = {
          PATH: process.env.PATH,
          ...unit.environment,
          HOST: "127.0.0.1",
          PORT: String(port),
          LEASEHOLD_REDIS_URL: server.url
        }
        const child = yield* Effect.acquireRelease(
          // A process group of its own, as the service's control group.
          Effect.sync(() => spawn(process.execPath, args, { cwd: root, env, stdio: "inherit", detached: true })),
          (child: ChildProcess) =>
            Effect.sync(() => {
              if (child.exitCode !== null || child.signalCode !== null) return
              try {
                process.kill(-child.pid!, "SIGKILL")
              } catch {
                child.kill("SIGKILL")
              }
            })
        )
        const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
        const url = `http://127.0.0.1:${port}`
        // Ready: every worker listens, each answering /healthz with 200 and its own instance id
        // (each request is a new connection, which the cluster primary hands to its workers in
        // turn).
        const workers = Number(unit.environment.WORKERS ?? "1")
        const healthy = new Set<string>()
        // Bounded in time, not in requests: until the last worker listens, the primary hands
        // every connection to those that do, which answer at once (a loaded machine starts a
        // worker in seconds).
        const readyBy = Date.now() + 30_000
        while (healthy.size < workers && Date.now() < readyBy) {
          const answer = yield* request("GET", `${url}/healthz`).pipe(
            Effect.timeout("1 second"),
            Effect.orElseSucceed(() => undefined),
            Effect.catchDefect(() => Effect.succeed(undefined))
          )
          const instanceId = (answer?.body as { readonly instanceId?: unknown } | undefined)?.instanceId
          const known = healthy.size
          if (answer?.status === 200 && typeof instanceId === "string") healthy.add(instanceId)
          if (healthy.size === known) yield* Effect.sleep("100 millis")
        }
        assert.strictEqual(healthy.size, workers, `GET /healthz answered 200 from ${workers} workers`)
        // A tab's socket, whose record the shutdown must remove.
        yield* connect({ port }, "deploy-tab")
        assert.isAbove((yield* socketRecords(server)).length, 0)

        const stopped = Date.now()
        process.kill(-child.pid!, "SIGTERM")
        const timeoutMs = Number(single(unit, "TimeoutStopSec")) * 1_000
        const code = yield* Effect.promise(() => exited).pipe(Effect.timeout(timeoutMs))
        assert.strictEqual(code, 0)
        assert.isBelow(Date.now() - stopped, shutdownBoundMs(unit.environment))
        assert.deepStrictEqual(yield* socketRecords(server), [])
      }),
    90_000
  )
})

describe.skipIf(documents === undefined)(manifestTitle, () => {
  const deployment = () => documents!.find((document) => document.kind === "Deployment")
  const service = () => documents!.find((document) => document.kind === "Service")

  it("several replicas behind a Service that selects them", () => {
    assert.isAtLeast(deployment().spec.replicas, 2)
    const labels = deployment().spec.template.metadata.labels
    assert.deepStrictEqual(deployment().spec.selector.matchLabels, labels)
    for (const [key, value] of Object.entries(service().spec.selector)) assert.strictEqual(labels[key], value)
    const container = deployment().spec.template.spec.containers[0]
    const portNames = container.ports.map((port: any) => port.name)
    for (const port of service().spec.ports) assert.include(portNames, port.targetPort)
  })

  it("readiness and liveness on /healthz; a grace period above the preStop and the shutdown bound", () => {
    const pod = deployment().spec.template.spec
    const container = pod.containers[0]
    assert.strictEqual(container.readinessProbe.httpGet.path, "/healthz")
    assert.strictEqual(container.livenessProbe.httpGet.path, "/healthz")
    const env = Object.fromEntries(
      container.env.filter((entry: any) => entry.value !== undefined).map((entry: any) => [entry.name, entry.value])
    )
    const preStop = container.lifecycle.preStop.exec.command
    assert.strictEqual(preStop[0], "sleep")
    assert.isAbove(pod.terminationGracePeriodSeconds * 1_000, Number(preStop[1]) * 1_000 + shutdownBoundMs(env))
  })
})
