import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorReason, withErrorDetails } from "../../core/model/error-details.js";

/** Host names a loopback-bound sidecar is reached by; a browser resolves these only to this machine. */
const loopbackHosts = ["localhost", "127.0.0.1", "[::1]"];

/**
 * Paths open to every caller whatever the Host: the probes and tooling that bearer tokens leave
 * open too (health, reflection) and the metrics path. A Kubernetes probe or Prometheus scrape sends
 * the pod's IP as its Host; what these answer is no conversation data.
 */
const openPathPrefixes = ["/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];

/**
 * Which Host and Origin a request may come with, checked on the headers before anything else.
 *
 * Why: with no bearer tokens (the default) the sidecar trusts whoever can reach its port, which on
 * loopback is this machine. A web page cannot reach it directly, but with DNS rebinding it can: the
 * page's own name (`attacker.example`) is made to resolve to 127.0.0.1, and the browser then sends
 * the page's requests — same-origin, with `Host: attacker.example` — to the sidecar, and lets the
 * page read the answers: ListConversations and Commit were served so. So:
 * 1. without tokens, only requests whose Host is a loopback name or one of `--allowed-hosts` are
 *    served (health, reflection and metrics stay open, as they do with tokens); a rebinding page's
 *    Host is its own name, never one of these;
 * 2. a request carrying an `Origin` (browsers send one with every POST, same-origin included) must
 *    be from the origin it is sent to — the inspector's own page — whether or not tokens are
 *    configured: no other site's page may make calls on the sidecar, even ones it cannot read.
 * Requests without a Host (HTTP/1.0) or without an Origin (every non-browser client) pass: neither
 * can come from a browser.
 */
export class RequestOrigins {
  private readonly allowed: Set<string>;
  private readonly allowedSuffixes: string[];

  private readonly checkHost: boolean;
  private readonly metricsPath: string;
  private readonly scheme: "http:" | "https:";

  /**
   * `allowedHosts`: host names (no port) served besides the loopback ones, lower case; an entry
   * starting with "." allows every name under it. `checkHost`: whether the Host is checked (off
   * when bearer tokens are configured: a rebinding page has no token). `metricsPath` is open.
   * `tls`: whether the port serves TLS, so this server's origin is https.
   */
  constructor(options: { allowedHosts: readonly string[]; checkHost: boolean; metricsPath: string; tls: boolean }) {
    this.allowed = new Set([...loopbackHosts, ...options.allowedHosts.filter((host) => !host.startsWith("."))]);
    this.allowedSuffixes = options.allowedHosts.filter((host) => host.startsWith("."));
    this.checkHost = options.checkHost;
    this.metricsPath = options.metricsPath;
    this.scheme = options.tls ? "https:" : "http:";
  }

  /**
   * PERMISSION_DENIED when the request's Host or Origin may not be served; undefined otherwise.
   * `host` is the Host header (HTTP/1.1) or `:authority` (HTTP/2).
   */
  refusal(path: string, host: string | undefined, origin: string | undefined): ConnectError | undefined {
    if (openPathPrefixes.some((prefix) => path.startsWith(prefix)) || path.split("?")[0] === this.metricsPath) return undefined;
    const hostName = host === undefined || host === "" ? undefined : hostNameOf(host);
    if (this.checkHost && hostName !== undefined && !this.hostAllowed(hostName)) {
      const error = new ConnectError(
        `Host "${printable(host!)}" is not served: without bearer tokens only localhost, 127.0.0.1, [::1] and --allowed-hosts are (a web page reaching the sidecar by DNS rebinding arrives with its own host name)`,
        Code.PermissionDenied,
      );
      return withErrorDetails(error, ErrorReason.hostNotAllowed, { metadata: { flag: "--allowed-hosts" } });
    }
    if (origin !== undefined && !sameOrigin(origin, this.scheme, host)) {
      const error = new ConnectError(
        `Origin "${printable(origin)}" is not this server's: only pages the sidecar serves itself (the inspector) may call it from a browser`,
        Code.PermissionDenied,
      );
      return withErrorDetails(error, ErrorReason.originNotAllowed);
    }
    return undefined;
  }

  private hostAllowed(name: string): boolean {
    return this.allowed.has(name) || this.allowedSuffixes.some((suffix) => name.endsWith(suffix) && name.length > suffix.length);
  }
}

/** "LocalHost.:7420" → "localhost"; "[::1]:7420" → "[::1]"; the name as a browser would have resolved it. */
export function hostNameOf(host: string): string {
  const lower = host.trim().toLowerCase();
  const name = lower.startsWith("[") ? lower.slice(0, lower.indexOf("]") + 1 || lower.length) : lower.replace(/:\d*$/, "");
  return name.endsWith(".") ? name.slice(0, -1) : name;
}

/** Whether `origin` (scheme://host[:port]) is this server's scheme and the host and port the request was sent to. */
function sameOrigin(origin: string, scheme: string, host: string | undefined): boolean {
  if (host === undefined || host === "") return false;
  try {
    const from = new URL(origin);
    if (from.protocol !== scheme) return false;
    // Parsed with the scheme, so a default port compares equal however it is written.
    const to = new URL(`${scheme}//${host}`);
    return from.host === to.host;
  } catch {
    return false;
  }
}

// At most 200 characters of a header in an error message, control characters escaped.
function printable(text: string): string {
  const shown = JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text);
  return shown.slice(1, -1);
}
