/**
 * What this worker knows of a token's slices after its last grant of it (`Store.Stepping` on
 * Redis): the fence that grant took and the values it read and wrote. A grant taken by an
 * attempt (`acquireQueued`) and let go by its own release with no other worker queued is
 * remembered (with workers queued, the release hands the lock on: a step would be refused); the next
 * modification of that token on this worker then runs its function on these values and
 * commits in one step (`commitIfUnchanged`), which the store refuses unless nothing has
 * changed since. What is remembered here is never trusted: a wrong entry costs a refused step,
 * never a lost update.
 *
 * Bounded: at most `maxTokens` tokens (the least recently used leave first), each with at most
 * `maxChars` characters of values (a larger state is not remembered: the step would send it twice). A
 * token whose step was refused is not remembered again for its next `2^n` releases (`n` the
 * refusals in a row, up to `maxSkips`): a token that other workers modify too goes the
 * queued way without paying for a refused step each time.
 *
 * @internal
 */
import * as Option from "effect/Option"
import type { SliceEntry } from "../../Store.js"

/** What a grant read, or a release left: the fence and the values by slice. */
interface Known {
  readonly token: string
  readonly fence: number
  readonly values: Map<string, Option.Option<string>>
}

/** How many tokens are remembered at most. @internal */
export const maxTokens = 1024
/** The most characters of values remembered for a token. @internal */
export const maxChars = 4096
/** The longest run of releases a refused token is not remembered for. */
const maxSkips = 64

/** @internal */
export interface LastGrant {
  /** An attempt's grant under `lockId`: what it read. */
  readonly granted: (
    lockId: string,
    token: string,
    fence: number,
    slices: ReadonlyArray<string>,
    values: ReadonlyArray<string | null>
  ) => void
  /** The grant of `lockId` wrote `entries` and was let go with nobody queued (`released`), or not (`false`). */
  readonly released: (lockId: string, token: string, entries: ReadonlyArray<SliceEntry>, released: boolean) => void
  /** Something else was done under `lockId` (its values may have moved on here): forget its grant and its token. */
  readonly forgetGrant: (lockId: string) => void
  /**
   * The fence and the values of `slices` in order, when all are known; the token is then
   * taken for the step that asked (until `committed`, `refused` or `forget`, which the step
   * reaches uninterruptibly): a second
   * modification meanwhile finds nothing, and goes the queued way instead of a step that
   * the first one's commit would refuse.
   */
  readonly lookup: (
    token: string,
    slices: ReadonlyArray<string>
  ) => { readonly fence: number; readonly values: ReadonlyArray<Option.Option<string>> } | undefined
  /** A step committed: the fence it took, and what it wrote. */
  readonly committed: (token: string, fence: number, entries: ReadonlyArray<SliceEntry>) => void
  /** A step was refused: the token is forgotten, and not remembered for a while. */
  readonly refused: (token: string) => void
  /** A step's outcome is unknown (its command failed): the token is forgotten, with no back-off. */
  readonly forget: (token: string) => void
}

const charsOf = (values: Map<string, Option.Option<string>>) => {
  let chars = 0
  for (const value of values.values()) if (Option.isSome(value)) chars += value.value.length
  return chars
}

/** @internal */
export const make = (): LastGrant => {
  // both in least recently used order: a Map iterates in insertion order
  const grants = new Map<string, Known>()
  const tokens = new Map<string, Known>()
  // the releases a refused token is still not remembered for, and the refusals in a row
  const skips = new Map<string, { left: number; refusals: number }>()
  // the tokens taken by a step in flight (one per token): at most one per modification running
  const stepping = new Map<string, Known>()
  const bounded = <V>(map: Map<string, V>, key: string, value: V) => {
    map.delete(key)
    map.set(key, value)
    if (map.size > maxTokens) map.delete(map.keys().next().value!)
  }
  // known from now on, unless its values are too large to send twice
  const keep = (known: Known) => {
    if (charsOf(known.values) > maxChars) tokens.delete(known.token)
    else bounded(tokens, known.token, known)
  }
  const remember = (known: Known) => {
    const skip = skips.get(known.token)
    if (skip !== undefined && skip.left > 0) skip.left--
    else keep(known)
  }
  const apply = (values: Map<string, Option.Option<string>>, entries: ReadonlyArray<SliceEntry>) => {
    for (const [name, value] of entries) values.set(name, Option.some(value))
  }
  return {
    granted: (lockId, token, fence, slices, values) => {
      const known = new Map<string, Option.Option<string>>()
      for (const [i, name] of slices.entries()) known.set(name, Option.fromNullishOr(values[i]))
      bounded(grants, lockId, { token, fence, values: known })
    },
    released: (lockId, token, entries, released) => {
      const known = grants.get(lockId)
      grants.delete(lockId)
      // a grant not seen here (handed over by a notice, claimed) or another token's: what
      // is known of the token is behind it
      if (known === undefined || known.token !== token || !released) {
        tokens.delete(token)
        return
      }
      apply(known.values, entries)
      remember(known)
    },
    forgetGrant: (lockId) => {
      const known = grants.get(lockId)
      grants.delete(lockId)
      if (known !== undefined) tokens.delete(known.token)
    },
    lookup: (token, slices) => {
      const known = tokens.get(token)
      if (known === undefined) return undefined
      const values: Array<Option.Option<string>> = []
      for (const name of slices) {
        const value = known.values.get(name)
        if (value === undefined) return undefined
        values.push(value)
      }
      tokens.delete(token)
      stepping.set(token, known)
      return { fence: known.fence, values }
    },
    committed: (token, fence, entries) => {
      const known = stepping.get(token)
      stepping.delete(token)
      skips.delete(token)
      if (known === undefined) return
      apply(known.values, entries)
      keep({ token, fence, values: known.values })
    },
    forget: (token) => {
      stepping.delete(token)
      tokens.delete(token)
    },
    refused: (token) => {
      stepping.delete(token)
      tokens.delete(token)
      const refusals = Math.min((skips.get(token)?.refusals ?? 0) + 1, Math.log2(maxSkips))
      bounded(skips, token, { left: 2 ** refusals, refusals })
    }
  }
}
