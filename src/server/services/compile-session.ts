import { Code, ConnectError } from "@connectrpc/connect";
import type { CompileRequest, CompileResult } from "#gen/contextd/v1/compile_pb";
import type { CompileSessionRequest, CompileSessionResponse, SummarizeRequest, SummarizeResponse } from "#gen/contextd/v1/context_service_pb";
import type { Summarizer } from "../../core/compile/compile-context.js";
import type { Observer } from "../../core/observer.js";
import { whileRunning } from "./live-stream.js";

/** What a session hands the compile: a summarizer talking to the caller, and the events sink. */
export interface SessionCompile {
  request: CompileRequest;
  summarize: Summarizer;
  observer: Observer;
  /** Facts the caller asked to remember in its summarize responses, in order. */
  remembered: string[];
}

/**
 * Runs one `CompileSession`: reads the caller's `compile`, runs `run` with a summarizer that sends
 * a `summarize_request` and waits for the matching `summarize_response` (at most `timeoutMs`, and
 * never past the call's own deadline), streams observer events as they happen and the result last.
 * A caller that never answers ends the call with DEADLINE_EXCEEDED before anything is committed,
 * because `run` commits only after its compile returned.
 */
export async function* runCompileSession(
  requests: AsyncIterable<CompileSessionRequest>,
  signal: AbortSignal,
  timeoutMs: number,
  run: (session: SessionCompile) => Promise<CompileResult>,
): AsyncGenerator<CompileSessionResponse> {
  const inbound = requests[Symbol.asyncIterator]();
  const first = await inbound.next();
  if (first.done || first.value.kind.case !== "compile") {
    throw new ConnectError(`CompileSession: the first message must be a compile, got ${first.done ? "end of stream" : (first.value.kind.case ?? "an empty message")}`, Code.InvalidArgument);
  }

  const compileRequest = first.value.kind.value;
  const remembered: string[] = [];
  // Set when the run starts below: what the session sends the caller ahead of the result.
  let send: (kind: CompileSessionResponse["kind"]) => void = () => {};
  const summarize = async (request: SummarizeRequest): Promise<SummarizeResponse> => {
    send({ case: "summarizeRequest", value: request });
    const answer = await withinDeadline(inbound.next(), timeoutMs, signal, request.requestId);
    if (answer.done) {
      throw new ConnectError(`CompileSession: the caller ended its stream without answering summarize_request "${request.requestId}"`, Code.InvalidArgument);
    }
    if (answer.value.kind.case !== "summarizeResponse") {
      throw new ConnectError(`CompileSession: expected a summarize_response to "${request.requestId}", got ${answer.value.kind.case ?? "an empty message"}`, Code.InvalidArgument);
    }
    const response = answer.value.kind.value;
    if (response.requestId !== request.requestId) {
      throw new ConnectError(`summarize_response.request_id: "${response.requestId}" does not answer the open summarize_request "${request.requestId}"`, Code.InvalidArgument);
    }
    remembered.push(...response.remember);
    return response;
  };

  const items = whileRunning<CompileSessionResponse["kind"], CompileResult>((sendItem) => {
    send = sendItem;
    return run({ request: compileRequest, summarize, observer: (event) => send({ case: "event", value: event }), remembered });
  });
  for await (const item of items) {
    const kind: CompileSessionResponse["kind"] = "sent" in item ? item.sent : { case: "result", value: item.result };
    yield { $typeName: "contextd.v1.CompileSessionResponse", kind };
  }
}

/** The caller's next message, or DEADLINE_EXCEEDED after `timeoutMs` or when the call's signal ends. */
async function withinDeadline<T>(next: Promise<T>, timeoutMs: number, signal: AbortSignal, requestId: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new ConnectError(`CompileSession: no summarize_response to "${requestId}" within ${timeoutMs} ms (--summarize-timeout-ms / CONTEXTD_SUMMARIZE_TIMEOUT_MS)`, Code.DeadlineExceeded)),
      timeoutMs,
    );
    onAbort = () => reject(ConnectError.from(signal.reason, Code.DeadlineExceeded));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([next, expired]);
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", onAbort!);
  }
}
