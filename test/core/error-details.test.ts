import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { completeErrorDetails, fieldViolationOf, prefixError, readErrorDetails, withErrorDetails } from "../../src/core/model/error-details.js";

describe("error details", () => {
  it("reads the field of a message from its leading path, joining nested paths", () => {
    expect(fieldViolationOf("deltas[1].append_messages: messages[0].parts[0].tool_call.arguments: must be a JSON object")).toEqual({
      field: "deltas[1].append_messages.messages[0].parts[0].tool_call.arguments",
      description: "must be a JSON object",
    });
    expect(fieldViolationOf("deltas[0].append_user: message.role is required")).toEqual({ field: "deltas[0].append_user.message.role", description: "role is required" });
    expect(fieldViolationOf("text is empty after normalising whitespace")).toEqual({ field: "", description: "text is empty after normalising whitespace" });
    expect(fieldViolationOf("protocol error: incomplete envelope")).toEqual({ field: "", description: "protocol error: incomplete envelope" });
  });

  it("completes what an error lacks and keeps what it has", () => {
    const plain = completeErrorDetails(new ConnectError("segment: a segment is required", Code.InvalidArgument));
    expect(readErrorDetails(plain).errorInfo).toMatchObject({ reason: "INVALID_ARGUMENT", domain: "contextd.dev" });
    expect(readErrorDetails(plain).badRequest!.fieldViolations).toMatchObject([{ field: "segment", description: "a segment is required" }]);

    const aborted = completeErrorDetails(new ConnectError("stale", Code.Aborted), "7");
    expect(readErrorDetails(aborted)).toMatchObject({ errorInfo: { reason: "VERSION_CONFLICT", metadata: { current_version: "7" } } });
    expect(readErrorDetails(aborted).badRequest).toBeUndefined();

    const specific = completeErrorDetails(withErrorDetails(new ConnectError("x", Code.FailedPrecondition), "PROVIDER_RULE_VIOLATED", { metadata: { rule: "r" } }));
    expect(specific.details).toHaveLength(1);
    expect(readErrorDetails(specific).errorInfo).toMatchObject({ reason: "PROVIDER_RULE_VIOLATED", metadata: { rule: "r" } });
    expect(readErrorDetails(completeErrorDetails(new ConnectError("x", Code.DeadlineExceeded))).errorInfo!.reason).toBe("DEADLINE_EXCEEDED");
  });

  it("prefixes the message and the violations' fields of a nested error, keeping its reason", () => {
    const inner = withErrorDetails(new ConnectError("message.parts[0]: bad", Code.InvalidArgument), "TOOL_ARGUMENTS_INVALID", {
      metadata: { tool_call_id: "k1" },
      fieldViolations: [{ field: "message.parts[0]", description: "bad" }],
    });
    const outer = prefixError(inner, "deltas[2].append_user");
    expect(outer.rawMessage).toBe("deltas[2].append_user: message.parts[0]: bad");
    expect(outer.code).toBe(Code.InvalidArgument);
    expect(readErrorDetails(outer)).toMatchObject({
      errorInfo: { reason: "TOOL_ARGUMENTS_INVALID", metadata: { tool_call_id: "k1" } },
      badRequest: { fieldViolations: [{ field: "deltas[2].append_user.message.parts[0]", description: "bad" }] },
    });
  });
});
