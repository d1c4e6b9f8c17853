import { defineConfig } from "vitest/config"

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
    // Two test files at a time on the 2-core machines (vitest alone would run one): the tests
    // carry margins for a loaded machine, and the suite then takes about 6 min rather than 10.5.
    maxWorkers: 2
  }
})
