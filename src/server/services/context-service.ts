import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { CompileRequest, CompileResult } from "#gen/contextd/v1/compile_pb";
import { ContextService, type ReportUsageRequest } from "#gen/contextd/v1/context_service_pb";
import type { ObserverEvent } from "#gen/contextd/v1/telemetry_pb";
import type { Compiler } from "../../application/compiler.js";
import type { UsageCalibration } from "../../application/usage-calibration.js";
import { totalsMessage, type UsageLedger } from "../../application/usage-ledger.js";
import { tenantKey } from "../policy/call-context.js";
import { DeadlineCheck, type CallDeadline } from "../../core/compile/deadline.js";
import { segmentField, segmentRenderingOrder } from "../../core/model/segments.js";
import type { Observer } from "../../core/observer.js";
import { createEstimator } from "../../core/tokens/estimator.js";
import { renderView } from "../../core/views/views.js";
import type { ConversationStore } from "../../store/conversation-store.js";
import { runCompileSession } from "./compile-session.js";
import { whileRunning, yieldToEventLoop } from "./live-stream.js";

export interface ContextServiceDependencies {
  /** Where Render reads a stored conversation. */
  store: ConversationStore;
  /** Every compile (Compile, CompileStream, CompileSession) and the token counts CountTokens shares with them. */
  compiler: Compiler;
  /** The corrections ReportUsage teaches; without it (`--calibration-keys 0`) ReportUsage is FAILED_PRECONDITION. */
  calibration?: UsageCalibration;
  /** Where ReportUsage records a report that names a conversation; without it (`--usage-entries-per-conversation 0`) such a report is FAILED_PRECONDITION. */
  usageLedger?: UsageLedger;
  /** Every compile's observer events go here too (TelemetryService fan-out). */
  publish: Observer;
  /** How long a CompileSession waits for each summarize_response (the call's deadline also holds). */
  summarizeTimeoutMs: number;
  /** Called with every finished compile's request and result (tracing annotates its span). */
  compiled?: (request: CompileRequest, result: CompileResult) => void;
}

/**
 * ContextService: Compile (stateless or stateful, optionally committing the writeback in the same
 * call), CompileStream (observer events, then the result), CompileSession (the caller writes the
 * summaries the budget asks for), CountTokens, Render and ReportUsage (token calibration).
 */
export function contextService(dependencies: ContextServiceDependencies): Partial<ServiceImpl<typeof ContextService>> {
  const { store, compiler, calibration, usageLedger, publish, summarizeTimeoutMs, compiled } = dependencies;
  const { tokenCounts } = compiler;
  const compileAndCommit: Compiler["compileAndCommit"] = compiled
    ? (request, run) => compiler.compileAndCommit(request, run).then((result) => (compiled(request, result), result))
    : (request, run) => compiler.compileAndCommit(request, run);

  const fanOut = (extra?: Observer): Observer => (event) => {
    publish(event);
    extra?.(event);
  };


  /**
   * A report naming a conversation: recorded in its ledger first (once per report id), then learnt
   * from. A retry finds the report recorded and learns nothing again; so a report whose learning
   * failed after it was recorded (the store unreachable between the two) is not learnt from.
   */
  async function recordAndLearn(request: ReportUsageRequest, tenant: string) {
    if (!usageLedger) {
      throw new ConnectError("report_usage.conversation_id: this sidecar keeps no usage ledger (--usage-entries-per-conversation 0)", Code.FailedPrecondition);
    }
    const recorded = await usageLedger.record(request);
    const conversationTotals = totalsMessage(recorded.totals);
    if (recorded.duplicate || !calibration) {
      return { correction: 0, reports: 0n, meanAbsoluteRelativeError: 0, relativeError: 0, duplicate: recorded.duplicate, conversationTotals };
    }
    return { ...(await calibration.report(tenant, request)), conversationTotals };
  }

  return {
    async compile(request, call) {
      return { result: await compileAndCommit(request, { observer: fanOut(), deadline: callDeadline(call), tenant: call?.values?.get(tenantKey) }) };
    },

    async *compileStream(request, call) {
      if (!request.request) throw new ConnectError("request is required", Code.InvalidArgument);
      // Events leave as the stages emit them: the pipeline yields to the event loop between stages.
      const compileRequest = request.request;
      const items = whileRunning<ObserverEvent, CompileResult>((send) =>
        compileAndCommit(compileRequest, { observer: fanOut(send), stageBoundary: yieldToEventLoop, deadline: callDeadline(call), tenant: call?.values?.get(tenantKey) }),
      );
      for await (const item of items) {
        yield "sent" in item ? { kind: { case: "event", value: item.sent } } : { kind: { case: "result", value: item.result } };
      }
    },

    compileSession(requests, context) {
      return runCompileSession(requests, context.signal, summarizeTimeoutMs, (session) =>
        compileAndCommit(session.request, {
          observer: fanOut(session.observer),
          summarize: session.summarize,
          remembered: session.remembered,
          stageBoundary: yieldToEventLoop,
          deadline: callDeadline(context),
          tenant: context?.values?.get(tenantKey),
        }),
      );
    },

    async reportUsage(request, call) {
      if (request.conversationId !== "") return await recordAndLearn(request, call?.values?.get(tenantKey) ?? "");
      if (!calibration) {
        throw new ConnectError("report_usage: this sidecar keeps no token calibration (--calibration-keys 0)", Code.FailedPrecondition);
      }
      return await calibration.report(call?.values?.get(tenantKey) ?? "", request);
    },

    async countTokens(request, call) {
      // Counting gives the event loop turns as it goes: 16 MiB of text gpt-tokenizer has not seen takes seconds.
      const clock = new DeadlineCheck(callDeadline(call), Date.now, yieldToEventLoop);
      const estimator = await createEstimator(request.estimator, 0, "estimator", tokenCounts, "", clock);
      const perMessage = (await tokenCounts.countAll(estimator, request.messages, clock)).map(BigInt);
      const toolDefinitions = BigInt(tokenCounts.countToolDefinitions(estimator, request.toolDefinitions));
      // Defined as Usage.total is: the reply priming is part of what a request costs.
      const replyPriming = BigInt(estimator.perRequest);
      const total = perMessage.reduce((sum, count) => sum + count, toolDefinitions + replyPriming);
      return { total, perMessage, toolDefinitions, replyPriming };
    },

    async render(request) {
      if ((request.conversationId === "") === (request.snapshot === undefined)) {
        throw new ConnectError("render: set exactly one of conversation_id and snapshot", Code.InvalidArgument);
      }
      renderView(request.view, [], "view");
      request.segments.forEach((segment, index) => segmentField(segment, `segments[${index}]`));
      const source = request.snapshot ?? (await store.load(request.conversationId));
      const wanted = request.segments.length === 0 ? segmentRenderingOrder : segmentRenderingOrder.filter((segment) => request.segments.includes(segment));
      const messages = wanted.flatMap((segment) => source[segmentField(segment, "segment")]);
      return { text: renderView(request.view, messages, "view") };
    },
  };
}

/**
 * The call's abort signal and, when it has one, the wall-clock time of its deadline. The service
 * called directly, without a call (tests do), has none.
 */
function callDeadline(call: HandlerContext | undefined): CallDeadline | undefined {
  if (!call) return undefined;
  const remainingMs = call.timeoutMs();
  return { signal: call.signal, atMs: remainingMs === undefined ? undefined : Date.now() + remainingMs };
}
