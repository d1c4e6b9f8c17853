/**
 * Which replies of the promise-carrying steps wrote something a replica must acknowledge
 * (with `minReplicasAck`): the driver's steps and the queue's ask the same questions.
 *
 * @internal
 */

/** A grant's reply wrote (the lock, the fence); a refusal wrote nothing worth a replica's acknowledgement. @internal */
export const granted = (reply: { readonly _tag: string }): boolean => reply._tag === "Acquired"

/**
 * A guarded step wrote slices: not `Lost`, and with entries. A commit without entries is a
 * release, whose loss breaks no promise (the lock lives on until it expires). @internal
 */
export const wrote =
  (entries: ReadonlyArray<unknown>) =>
  (reply: { readonly _tag: string }): boolean =>
    entries.length > 0 && reply._tag !== "Lost"
