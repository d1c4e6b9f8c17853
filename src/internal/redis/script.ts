/**
 * A Lua script of `RedisStore` as a typed value: the names of its keys and arguments, the
 * Lua that reads them into named locals, and the decoder of its reply. The store calls a
 * script with a record of named keys and arguments (`invoke`), so a call site cannot pass
 * two of them in each other's place, and reads its reply only through the decoder.
 *
 * Every script touches only keys of one token (all carry the `{<token>}` hash tag), so it
 * runs on one Cluster slot. Channels are not keys: they travel in ARGV. On a Cluster the
 * scripts publish with SPUBLISH (a token's channel carries its hash tag, so it lives in the
 * script's slot): the publish command is a parameter of the Lua (`Dialect`), not an edit of
 * its text.
 *
 * @internal
 */

/** How the scripts of one store publish: PUBLISH on a single server, SPUBLISH on a Cluster. @internal */
export interface Dialect {
  readonly publish: "PUBLISH" | "SPUBLISH"
}

/** @internal */
export const singleServer: Dialect = { publish: "PUBLISH" }

/** @internal */
export const cluster: Dialect = { publish: "SPUBLISH" }

/** What a script is called with: its named keys and arguments, and the variable tails of each. @internal */
export interface Input<K extends string, A extends string> {
  readonly keys: { readonly [name in K]: string }
  readonly args: { readonly [name in A]: string | number }
  /** The keys after the named ones (slices), read by the Lua as the table named by `restKeys`. */
  readonly restKeys?: ReadonlyArray<string>
  /** The arguments after the named ones (values), read as the table named by `restArgs`. */
  readonly restArgs?: ReadonlyArray<string>
}

/** @internal */
export interface Script<K extends string, A extends string, R> {
  /** The command name `defineCommand` gives it (prefixed: it never shadows an ioredis command). */
  readonly name: string
  readonly keys: ReadonlyArray<K>
  readonly args: ReadonlyArray<A>
  /** The whole Lua for a dialect: the named locals, then the body. */
  readonly lua: (dialect: Dialect) => string
  /** The reply as the store reads it; `undefined` for a reply of another shape. */
  readonly decode: (reply: unknown) => R | undefined
}

/** A script whose key and argument names are not known here (the list `defineCommand` runs over). @internal */
export type AnyScript = Script<any, any, unknown>

/**
 * What a script is made of: its name, the names of its keys and arguments (and of the rest,
 * when it takes any number more), its body in a dialect, and how its reply is decoded.
 *
 * @internal
 */
export interface ScriptSpec<K extends string, A extends string, R> {
  readonly name: string
  readonly keys: ReadonlyArray<K>
  readonly args: ReadonlyArray<A>
  readonly restKeys?: string
  readonly restArgs?: string
  readonly body: (dialect: Dialect) => string
  readonly decode: (reply: unknown) => R | undefined
}

/**
 * Define a script. The Lua opens with one `local <name> = KEYS[i]` / `ARGV[i]` per name, in
 * the order given, and with the tables `restKeys` / `restArgs` when named; `body` uses those
 * names only. Names are Lua identifiers.
 *
 * @internal
 */
export const define = <const K extends string, const A extends string, R>(
  spec: ScriptSpec<K, A, R>
): Script<K, A, R> => {
  const header = [
    ...spec.keys.map((name, i) => `local ${name} = KEYS[${i + 1}]`),
    ...(spec.restKeys === undefined ? [] : [`local ${spec.restKeys} = {unpack(KEYS, ${spec.keys.length + 1})}`]),
    ...spec.args.map((name, i) => `local ${name} = ARGV[${i + 1}]`),
    ...(spec.restArgs === undefined ? [] : [`local ${spec.restArgs} = {unpack(ARGV, ${spec.args.length + 1})}`])
  ].join("\n")
  return {
    name: spec.name,
    keys: spec.keys,
    args: spec.args,
    lua: (dialect) => `${header}\n${spec.body(dialect)}`,
    decode: spec.decode
  }
}

/**
 * The command that calls `script` with named keys and arguments: its name, the key count,
 * the keys and the arguments in the order the script's Lua reads them (for a pipeline).
 *
 * @internal
 */
export const commandLine = <K extends string, A extends string, R>(
  script: Script<K, A, R>,
  input: Input<K, A>
): readonly [name: string, ...parts: Array<string>] => {
  const keys = [...script.keys.map((name) => input.keys[name]), ...(input.restKeys ?? [])]
  const args = [...script.args.map((name) => String(input.args[name])), ...(input.restArgs ?? [])]
  return [script.name, String(keys.length), ...keys, ...args]
}

/**
 * Call `script` on `connection` (where `defineAll` defined it) with named keys and arguments.
 *
 * @internal
 */
export const invoke = <K extends string, A extends string, R>(
  connection: object,
  script: Script<K, A, R>,
  input: Input<K, A>
): Promise<unknown> => {
  const [name, ...parts] = commandLine(script, input)
  const command = (connection as Record<string, (...parts: Array<string>) => Promise<unknown>>)[name]
  if (command === undefined) return Promise.reject(new Error(`script ${name} is not defined on this connection`))
  return command.apply(connection, parts)
}

/** Define every script on a connection, in a dialect. @internal */
export const defineAll = (
  connection: { defineCommand: (name: string, definition: { lua: string }) => void },
  scripts: ReadonlyArray<AnyScript>,
  dialect: Dialect
): void => {
  for (const script of scripts) connection.defineCommand(script.name, { lua: script.lua(dialect) })
}

// --- reply shapes, for the decoders ---------------------------------------------------

/** @internal */
export const asArray = (reply: unknown): ReadonlyArray<unknown> | undefined =>
  Array.isArray(reply) ? reply : undefined

/** A bulk string or nil (`null`); `undefined` for anything else. @internal */
export const asNullableString = (value: unknown): string | null | undefined =>
  typeof value === "string" || value === null ? value : undefined

/** @internal */
export const asNumber = (value: unknown): number | undefined => (typeof value === "number" ? value : undefined)

/** A claim (a fence) as the scripts take it, "" for none. @internal */
export const claimArg = (claim: number | undefined): string => (claim === undefined ? "" : String(claim))
