/**
 * Tokens marked for a while: what a worker remembers of a token's recent use once its session
 * is gone (a lease given up unused, a linger that no caller came back for), in a map of
 * deadlines swept when it has doubled since its last sweep.
 *
 * @internal
 */

const minSweep = 1024

/** @internal */
export class TokenMarks {
  private readonly marks = new Map<string, { readonly until: number; asked: number }>()
  /** The size at which the map is swept next. */
  private sweepAt = minSweep

  /**
   * Mark `token` until `until`. Swept when the map has doubled since the last sweep (at least
   * 1,024 entries): an entry lives a bounded time, so the map holds the recent ones, and a
   * worker marking thousands of tokens at once sweeps it a few times, not at each.
   */
  mark(token: string, now: number, until: number): void {
    if (this.marks.size >= this.sweepAt) {
      for (const [other, mark] of this.marks) if (mark.until <= now) this.marks.delete(other)
      this.sweepAt = Math.max(minSweep, 2 * this.marks.size)
    }
    this.marks.set(token, { until, asked: 0 })
  }

  /** Whether `token` is marked at `now` (a mark past its deadline is dropped). */
  has(token: string, now: number): boolean {
    return this.live(token, now) !== undefined
  }

  /**
   * Whether `token` is marked at `now`, but for every `every`-th time this is asked since it
   * was marked: then `false`, so that what the mark stands for is looked at again.
   */
  hasUnlessProbe(token: string, now: number, every: number): boolean {
    const mark = this.live(token, now)
    if (mark === undefined) return false
    mark.asked++
    return mark.asked % every !== 0
  }

  clear(token: string): void {
    this.marks.delete(token)
  }

  get size(): number {
    return this.marks.size
  }

  private live(token: string, now: number) {
    const mark = this.marks.get(token)
    if (mark === undefined) return undefined
    if (now < mark.until) return mark
    this.marks.delete(token)
    return undefined
  }
}
