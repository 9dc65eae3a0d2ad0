import { fileURLToPath } from "node:url";
import { defaultClientConditions, defineConfig } from "vite";

// The web inspector, bundled at build time (`npm run build`) into dist/inspector, which the
// sidecar serves under /inspector/. Relative asset URLs, so the page works under that path.
export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "./",
  logLevel: "warn",
  // package.json maps #gen/* to the generated sources under this condition (see its "imports").
  resolve: { conditions: ["contextd-source", ...defaultClientConditions] },
  build: {
    outDir: fileURLToPath(new URL("../dist/inspector", import.meta.url)),
    emptyOutDir: true,
    sourcemap: true,
    chunkSizeWarningLimit: 1024,
  },
});
