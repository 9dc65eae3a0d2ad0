import { Code, ConnectError } from "@connectrpc/connect";
import { completeErrorDetails, ErrorReason, withErrorDetails } from "../../core/model/error-details.js";
import type { BearerTokens } from "./auth.js";
import type { RequestOrigins } from "./request-origin.js";
import type { RequestHolding, RequestMemoryBudget } from "./request-memory.js";

/**
 * What a call must pass before the server reads its body, the same for every protocol.
 *
 * First of all its Host and Origin (`RequestOrigins`: no DNS-rebinding page, no other site's page).
 *
 * Why: reading a body is what costs memory, and the memory budget is shared by every caller.
 * Before this, 16 gRPC calls of five bytes each (an envelope header announcing 16 MiB, then
 * nothing) held all of `--max-buffered-request-bytes` for as long as their connection stayed
 * open, without a token, and every other call — health checks included — was refused. So:
 * 1. the bearer token is checked on the headers, before anything is held (UNAUTHENTICATED);
 * 2. health checks are never held against the budget (their requests are a few bytes), so a
 *    probe answers whatever else is going on;
 * 3. a body must arrive within `--request-body-timeout-ms` of the headers, or the call ends with
 *    DEADLINE_EXCEEDED and lets go of what it held.
 */
export class Admission {
  constructor(
    private readonly tokens: BearerTokens,
    readonly memory: RequestMemoryBudget,
    readonly bodyTimeoutMs: number,
    /** `--max-request-bytes`: the largest request message. */
    readonly maxRequestBytes: number,
    private readonly origins: RequestOrigins,
  ) {}

  /** PERMISSION_DENIED when the Host or Origin may not be served (any path, any method); undefined otherwise. */
  refusalByOrigin(path: string, host: string | string[] | undefined, origin: string | string[] | undefined): ConnectError | undefined {
    return this.origins.refusal(path, Array.isArray(host) ? host[0] : host, Array.isArray(origin) ? origin[0] : origin);
  }

  /**
   * The refusal of a request message of `bytes` over `--max-request-bytes`, named by its flag (the
   * direct gRPC path reads the size from the envelope; a Connect unary request from its
   * content-length, before connect would refuse it naming its own option, `readMaxBytes`).
   */
  tooLarge(bytes: number): ConnectError {
    const error = new ConnectError(`request message of ${bytes} bytes is over the limit of ${this.maxRequestBytes} bytes (--max-request-bytes)`, Code.ResourceExhausted);
    return withErrorDetails(error, ErrorReason.requestTooLarge, { metadata: { limit_bytes: String(this.maxRequestBytes), flag: "--max-request-bytes" } });
  }

  /** UNAUTHENTICATED when the headers alone show the call may not be made; undefined otherwise. */
  refusalByHeaders(path: string, authorization: string | string[] | null | undefined): ConnectError | undefined {
    const { service, method } = splitPath(path);
    if (service === undefined) return undefined; // not an RPC path: the router answers it
    try {
      this.tokens.identify(service, method, Array.isArray(authorization) ? authorization[0] : authorization);
      return undefined;
    } catch (error) {
      // Refused before the interceptors run, so the details they would add are added here.
      return completeErrorDetails(error as ConnectError);
    }
  }

  /** A holding for a call's body as it arrives; health calls get one that holds nothing. */
  open(path: string): RequestHolding {
    return isHealthPath(path) ? unheld : this.memory.open();
  }

  /** Holds a body of known size up front; the release, or undefined when it does not fit. */
  tryHold(path: string, bytes: number): (() => void) | undefined {
    return isHealthPath(path) ? () => undefined : this.memory.tryHold(bytes);
  }

  /** The error for a body that did not arrive in time. */
  bodyTimeout(received: number): ConnectError {
    const error = new ConnectError(
      `request body not received within ${this.bodyTimeoutMs} ms of its headers (${received} bytes arrived; --request-body-timeout-ms)`,
      Code.DeadlineExceeded,
    );
    return withErrorDetails(error, ErrorReason.requestBodyTimeout, { metadata: { timeout_ms: String(this.bodyTimeoutMs), flag: "--request-body-timeout-ms" } });
  }
}

const unheld: RequestHolding = {
  grow: () => true,
  release: () => undefined,
  refusal: () => new ConnectError("health checks are never refused for memory", Code.Internal),
};

function isHealthPath(path: string): boolean {
  return path.startsWith("/grpc.health.v1.Health/");
}

// "/contextd.v1.ContextService/Compile" → service and method; a query string is not part of it.
function splitPath(path: string): { service: string | undefined; method: string } {
  const clean = path.split("?")[0]!;
  const slash = clean.lastIndexOf("/");
  if (!clean.startsWith("/") || slash <= 0) return { service: undefined, method: "" };
  return { service: clean.slice(1, slash), method: clean.slice(slash + 1) };
}
