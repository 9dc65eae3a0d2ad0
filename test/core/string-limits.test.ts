import { create, createRegistry } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { file_contextd_v1_artifact } from "#gen/contextd/v1/artifact_pb";
import { CompileRequestSchema, file_contextd_v1_compile } from "#gen/contextd/v1/compile_pb";
import { file_contextd_v1_context_service } from "#gen/contextd/v1/context_service_pb";
import { file_contextd_v1_conversation_service } from "#gen/contextd/v1/conversation_service_pb";
import { file_contextd_v1_message, MessageSchema } from "#gen/contextd/v1/message_pb";
import { file_contextd_v1_state } from "#gen/contextd/v1/state_pb";
import { file_contextd_v1_telemetry } from "#gen/contextd/v1/telemetry_pb";
import { file_contextd_v1_telemetry_service } from "#gen/contextd/v1/telemetry_service_pb";
import { file_contextd_v1_usage_ledger } from "#gen/contextd/v1/usage_ledger_pb";
import { assertStringLimits, limitedStringFields, stringLimitOf, stringLimits } from "../../src/core/model/string-limits.js";

const registry = createRegistry(
  file_contextd_v1_artifact,
  file_contextd_v1_compile,
  file_contextd_v1_context_service,
  file_contextd_v1_conversation_service,
  file_contextd_v1_message,
  file_contextd_v1_state,
  file_contextd_v1_telemetry,
  file_contextd_v1_telemetry_service,
  file_contextd_v1_usage_ledger,
);

describe("request string limits", () => {
  it("names only string fields that exist (a typo would leave a field unbounded)", () => {
    for (const [typeName, fieldName] of limitedStringFields()) {
      const schema = registry.getMessage(typeName);
      expect(schema, typeName).toBeDefined();
      const field = schema!.fields.find((candidate) => candidate.name === fieldName);
      expect(field, `${typeName}.${fieldName}`).toBeDefined();
      const scalar = field!.fieldKind === "scalar" ? field!.scalar : field!.fieldKind === "list" && field!.listKind === "scalar" ? field!.scalar : undefined;
      expect(scalar, `${typeName}.${fieldName} is a string`).toBe(9 /* ScalarType.STRING */);
    }
  });

  it("bounds every id field of every request type the services take", () => {
    // Every field called *_id, *_ids or id that a request can reach is limited; free text is not.
    const unlimited: string[] = [];
    for (const type of registry) {
      if (type.kind !== "message" || !type.typeName.startsWith("contextd.v1.")) continue;
      for (const field of type.fields) {
        const stringy = (field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar")) && field.scalar === 9;
        if (stringy && /(^id$|_id$|_ids$|^ids$)/.test(field.name) && stringLimitOf(type.typeName, field.name) === undefined) unlimited.push(`${type.typeName}.${field.name}`);
      }
    }
    // Results only: the server writes them, no request carries them.
    expect(unlimited.sort()).toEqual([
      "contextd.v1.Change.conversation_id",
      "contextd.v1.ConversationState.conversation_id",
      "contextd.v1.ConversationSummary.conversation_id",
      "contextd.v1.ObserverEvent.compile_id",
      "contextd.v1.ObserverEvent.conversation_id",
      "contextd.v1.Projection.artifact_ids",
      "contextd.v1.WritebackMessage.id",
      "contextd.v1.RenamedToolCallId.message_id",
      "contextd.v1.MessageCleared.message_id",
      "contextd.v1.MessageDropped.message_id",
      "contextd.v1.HistoryHeadDropped.first_message_id",
      "contextd.v1.HistoryHeadDropped.last_message_id",
      // A summarize request's facts name messages the request already carries.
      "contextd.v1.SummaryFact.message_id",
      // Recall's answer names stored messages; no request carries them.
      "contextd.v1.RecallHit.message_id",
      "contextd.v1.RecallResponse.missing_ids",
      // The minimum-gain rule's forecast in CacheImpact, a result.
      "contextd.v1.TrimStepForecast.first_message_id",
      // What a fork was copied from and the ids a commit assigned, written by the server.
      "contextd.v1.ForkOrigin.conversation_id",
      "contextd.v1.Change.assigned_message_ids",
      // The usage ledger's answers.
      "contextd.v1.ConversationUsage.conversation_id",
      "contextd.v1.GetUsageResponse.conversation_id",
      "contextd.v1.UsageEntry.report_id",
      "contextd.v1.UsageEntry.turn_id",
    ].sort());
  });

  it("measures UTF-8 bytes, names the path with indices, and passes free text of any length", () => {
    const message = create(MessageSchema, { id: "é".repeat(513), parts: [{ kind: { case: "text", value: { text: "x".repeat(100_000) } } }] });
    expect(() => assertStringLimits(MessageSchema, message, "messages[2]")).toThrow(
      new ConnectError(`messages[2].id has 1026 bytes, over the limit of ${stringLimits.id} bytes for ids (docs/limits.md)`, 3),
    );
    const nested = create(CompileRequestSchema, { history: { messages: [{ id: "ok" }, { id: "ok", parts: [{ kind: { case: "toolResult", value: { toolCallId: "c".repeat(1025) } } }] }] } });
    expect(() => assertStringLimits(CompileRequestSchema, nested)).toThrow(/^\[invalid_argument\] history\.messages\[1\]\.parts\[0\]\.tool_result\.tool_call_id has 1025 bytes/);
    expect(() => assertStringLimits(MessageSchema, create(MessageSchema, { id: "x".repeat(stringLimits.id), parts: [{ kind: { case: "text", value: { text: "y".repeat(1 << 20) } } }] }))).not.toThrow();
  });
});
