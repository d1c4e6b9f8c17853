/**
 * `readSlices`: GETEX each slice, refreshing its TTL, and the fence's with them (it lives as
 * long as the slices it protects); values in order, nil where missing.
 *
 * @internal
 */

import * as Option from "effect/Option"
import { readAndRefresh, refreshTokenKey } from "../memory/space.js"
import { asArray, asNullableString } from "../redis/script.js"
import { sliceNamesError, tokenError } from "../validate.js"
import { describe } from "./operation.js"

/** @internal */
export interface Args {
  readonly token: string
  readonly names: ReadonlyArray<string>
}

/** @internal */
export const operation = describe({
  name: "readSlices",
  keys: ["fence"],
  restKeys: "slices",
  args: ["tokenMs"],
  body: () => `
redis.call("PEXPIRE", fence, tokenMs)
local result = {}
for i, key in ipairs(slices) do
  result[i] = redis.call("GETEX", key, "PX", tokenMs)
end
return result
`,
  decode: (reply): ReadonlyArray<string | null> | undefined => {
    const values = asArray(reply)?.map(asNullableString)
    return values === undefined || values.some((value) => value === undefined)
      ? undefined
      : (values as ReadonlyArray<string | null>)
  },
  input: ({ keys, tokenMs }, { names, token }: Args) => ({
    keys: { fence: keys.fence(token) },
    restKeys: names.map((name) => keys.slice(token, name)),
    args: { tokenMs }
  }),
  memory: (s, now, { names, token }) => {
    refreshTokenKey(s, s.keys.fence(token), now)
    return readAndRefresh(s, token, names, now)
  },
  read: (values, { names }) => names.map((_, i) => Option.fromNullishOr(values[i])),
  check: ({ names, token }) => tokenError(token) ?? sliceNamesError(names)
})
