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
    pool: "forks"
  }
})
