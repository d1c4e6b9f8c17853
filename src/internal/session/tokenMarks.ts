/**
 * Tokens marked for a while: what a worker remembers of a token's recent use once its session
 * is gone (a lease given up unused, callers that came back at once), in a map of deadlines
 * swept when it has doubled since its last sweep.
 *
 * @internal
 */

const minSweep = 1024

/** @internal */
export class TokenMarks {
  private readonly until = new Map<string, number>()
  /** The size at which the map is swept next. */
  private sweepAt = minSweep

  /**
   * Mark `token` until `until`. Swept when the map has doubled since the last sweep (at least
   * 1,024 entries): an entry lives a bounded time, so the map holds the recent ones, and a
   * worker marking thousands of tokens at once sweeps it a few times, not at each.
   */
  mark(token: string, now: number, until: number): void {
    if (this.until.size >= this.sweepAt) {
      for (const [other, end] of this.until) if (end <= now) this.until.delete(other)
      this.sweepAt = Math.max(minSweep, 2 * this.until.size)
    }
    this.until.set(token, until)
  }

  /** Whether `token` is marked at `now` (a mark past its deadline is dropped). */
  has(token: string, now: number): boolean {
    const end = this.until.get(token)
    if (end === undefined) return false
    if (now < end) return true
    this.until.delete(token)
    return false
  }

  get size(): number {
    return this.until.size
  }
}
