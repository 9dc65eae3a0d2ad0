import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { Metrics } from "./metrics.js";

/** Answers `GET <path>` with the Prometheus text of `metrics` and returns true; false for any other request. */
export function serveMetrics(
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
  metrics: Metrics,
  path: string,
): boolean {
  if (request.method !== "GET" || (request.url ?? "").split("?")[0] !== path) return false;
  metrics.render().then(
    (body) => {
      response.writeHead(200, { "content-type": metrics.contentType });
      response.end(body);
    },
    (error: unknown) => {
      response.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
      response.end(`metrics: ${error instanceof Error ? error.message : String(error)}\n`);
    },
  );
  return true;
}
