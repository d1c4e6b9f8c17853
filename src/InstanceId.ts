/**
 * The identity of one worker.
 *
 * @since 0.1.0
 */

import { randomUUID } from "node:crypto"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { validateInstanceId } from "./internal/validate.js"
import type { InvalidInstanceId } from "./StoreError.js"

/**
 * @since 0.1.0
 * @category tags
 */
export class InstanceId extends Context.Service<InstanceId, string>()("leasehold/InstanceId") {}

/**
 * A fresh UUID every time the layer is built: two workers built from this one layer
 * value get two ids (it is `Layer.fresh`, so Effect does not share it between `provide`s).
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<InstanceId> = Layer.fresh(
  Layer.effect(
    InstanceId,
    Effect.sync(() => randomUUID())
  )
)

/**
 * A fixed id, for tests and for deployments that name their workers. It obeys the token
 * charset (it becomes part of keys).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFixed = (id: string): Layer.Layer<InstanceId, InvalidInstanceId> =>
  Layer.effect(InstanceId, validateInstanceId(id))
