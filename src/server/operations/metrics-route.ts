import type * as http from "node:http";
import type * as http2 from "node:http2";

/**
 * Answers `GET <path>` with the Prometheus text `render` gives (this process's metrics, or with
 * `--workers` every worker's, gathered by the primary) and returns true; false for any other request.
 */
export function serveMetrics(
  request: http.IncomingMessage | http2.Http2ServerRequest,
  response: http.ServerResponse | http2.Http2ServerResponse,
  render: () => string | Promise<string>,
  path: string,
): boolean {
  if (request.method !== "GET" || (request.url ?? "").split("?")[0] !== path) return false;
  const send = (status: number, body: string) => {
    if (response.writableEnded || response.destroyed) return;
    response.writeHead(status, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
    response.end(body);
  };
  const body = render();
  if (typeof body === "string") send(200, body);
  else body.then((text) => send(200, text), (error: unknown) => send(500, `# metrics: ${error instanceof Error ? error.message : String(error)}\n`));
  return true;
}
