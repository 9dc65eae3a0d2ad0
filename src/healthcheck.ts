import { readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { loadConfig, type Config } from "./server/operations/config.js";

/**
 * The container HEALTHCHECK: asks the local sidecar's grpc.health.v1 Check over Connect JSON
 * (HTTP/1.1, no client library) and exits 0 only for SERVING. Health stays open when bearer
 * tokens are configured, so the probe needs none.
 *
 * Docker runs the probe as a separate process with the container's environment but without the
 * server's command line (`docker run contextd --port 8000` used to probe 7420), so the probe builds
 * its configuration from the server's own invocation: the flags and `CONTEXTD_*` variables of the
 * process `CONTEXTD_HEALTHCHECK_PID` names (default 1, the container's entrypoint), read from
 * /proc; when that process is not contextd (no /proc, or the probe runs outside the container),
 * from its own flags and environment. With `--tls-cert` it speaks HTTPS. It checks no server
 * identity: it talks to its own container over loopback and sends nothing secret. When client
 * certificates are required (`--tls-client-ca`) it presents `CONTEXTD_HEALTHCHECK_CERT` and
 * `CONTEXTD_HEALTHCHECK_KEY` (PEM files of a client certificate that CA signed) when set, else the
 * server's own certificate and key, which passes only when that certificate may act as a client.
 */
const config = loadConfig(...serverInvocation(Number(process.env.CONTEXTD_HEALTHCHECK_PID || "1")));
const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
const tls = config.tlsCert !== "";
const url = `${tls ? "https" : "http"}://${host.includes(":") ? `[${host}]` : host}:${config.port}/grpc.health.v1.Health/Check`;
try {
  const { status, body, reason } = await checkHealth(url, config);
  if (status === 200 && body.status === "SERVING") process.exit(0);
  console.error(`contextd health: ${status} ${JSON.stringify(body)}${reason ? ` (${reason})` : ""} from ${url}`);
} catch (error) {
  const message = error instanceof Error ? error.message : String(error);
  const hint =
    config.tlsClientCa === "" ? "" : process.env.CONTEXTD_HEALTHCHECK_CERT ? "; client certificate CONTEXTD_HEALTHCHECK_CERT" : "; the port requires client certificates: set CONTEXTD_HEALTHCHECK_CERT and CONTEXTD_HEALTHCHECK_KEY";
  console.error(`contextd health: ${message} (${url}${hint})`);
}
process.exit(1);

/** The flags and environment of process `pid` when it runs contextd's main.js; else this process's own. */
function serverInvocation(pid: number): [string[], NodeJS.ProcessEnv] {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((arg) => arg !== "");
    const main = argv.findIndex((arg) => arg.endsWith("/main.js") || arg === "main.js");
    if (main >= 0 && pid !== process.pid) {
      const env: NodeJS.ProcessEnv = {};
      for (const entry of readFileSync(`/proc/${pid}/environ`, "utf8").split("\0")) {
        const equals = entry.indexOf("=");
        if (equals > 0 && entry.startsWith("CONTEXTD_")) env[entry.slice(0, equals)] = entry.slice(equals + 1);
      }
      return [argv.slice(main + 1), env];
    }
  } catch {
    // No /proc (not Linux) or not allowed to read it: the probe's own configuration.
  }
  return [process.argv.slice(2), process.env];
}

function checkHealth(url: string, config: Config): Promise<{ status: number; body: { status?: string }; reason: string }> {
  return new Promise((resolve, reject) => {
    const options: https.RequestOptions = { method: "POST", headers: { "content-type": "application/json" }, timeout: 2_000 };
    if (config.tlsCert !== "") {
      options.rejectUnauthorized = false;
      if (config.tlsClientCa !== "") {
        options.cert = readFileSync(process.env.CONTEXTD_HEALTHCHECK_CERT || config.tlsCert);
        options.key = readFileSync(process.env.CONTEXTD_HEALTHCHECK_KEY || config.tlsKey);
      }
    }
    const request = (url.startsWith("https:") ? https : http).request(url, options, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.on("end", () => {
        try {
          const reason = response.headers["contextd-health-reason"];
          resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) as { status?: string }, reason: typeof reason === "string" ? reason : "" });
        } catch (error) {
          reject(error instanceof Error ? error : new Error(String(error)));
        }
      });
    });
    request.on("timeout", () => request.destroy(new Error("no answer within 2 s")));
    request.on("error", reject);
    request.end("{}");
  });
}
