/**
 * The command line every benchmark reads: `--name value` flags, `--json` for one JSON
 * document instead of a table, and the percentile its rows report.
 */
const args = process.argv.slice(2)

/** The value after `--name`, when the flag is given. */
export const flag = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 ? args[i + 1] : undefined
}

/** Whether `--name` is on the command line. */
export const has = (name: string): boolean => args.includes(`--${name}`)

export const json = has("json")

/** The `p`th percentile of ascending samples (0 when there are none). */
export const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0
