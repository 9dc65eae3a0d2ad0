import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorReason, withErrorDetails } from "../../core/model/error-details.js";

/**
 * The request bytes all calls in progress together may hold in memory, bounded by
 * `--max-buffered-request-bytes`.
 *
 * Why: a unary call's request is read whole before it is served, each may be up to
 * `--max-request-bytes`, and a client may open `--max-streams` streams on every connection; without
 * a shared bound a few clients sending large requests at once could make the sidecar hold
 * gigabytes. Unary gRPC served from the stream (`grpc-unary.ts`) holds the bytes it has actually
 * received (`open`), so a caller that announces 16 MiB and stalls holds five bytes, not 16 MiB;
 * everything connect serves holds its `content-length` up front (`tryHold`). Either way a call
 * that does not fit is refused with RESOURCE_EXHAUSTED, in its own protocol, and may be retried;
 * admission (`admission.ts`) authenticates before anything is held and never refuses health. One
 * call is always admitted when nothing is held, so a limit below `--max-request-bytes` still lets
 * every request through one at a time. Requests that declare no size to connect (gRPC with the
 * JSON codec or compression, chunked HTTP/1.1 bodies) are bounded per message only.
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

  /** A holding that grows with the bytes a call receives; `grow` is false when they do not fit. */
  open(): RequestHolding {
    let mine = 0;
    return {
      grow: (bytes) => {
        if (this.held - mine > 0 && this.held + bytes > this.limitBytes) return false;
        this.held += bytes;
        mine += bytes;
        return true;
      },
      release: () => {
        this.held -= mine;
        mine = 0;
      },
      refusal: (bytes) => this.refusalBeside(bytes, this.held - mine),
    };
  }

  /** The error for a call of `bytes` (its request's size, when known) that did not fit. */
  refusal(bytes: number): ConnectError {
    return this.refusalBeside(bytes, this.held);
  }

  private refusalBeside(bytes: number, others: number): ConnectError {
    const error = new ConnectError(
      `request of ${bytes} bytes refused: calls in progress already hold ${others} bytes of requests ` +
        `(limit ${this.limitBytes}, --max-buffered-request-bytes); retry later`,
      Code.ResourceExhausted,
    );
    return withErrorDetails(error, ErrorReason.requestMemoryExhausted, { metadata: { limit_bytes: String(this.limitBytes), flag: "--max-buffered-request-bytes" } });
  }
}

/** Request bytes one call holds; `release` (idempotent) gives them all back. */
export interface RequestHolding {
  grow(bytes: number): boolean;
  release(): void;
  /** The error for this call, of `bytes` in all, not fitting beside what the others hold. */
  refusal(bytes: number): ConnectError;
}
