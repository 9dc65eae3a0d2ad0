import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import type * as http from "node:http";
import type * as http2 from "node:http2";
import { dirname, extname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/** Where the web inspector is served (GET). */
export const inspectorPath = "/inspector/";

const contentTypes: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
};

// The page loads only its own files and talks only to this origin (the RPCs); the token bars'
// widths are the only inline styles.
const securityHeaders = {
  "content-security-policy": "default-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
};

/**
 * The web inspector's static files (built by `npm run build` into dist/inspector from inspector/),
 * read once when the server starts and answered from memory. The files hold no data: the page
 * reads conversations through the sidecar's Connect JSON API with the token the user gives it, so
 * authentication and tenant scoping are the RPCs' own.
 */
export class InspectorAssets {
  private readonly files = new Map<string, { body: Buffer; type: string }>();
  private readonly missing: string | undefined;

  constructor(directory = builtInspectorDirectory()) {
    if (!existsSync(join(directory, "index.html"))) {
      this.missing = `the inspector's files are not built (no ${join(directory, "index.html")}): run npm run build`;
      return;
    }
    for (const file of filesUnder(directory)) {
      const type = contentTypes[extname(file)];
      if (type) this.files.set(relative(directory, file).split("\\").join("/"), { body: readFileSync(file), type });
    }
  }

  /** Answers GET/HEAD under the inspector's path and returns true; false for any other request. */
  serve(request: http.IncomingMessage | http2.Http2ServerRequest, response: http.ServerResponse | http2.Http2ServerResponse): boolean {
    const path = (request.url ?? "").split("?")[0]!;
    if (path !== inspectorPath.slice(0, -1) && !path.startsWith(inspectorPath)) return false;
    if (request.method !== "GET" && request.method !== "HEAD") return false;
    if (path === inspectorPath.slice(0, -1)) {
      response.writeHead(308, { location: inspectorPath });
      response.end();
      return true;
    }
    if (this.missing !== undefined) {
      response.writeHead(503, { "content-type": "text/plain; charset=utf-8" });
      response.end(`${this.missing}\n`);
      return true;
    }
    const name = path === inspectorPath ? "index.html" : path.slice(inspectorPath.length);
    const file = this.files.get(name);
    if (file === undefined) {
      response.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
      response.end(`no inspector file "${name}"\n`);
      return true;
    }
    response.writeHead(200, {
      "content-type": file.type,
      "content-length": String(file.body.length),
      // Built asset names carry a content hash; the page itself must be fetched anew.
      "cache-control": name.startsWith("assets/") ? "public, max-age=31536000, immutable" : "no-cache",
      ...securityHeaders,
    });
    if (request.method === "HEAD") response.end();
    else response.end(file.body);
    return true;
  }
}

/** dist/inspector of the package this module belongs to, whether it runs from dist/ or from src/. */
function builtInspectorDirectory(): string {
  let directory = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(directory, "package.json")) && dirname(directory) !== directory) directory = dirname(directory);
  return join(directory, "dist", "inspector");
}

function filesUnder(directory: string): string[] {
  return readdirSync(directory).flatMap((entry) => {
    const path = join(directory, entry);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}
