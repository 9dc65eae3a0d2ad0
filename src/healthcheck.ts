import { loadConfig } from "./server/operations/config.js";

/**
 * The container HEALTHCHECK: asks the local sidecar's grpc.health.v1 Check over Connect JSON
 * (HTTP/1.1, no client library) and exits 0 only for SERVING. Reads the same flags and
 * `CONTEXTD_*` variables as the server, so it finds the port the server listens on. Health stays
 * open when bearer tokens are configured, so the probe needs none.
 */
const config = loadConfig(process.argv.slice(2), process.env);
const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
const url = `http://${host.includes(":") ? `[${host}]` : host}:${config.port}/grpc.health.v1.Health/Check`;
try {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{}",
    signal: AbortSignal.timeout(2_000),
  });
  const body = (await response.json()) as { status?: string };
  if (response.status === 200 && body.status === "SERVING") process.exit(0);
  console.error(`contextd health: ${response.status} ${JSON.stringify(body)} from ${url}`);
} catch (error) {
  console.error(`contextd health: ${error instanceof Error ? error.message : String(error)} (${url})`);
}
process.exit(1);
