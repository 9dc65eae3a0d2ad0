import { Code, ConnectError, createContextValues, type UnaryRequest, type UnaryResponse } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { assertMessageCount, enforceDeadlines } from "../../../src/server/policy/limits.js";

function unaryRequest(header: Headers, signal: AbortSignal): UnaryRequest {
  return {
    stream: false,
    service: ContextService,
    method: ContextService.method.compile,
    requestMethod: "POST",
    url: "http://localhost/contextd.v1.ContextService/Compile",
    signal,
    header,
    contextValues: createContextValues(),
    message: create(CompileRequestSchema),
  } as UnaryRequest;
}

describe("deadline enforcement", () => {
  it("answers DEADLINE_EXCEEDED when the deadline passes while a handler ignores its signal", async () => {
    const controller = new AbortController();
    const neverAnswers = () => new Promise<UnaryResponse>(() => undefined);
    const call = enforceDeadlines()(neverAnswers as never)(unaryRequest(new Headers({ "grpc-timeout": "50m" }), controller.signal));
    controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
    await expect(call).rejects.toMatchObject({ code: Code.DeadlineExceeded });
  });

  it("never starts a handler whose deadline has already passed", async () => {
    const controller = new AbortController();
    controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
    let started = false;
    const handler = async () => {
      started = true;
      return {} as UnaryResponse;
    };
    await expect(enforceDeadlines()(handler as never)(unaryRequest(new Headers({ "grpc-timeout": "0m" }), controller.signal))).rejects.toMatchObject({
      code: Code.DeadlineExceeded,
    });
    expect(started).toBe(false);
  });
});

describe("messages per request", () => {
  it("counts messages in every field that holds them and names the largest", () => {
    const message = (id: string) => ({ id, parts: [{ kind: { case: "text" as const, value: { text: id } } }] });
    const request = create(CompileRequestSchema, {
      history: { messages: [message("h1"), message("h2"), message("h3")] },
      pending: [message("p1")],
      currentTurn: { raw: message("raw") },
      deferredBlocks: [{ messages: [message("d1"), message("d2")] }],
    });
    expect(() => assertMessageCount(CompileRequestSchema, request, 7)).not.toThrow();
    expect(() => assertMessageCount(CompileRequestSchema, request, 6)).toThrow(
      /contextd.v1.CompileRequest carries 7 messages \(history.messages: 3, deferred_blocks.messages: 2, .*\), more than the limit of 6/,
    );
    try {
      assertMessageCount(CompileRequestSchema, request, 6);
    } catch (error) {
      expect(ConnectError.from(error).code).toBe(Code.ResourceExhausted);
    }
  });
});
