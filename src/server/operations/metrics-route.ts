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
  const body = metrics.render();
  response.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
  response.end(body);
  return true;
}
