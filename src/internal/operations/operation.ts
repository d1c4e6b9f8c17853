/**
 * A store operation described once: its arguments, the front's check of them, its Lua script
 * (named keys and arguments, body, reply decoder), the script's keys and arguments for a call,
 * its implementation on the embedded store's key space, how its reply is read, and, for a
 * step whose loss would break a promise (a grant, a commit), which replies wrote. Both drivers
 * run a description (`Driver.call`): the Redis one builds the call and reads the decoded
 * reply, the memory one runs `memory` in one step and reads its reply the same way; the
 * front checks the arguments with `check` before any I/O.
 *
 * The descriptions live here, beside `Store`, and belong to neither backend: adding an
 * operation is its description, its place in `Store` and its test.
 *
 * @internal
 */
import { type AcknowledgedError, type InvalidInput, type StoreError, StoreRefused } from "../../StoreError.js"
import type { Keys } from "../keys.js"
import type { Space } from "../memory/space.js"
import { define, type Input, type Script, type ScriptSpec } from "../redis/script.js"

/** What a call's keys and arguments are made of besides the operation's own arguments. @internal */
export interface OperationContext {
  readonly keys: Keys
  readonly lockMs: number
  readonly tokenMs: number
  /** How long a grant stays pending for the worker it was handed to. */
  readonly handoffMs: number
  /** The prefix of the notice channels of a token's workers (the worker id follows). */
  readonly noticePrefix: (token: string) => string
}

/**
 * One operation. `E` is the error of its call: `AcknowledgedError` for a step with `wrote`
 * (replicas may have to acknowledge it), `StoreError` for the others.
 *
 * @internal
 */
export interface Operation<
  Args,
  Reply,
  Out,
  E extends AcknowledgedError = StoreError,
  I extends InvalidInput = InvalidInput,
  K extends string = string,
  A extends string = string
> {
  /** The operation's name, as its errors name it. */
  readonly name: string
  readonly script: Script<K, A, Reply>
  /** The script's keys and arguments for `args`. */
  readonly input: (env: OperationContext, args: Args) => Input<K, A>
  /** The script's steps on the embedded store's key space, in one synchronous block; its reply. */
  readonly memory: (space: Space, now: number, args: Args) => Reply
  /** What the store makes of a reply, on both backends; a `StoreRefused` refuses it. */
  readonly read: (reply: Reply, args: Args, lockMs: number) => Out | StoreRefused
  /**
   * Set for a step whose loss would break a promise: whether its reply wrote something a
   * replica must acknowledge (with `minReplicasAck`).
   */
  readonly wrote: ((reply: Reply, args: Args) => boolean) | undefined
  /** What is wrong with the arguments, checked by the front before any I/O. */
  readonly check: (args: Args) => I | undefined
  /** The error of a call, for the types only. */
  readonly _error?: E
}

/** A reply of another shape than the operation's, as both backends refuse it. @internal */
export const unexpectedReply = (operation: string, reply: unknown): StoreRefused =>
  new StoreRefused({ operation, reply: `unexpected reply ${JSON.stringify(reply)?.slice(0, 200) ?? String(reply)}` })

/** An operation whose types are not known here (what a driver's `call` runs over). @internal */
export type AnyOperation = Operation<any, any, any, AcknowledgedError, any, any, any>

/** The spec of `describe`: the script's parts, then the rest of the operation. */
interface Spec<K extends string, A extends string, Args, Reply, Out, I extends InvalidInput>
  extends ScriptSpec<K, A, Reply> {
  readonly input: (env: OperationContext, args: Args) => Input<K, A>
  readonly memory: (space: Space, now: number, args: Args) => Reply
  readonly read?: (reply: Reply, args: Args, lockMs: number) => Out | StoreRefused
  readonly check: (args: Args) => I | undefined
}

const scriptName = (name: string) => `leasehold${name[0]!.toUpperCase()}${name.slice(1)}`

const same = <Reply, Out>(reply: Reply) => reply as unknown as Out

/**
 * Describe an operation whose steps a replica need not acknowledge. The script's command
 * name is the operation's, prefixed (`leasehold<Name>`).
 *
 * @internal
 */
export const describe = <
  const K extends string,
  const A extends string,
  Args,
  Reply,
  Out = Reply,
  I extends InvalidInput = never
>(
  spec: Spec<K, A, Args, Reply, Out, I>
): Operation<Args, Reply, Out, StoreError, I, K, A> => ({
  name: spec.name,
  // the spec is the script's spec too (`ScriptSpec`), under the operation's prefixed name
  script: define({ ...spec, name: scriptName(spec.name) }),
  input: spec.input,
  memory: spec.memory,
  read: spec.read ?? same,
  wrote: undefined,
  check: spec.check
})

/**
 * Describe a step whose loss would break a promise: `wrote` says which replies wrote
 * something a replica must acknowledge.
 *
 * @internal
 */
export const describeAcknowledged = <
  const K extends string,
  const A extends string,
  Args,
  Reply,
  Out = Reply,
  I extends InvalidInput = never
>(
  spec: Spec<K, A, Args, Reply, Out, I> & { readonly wrote: (reply: Reply, args: Args) => boolean }
): Operation<Args, Reply, Out, AcknowledgedError, I, K, A> => ({ ...describe(spec), wrote: spec.wrote })
