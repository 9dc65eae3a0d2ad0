import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The request bytes all calls in progress together may hold in memory, bounded by
 * `--max-buffered-request-bytes`.
 *
 * Why: a unary call's request is read whole before it is served, each may be up to
 * `--max-request-bytes`, and a client may open `--max-streams` streams on every connection; without
 * a shared bound a few clients sending large requests at once could make the sidecar hold
 * gigabytes. A call holds the size its request declares — the envelope's length for gRPC served
 * from the stream (`grpc-unary.ts`), `content-length` for everything connect serves — from the
 * moment it is known until the call ends; a call that does not fit is refused with
 * RESOURCE_EXHAUSTED, in its own protocol, before its body is read, and may be retried. One call is
 * always admitted when nothing is held, so a limit below `--max-request-bytes` still lets every
 * request through one at a time. Requests that declare no size (gRPC with the JSON codec or
 * compression, chunked HTTP/1.1 bodies) are bounded per message only.
 */
export class RequestMemoryBudget {
  private held = 0;

  constructor(readonly limitBytes: number) {}

  get heldBytes(): number {
    return this.held;
  }

  /** Holds `bytes` and returns their release (idempotent), or undefined when they do not fit. */
  tryHold(bytes: number): (() => void) | undefined {
    if (this.held > 0 && this.held + bytes > this.limitBytes) return undefined;
    this.held += bytes;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.held -= bytes;
    };
  }

  /** The error for a call of `bytes` that did not fit. */
  refusal(bytes: number): ConnectError {
    return new ConnectError(
      `request of ${bytes} bytes refused: calls in progress already hold ${this.held} bytes of requests ` +
        `(limit ${this.limitBytes}, --max-buffered-request-bytes); retry later`,
      Code.ResourceExhausted,
    );
  }
}
