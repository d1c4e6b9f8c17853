import { defineConfig } from "vitest/config"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/**
 * The files that take a minute or more, started first: without a record of earlier runs
 * (a fresh checkout, as CI's) vitest starts the largest files first, and a long file that
 * is small (the soaks) would start last and run alone at the end.
 */
const slowest = [
  "test/ReplicaAck.redis.test.ts",
  "test/Soak.sentinel.test.ts",
  "test/Store.sentinel.test.ts",
  "test/Failover.sentinel.test.ts",
  "test/Store.cluster.test.ts",
  "test/Soak.test.ts",
  "test/Store.redis.test.ts"
]

class SlowestFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const rank = (spec: TestSpecification) => {
      const i = slowest.findIndex((file) => spec.moduleId.endsWith(file))
      return i < 0 ? slowest.length : i
    }
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b))
  }
}

export default defineConfig({
  ssr: {
    resolve: {
      // `from "leasehold"` (the examples) resolves to `src/`, as under `node
      // --conditions=leasehold-source`; the rest are Vite's server defaults, which this list
      // replaces (vitest leaves out `module`).
      conditions: ["leasehold-source", "node", "development|production"]
    }
  },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    sequence: { sequencer: SlowestFirst },
    // Two test files at a time on the 2-core machines (vitest alone would run one): the tests
    // carry margins for a loaded machine, and the suite then takes about 6 min rather than 10.5.
    maxWorkers: 2
  }
})
