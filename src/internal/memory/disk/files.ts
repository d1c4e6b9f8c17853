/**
 * The files of the embedded store's data directory, one token each: their names, their
 * format and what a load accepts, the directory's lock file, and the atomic replacement
 * of a token's file.
 *
 * @internal
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { describeParseError, parseSafely } from "../../parse.js"
import { tokenProblem } from "../../validate.js"

/** @internal */
export const format = "leasehold.token/1"

/**
 * Token files are named by the SHA-256 of the token: any valid token gives a safe name on
 * every file system (no `:`, no `.` or `..`, no case collision on a case-insensitive disk,
 * no reserved device name). The token itself is inside the file.
 *
 * @internal
 */
export const fileStem = (token: string): string => createHash("sha256").update(token).digest("hex")

/** @internal */
export const tokenFile = /^[0-9a-f]{64}\.json$/
const tempSuffix = ".tmp"
/** @internal */
export const tempFile = /^[0-9a-f]{64}\.json\.tmp$/
/** @internal */
export const lockFile = ".leasehold.lock"

const StoredValue = Schema.Struct({ value: Schema.String, expiresAt: Schema.NullOr(Schema.Number) })

const TokenFile = Schema.Struct({
  format: Schema.Literal(format),
  token: Schema.String,
  keys: Schema.Record(Schema.String, StoredValue)
})

/** @internal */
export type TokenFile = typeof TokenFile.Type

/** The file's content, or what is wrong with it (a file nested too deeply included), in a few words. */
const parseTokenFile = (raw: string): Result.Result<TokenFile, string> =>
  Result.mapError(
    parseSafely(Schema.decodeUnknownResult(Schema.fromJsonString(TokenFile)))(raw),
    (error) => `not a token file: ${describeParseError(error)}`
  )

const integerPattern = /^-?\d+$/

/**
 * Only the fencing counter and the slices outlive the process; see `docs/configuration.md` for why.
 *
 * @internal
 */
export const persistedName = (name: string): boolean =>
  name === "fence" || (name.startsWith("s:") && tokenProblem(name.slice(2)) === undefined)

/** @internal */
export const reasonOf = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

const errorCode = (error: unknown): unknown =>
  typeof error === "object" && error !== null && "code" in error ? error.code : undefined

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return errorCode(error) === "EPERM"
  }
}

/**
 * Why the directory is in use by another store, if it is.
 *
 * @internal
 */
export class InUse extends Error {}

/**
 * Two stores on one directory would overwrite each other's files, so the directory holds a
 * lock file naming the process of its store. A lock whose process is gone was left by a
 * crash and is taken over.
 *
 * @internal
 */
export const takeLock = async (file: string): Promise<void> => {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await fs.writeFile(file, String(process.pid), { flag: "wx" })
      return
    } catch (error) {
      if (errorCode(error) !== "EEXIST") throw error
    }
    const owner = Number(await fs.readFile(file, "utf8").catch(() => ""))
    if (owner === process.pid) throw new InUse("another store of this process has it open")
    if (Number.isSafeInteger(owner) && owner > 0 && isAlive(owner)) {
      throw new InUse(`process ${owner} has it open (${file})`)
    }
    await fs.rm(file, { force: true })
  }
  throw new InUse(`${file} keeps coming back`)
}

/** Why a decoded file cannot be loaded as the file named `stem`; `undefined` when it can. */
const fileProblem = (stem: string, file: TokenFile): string | undefined => {
  const problem = tokenProblem(file.token)
  if (problem !== undefined) return `its token is invalid (${problem})`
  if (fileStem(file.token) !== stem) return "its name does not match the token it holds"
  for (const [name, stored] of Object.entries(file.keys)) {
    if (!persistedName(name)) return `unexpected key ${JSON.stringify(name)}`
    if (name === "fence" && !integerPattern.test(stored.value)) return "its fencing counter is not an integer"
  }
  return undefined
}

/**
 * Replace `file` with `content` atomically: written to a temp file beside it, synced, then renamed over it.
 *
 * @internal
 */
export const writeFile = async (file: string, content: string) => {
  const temp = `${file}${tempSuffix}`
  try {
    const handle = await fs.open(temp, "w")
    try {
      await handle.writeFile(content, "utf8")
      // Synced before the rename: after a power loss the name never points at an empty file.
      await handle.sync()
    } finally {
      await handle.close()
    }
    await fs.rename(temp, file)
  } catch (error) {
    await fs.rm(temp, { force: true }).catch(() => undefined)
    throw error
  }
}

/**
 * The token file `name` in `dir`, or `undefined` (with a warning) when it cannot be read or loaded.
 *
 * @internal
 */
export const readTokenFile = (dir: string, name: string) =>
  Effect.gen(function* () {
    const file = path.join(dir, name)
    const raw = yield* Effect.result(Effect.tryPromise(() => fs.readFile(file, "utf8")))
    if (Result.isFailure(raw)) {
      yield* Effect.logWarning(`MemoryStore: skipping ${file}: cannot read it: ${reasonOf(raw.failure.cause)}`)
      return undefined
    }
    const decoded = parseTokenFile(raw.success)
    const problem = Result.isFailure(decoded)
      ? decoded.failure
      : fileProblem(name.slice(0, -".json".length), decoded.success)
    if (problem !== undefined || Result.isFailure(decoded)) {
      yield* Effect.logWarning(`MemoryStore: skipping ${file}: ${problem}`)
      return undefined
    }
    return decoded.success
  })
