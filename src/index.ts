/**
 * leasehold: per-client state for multi-worker Effect backends.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as Health from "./Health.js"

/** @since 0.1.0 */
export * as Inspect from "./Inspect.js"

/** @since 0.1.0 */
export * as InstanceId from "./InstanceId.js"

/** @since 0.1.0 */
export * as LeaseholdConfig from "./LeaseholdConfig.js"

/** @since 0.1.0 */
export * as Lock from "./Lock.js"

/** @since 0.1.0 */
export * as Mailbox from "./Mailbox.js"

/** @since 0.1.0 */
export * as MemoryStore from "./MemoryStore.js"

/** @since 0.1.0 */
export * as NodeMain from "./NodeMain.js"

/** @since 0.1.0 */
export * as Prometheus from "./Prometheus.js"

/** @since 0.1.0 */
export * as RedisStore from "./RedisStore.js"

/** @since 0.2.0 */
export * as SocketSession from "./SocketSession.js"

/**
 * @since 0.2.0
 */
export * as SocketSessionError from "./SocketSessionError.js"

/** @since 0.1.0 */
export * as StateError from "./StateError.js"

/** @since 0.1.0 */
export * as StateManager from "./StateManager.js"

/** @since 0.1.0 */
export * as Store from "./Store.js"

/** @since 0.1.0 */
export * as StoreError from "./StoreError.js"

/** @since 0.1.0 */
export * as Supervisor from "./Supervisor.js"

/** @since 0.1.0 */
export * as TokenManager from "./TokenManager.js"

/** @since 0.1.0 */
export * as Worker from "./Worker.js"
