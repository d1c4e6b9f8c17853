/**
 * A whole modification in one step of the store (`Store.Stepping`, `modifyInStep`): the
 * embedded store runs the caller's function inside its step; Redis cannot run it in a
 * script, and there the step runs it on the values this store's last grant of the token
 * read and wrote, then commits in one script if none of them (nor the fence) has changed
 * since, and answers `false` without a round trip when it knows nothing of the token (see
 * docs/state.md). `Store` re-exports it.
 *
 * @since 0.2.0
 */
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type { AcknowledgedError, InvalidSliceName, InvalidToken } from "../StoreError.js"
import type { SliceEntry } from "./storeModel.js"

/**
 * The one-step modification; `Store.Stepping`.
 *
 * @since 0.2.0
 * @category models
 */
export interface Stepping {
  /**
   * When the token's lock is free and no worker is queued: take a grant (the fence
   * incremented, as `acquireQueued` does), read `slices` (refreshing their expiry), call
   * `decide` with their values and the grant's fence, write the entries it returns (each
   * among `slices`) and let the grant go, in one step that nobody sees half done: no lock
   * is set, no notice sent. `when`, called first inside the step (so that what it looks at
   * cannot change before the step is made), asks for nothing (`undefined`: the step does
   * nothing), for that grant (`{}`), or for a `holder`'s: the same under the grant its
   * lock id holds (or takes back by its `claim`, as `writeIfHolder` does), the fence as it
   * stands, the lock kept. `written`, called last inside the step, is told the values read
   * and the entries written. `true` once done. Otherwise the answer is `false` (take the
   * lock the queued way) and nothing is done but, on the way of its own grant, what
   * `acquireQueued` would do at any attempt: the late queue entries leave, and a free
   * lock with workers queued goes to the head (on Redis, nothing at all). `when`,
   * `decide` and `written` run inside the store's step: they must be quick, and must not
   * throw (a throw is a defect, with nothing written if `decide` or `when` threw). On
   * Redis the step is not one block of this process: `when` and `decide` run before the
   * script is sent, on the values known from the last grant, `written` once it is made;
   * a `holder` is always answered `false` there (the lease makes the modification itself);
   * and `decide`'s result is dropped when the answer is `false`: it must be pure.
   */
  readonly modifyInStep?: (
    token: string,
    slices: ReadonlyArray<string>,
    decide: (values: ReadonlyArray<Option.Option<string>>, fence: number) => ReadonlyArray<SliceEntry>,
    options?: {
      readonly when?: () =>
        | { readonly holder?: { readonly lockId: string; readonly claim?: number | undefined } }
        | undefined
      readonly written?: (values: ReadonlyArray<Option.Option<string>>, entries: ReadonlyArray<SliceEntry>) => void
    }
  ) => Effect.Effect<boolean, InvalidToken | InvalidSliceName | AcknowledgedError>
}
