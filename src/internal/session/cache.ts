/**
 * A hold's cache: the slices read or written under its grant, the writes it owes, and the
 * modifications whose acknowledgement waits for their write. Every change to it is made
 * here.
 *
 * @internal
 */
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type { SliceEntry } from "../../Store.js"
import type { Request } from "./session.js"

/**
 * A slice's entry in a parked lease's cache, flat (`ParkedLease.slices`), a triple per
 * slice: its name, its encoding (`undefined`: nothing stored), and whether it is still to
 * be written.
 *
 * @internal
 */
export type FlatSlices = Array<string | boolean | undefined>

/**
 * What a hold read and wrote under its grant.
 *
 * @internal
 */
export class HoldCache {
  /** How long the last group commit took (ms): what a write now would add to the hold. */
  private lastWriteMs: number

  private constructor(
    /** The slices read or written, as the store holds them once the writes owed are made. */
    private readonly values: Map<string, Option.Option<string>>,
    /**
     * The writes not yet made: each slice's latest value. It holds every write of `unacked`
     * (a group commit takes both at once).
     */
    private readonly dirty: Map<string, string>,
    /** Modifications whose acknowledgement waits for the next write. */
    private unacked: Array<Request>,
    writeMs: number
  ) {
    this.lastWriteMs = writeMs
  }

  /** The grant's reads, with the writes of a modification its caller made under it (`DecidedByCaller`). */
  static ofGrant(
    values: ReadonlyMap<string, Option.Option<string>>,
    carried: { readonly writes: ReadonlyArray<SliceEntry>; readonly request: Request } | undefined
  ): HoldCache {
    const cache = new Map(values)
    for (const [name, value] of carried?.writes ?? []) cache.set(name, Option.some(value))
    return new HoldCache(
      cache,
      new Map<string, string>(carried?.writes ?? []),
      carried === undefined ? [] : [carried.request],
      0
    )
  }

  /** The cache and the writes owed of a parked lease (`toFlat`). */
  static ofFlat(slices: FlatSlices, writeMs: number): HoldCache {
    const cache = new Map<string, Option.Option<string>>()
    const dirty = new Map<string, string>()
    for (let i = 0; i < slices.length; i += 3) {
      const name = slices[i] as string
      const value = slices[i + 1] as string | undefined
      cache.set(name, value === undefined ? Option.none() : Option.some(value))
      if (slices[i + 2] === true) dirty.set(name, value!)
    }
    return new HoldCache(cache, dirty, [], writeMs)
  }

  /**
   * The cache and the writes it owes, flat (`ParkedLease.slices`). The writes owed are the
   * cache's latest values (every write served sets both).
   */
  toFlat(): FlatSlices {
    // made at its size: grown by pushes, its store would have room for five slices more
    const slices: FlatSlices = new Array<string | boolean | undefined>(3 * this.values.size)
    let i = 0
    for (const [name, value] of this.values) {
      slices[i++] = name
      slices[i++] = Option.getOrUndefined(value)
      slices[i++] = this.dirty.has(name)
    }
    return slices
  }

  /** The slice cached; `undefined` when it was never read here. */
  get(name: string): Option.Option<string> | undefined {
    return this.values.get(name)
  }

  has(name: string): boolean {
    return this.values.has(name)
  }

  /** The slices read or written under the grant: what an extension keeps alive and a release carries. */
  names(): Array<string> {
    return [...this.values.keys()]
  }

  /** Whether a write is owed. */
  get owesWrites(): boolean {
    return this.dirty.size > 0
  }

  /** The modifications whose acknowledgement waits for the next write. */
  get awaitingWrite(): ReadonlyArray<Request> {
    return this.unacked
  }

  get writeMs(): number {
    return this.lastWriteMs
  }

  /** Every write owed: the last commit's. */
  owed(): Array<SliceEntry> {
    return [...this.dirty.entries()]
  }

  /** Slices read from the store under the grant's lock: as current as the grant's reads. */
  fetched(names: ReadonlyArray<string>, values: ReadonlyArray<Option.Option<string>>): void {
    for (const [i, name] of names.entries()) this.values.set(name, values[i] ?? Option.none())
  }

  /**
   * A modification served from memory: its writes taken in, and its acknowledgement now
   * (`acknowledgeNow`) or once written.
   */
  served(request: Request, writes: ReadonlyArray<SliceEntry>, acknowledgeNow: boolean): void {
    for (const [name, value] of writes) {
      this.values.set(name, Option.some(value))
      this.dirty.set(name, value)
    }
    if (acknowledgeNow) request.ack.done(Exit.void)
    else this.unacked.push(request)
  }

  /** The writes of the modification the hold's end took over: made by the last commit, which acknowledges it. */
  owe(request: Request, writes: ReadonlyArray<SliceEntry>): void {
    for (const [name, value] of writes) this.dirty.set(name, value)
    this.unacked.push(request)
  }

  /**
   * A modification that writes nothing, acknowledged: at once, or, when it read a slice the
   * hold owes a write of while writes wait for their acknowledgement, with them, by the group
   * commit that makes them. `dirty` holds every write not yet made, those of `unacked` among
   * them (a group commit takes both at once), so a modification that read none of its slices
   * (`Lock.withLock` reads none) read nothing unacknowledged and does not wait.
   */
  unwritten(request: Request): void {
    if (this.unacked.length > 0 && this.readsDirty(request)) this.unacked.push(request)
    else request.ack.done(Exit.void)
  }

  private readsDirty(request: Request): boolean {
    for (const name of request.slices) if (this.dirty.has(name)) return true
    return false
  }

  /**
   * A group commit's batch, taken out: the modifications it acknowledges and the writes it
   * makes; `undefined` when none waits for a write.
   */
  takeBatch(): readonly [requests: Array<Request>, writes: Array<SliceEntry>] | undefined {
    if (this.unacked.length === 0) return undefined
    const requests = this.unacked
    this.unacked = []
    const writes = [...this.dirty.entries()]
    this.dirty.clear()
    return [requests, writes]
  }

  /** How long a group commit took. */
  committedIn(ms: number): void {
    this.lastWriteMs = ms
  }

  /** A modification made in one step of the store under the grant (`servedInStep`): the store holds it. */
  servedInStep(
    slices: ReadonlyArray<string>,
    values: ReadonlyArray<Option.Option<string>>,
    writes: ReadonlyArray<SliceEntry>
  ): void {
    const cache = this.values
    for (let i = 0; i < slices.length; i++) if (!cache.has(slices[i]!)) cache.set(slices[i]!, values[i]!)
    for (const [name, value] of writes) cache.set(name, Option.some(value))
  }
}
