import { defaultServerConditions } from "vite";
import { defineConfig } from "vitest/config";

export default defineConfig({
  // Tests import the generated sources, not dist/: package.json maps #gen/* under this condition.
  ssr: { resolve: { conditions: ["contextd-source", ...defaultServerConditions] } },
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Suites start real servers and redis-server processes; two cores do not gain from more forks.
    maxWorkers: 2,
    reporters: ["default", "json"],
    outputFile: { json: ".test-results/vitest.json" },
  },
});
