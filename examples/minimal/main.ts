/**
 * The smallest app on leasehold: one slice of state per client token, one route that
 * changes it under the token's lock. On the embedded store, or on Redis (shared by as many
 * processes as you start) when LEASEHOLD_REDIS_URL is set.
 *
 *   npm run example:minimal
 *   curl -X POST 'localhost:3000/api/bump?token=tab-1'   # {"token":"tab-1","n":1}
 */
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Config, Effect, Layer, Schema } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { NodeMain, StateManager, Worker } from "leasehold"

// A client's counter: one slice of its state, zero for a token never seen before.
const Counter = StateManager.slice("counter", Schema.Struct({ n: Schema.Int }), { n: 0 })

// POST /api/bump?token=T adds one to T's counter and answers the new count.
const bump = Effect.gen(function* () {
  const { token } = yield* HttpServerRequest.schemaSearchParams(Schema.Struct({ token: Schema.String }))
  const states = yield* StateManager.StateManager
  const n = yield* states.modify(token, Counter, ({ n }) => [n + 1, { n: n + 1 }])
  return yield* HttpServerResponse.json({ token, n })
}).pipe(
  // A token is 1-128 characters of [A-Za-z0-9_.:-]; a missing one is a 400 already.
  Effect.catchTag("InvalidToken", (error) => HttpServerResponse.json({ error: error.message }, { status: 400 }))
)

const App = HttpRouter.serve(HttpRouter.add("POST", "/api/bump", bump), { disableLogger: true }).pipe(
  Layer.provide(NodeHttpServer.layerConfig(createServer, { port: Config.Port("PORT").pipe(Config.withDefault(3000)) }))
)

// The app over a leasehold worker, which closes after it: its state on the store the
// LEASEHOLD_* variables name (Redis when LEASEHOLD_REDIS_URL is set, else embedded).
const main = Layer.launch(Layer.provide(App, Worker.layerStateFromEnv))

// leasehold's runMain: the first Ctrl-C or SIGTERM shuts down in order, a second one
// does not cut that short.
NodeMain.runMain(main)
