/**
 * Notices lost for real on a single redis-server (`test/state/lostNotices.ts`), each test on
 * a server of its own.
 */
import { describe } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { lostNoticeSuite } from "./state/lostNotices.js"
import * as RedisServer from "./support/RedisServer.js"

describe("notices lost on a single server", () => {
  lostNoticeSuite(
    Effect.map(RedisServer.start(), (server) => ({
      nodes: [server],
      urlFor: (user, password) => `redis://${user}:${password}@127.0.0.1:${server.port}`,
      cluster: false,
      nodeFor: () => Effect.succeed(server),
      keyPrefix: "leasehold"
    }))
  )
})
