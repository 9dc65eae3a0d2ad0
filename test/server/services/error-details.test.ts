import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EstimatorKind, ToolRoundRepair, type CompileRequestSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { BadRequestSchema, ErrorInfoSchema } from "#gen/google/rpc/error_details_pb";
import { StatusSchema } from "#gen/google/rpc/status_pb";
import { grpcJsClient } from "../../support/grpc-js.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, delta, textMessage } from "../../store/fixtures.js";

// Every contextd error carries google.rpc.ErrorInfo (domain contextd.dev, a stable reason) and,
// for INVALID_ARGUMENT, google.rpc.BadRequest — on every protocol path (docs/errors.md).

const badCall = create(MessageSchema, {
  id: "a1",
  role: Role.ASSISTANT,
  parts: [{ kind: { case: "toolCall", value: { id: "k1", name: "get_weather", arguments: { data: "city=Oslo" } } } }],
});

async function connectFailure(promise: Promise<unknown>): Promise<ConnectError> {
  const error = await promise.then(() => undefined, (reason: unknown) => reason);
  expect(error, "expected the RPC to fail").toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

describe("structured error details through the real RPC", () => {
  let sidecar: Sidecar;
  let throughConnect: Sidecar;
  let run = 0;
  const newId = () => `err-${Date.now()}-${++run}`;

  beforeAll(async () => {
    [sidecar, throughConnect] = await Promise.all([startSidecar(), startSidecar(["--direct-unary-grpc", "false"])]);
  });
  afterAll(async () => {
    await Promise.all([sidecar?.stop(), throughConnect?.stop()]);
  });

  const transports: [string, () => Transport][] = [
    ["gRPC, served from the HTTP/2 stream", () => createGrpcTransport({ baseUrl: sidecar.url })],
    ["gRPC, through connect", () => createGrpcTransport({ baseUrl: throughConnect.url })],
    ["gRPC-Web", () => createGrpcWebTransport({ baseUrl: sidecar.url, httpVersion: "2" })],
    ["Connect, JSON over HTTP/1.1", () => createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1", useBinaryFormat: false })],
  ];

  for (const [name, transport] of transports) {
    describe(name, () => {
      const conversations = () => createClient(ConversationService, transport());
      const context = () => createClient(ContextService, transport());
      const compile = (request: MessageInitShape<typeof CompileRequestSchema>) => context().compile(request);

      it("INVALID_ARGUMENT: a specific reason and the field path of the violation, prefixed by the delta", async () => {
        const error = await connectFailure(conversations().commit({ conversationId: newId(), deltas: [appendHistory(textMessage("u1", Role.USER, "hi")), appendHistory(badCall)] }));
        expect(error.code).toBe(Code.InvalidArgument);
        const [info] = error.findDetails(ErrorInfoSchema);
        expect(info).toMatchObject({ reason: "TOOL_ARGUMENTS_INVALID", domain: "contextd.dev", metadata: { tool_call_id: "k1", message_id: "a1" } });
        const [badRequest] = error.findDetails(BadRequestSchema);
        expect(badRequest!.fieldViolations.map(({ field, description }) => ({ field, description }))).toEqual([
          {
            field: "deltas[1].append_messages.messages[0].parts[0].tool_call.arguments",
            description: 'the arguments of tool call "k1" must be a JSON object, got "city=Oslo" (not valid JSON) (message "a1")',
          },
        ]);
        expect(error.rawMessage).toBe(`deltas[1].append_messages: messages[0].parts[0].tool_call.arguments: ${badRequest!.fieldViolations[0]!.description}`);
      });

      it("INVALID_ARGUMENT without a specific reason: the code's name, the field read from the message", async () => {
        const error = await connectFailure(conversations().commit({ conversationId: newId(), deltas: [delta({ case: undefined })] }));
        expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "INVALID_ARGUMENT", domain: "contextd.dev" });
        expect(error.findDetails(BadRequestSchema)[0]!.fieldViolations.map(({ field, description }) => ({ field, description }))).toEqual([
          { field: "deltas[0]", description: "no operation set" },
        ]);
      });

      it("INVALID_ARGUMENT for a tool round: the rule in the metadata", async () => {
        const open = create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "c1", name: "f" } } }] });
        const error = await connectFailure(compile({ history: { messages: [textMessage("u1", Role.USER, "q"), open, textMessage("u2", Role.USER, "next")] }, repair: ToolRoundRepair.REJECT }));
        const [info] = error.findDetails(ErrorInfoSchema);
        expect(info!.reason).toBe("TOOL_ROUND_INVALID");
        expect(info!.metadata["rule"]).toBe("incomplete_tool_round");
        expect(error.findDetails(BadRequestSchema)[0]!.fieldViolations[0]!.field).toBe("history[1]");
      });

      it("ABORTED: VERSION_CONFLICT with the current version, and the trailer as before", async () => {
        const conversationId = newId();
        const client = conversations();
        await client.commit({ conversationId, deltas: [appendHistory(textMessage("u1", Role.USER, "hi"))] });
        const error = await connectFailure(client.commit({ conversationId, expectedVersion: 0n, deltas: [appendHistory(textMessage("u2", Role.USER, "again"))] }));
        expect(error.code).toBe(Code.Aborted);
        expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "VERSION_CONFLICT", domain: "contextd.dev", metadata: { current_version: "1" } });
        expect(error.metadata.get("contextd-current-version")).toBe("1");
        expect(error.findDetails(BadRequestSchema)).toEqual([]);
      });

      it("FAILED_PRECONDITION: PROVIDER_RULE_VIOLATED names the rule; CONVERSATION_EMPTY names the conversation", async () => {
        const open = create(MessageSchema, { id: "a1", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "oc1", name: "f" } } }] });
        const rule = await connectFailure(
          compile({ history: { messages: [textMessage("u1", Role.USER, "q"), open] }, currentTurn: { raw: textMessage("u2", Role.USER, "next") }, render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude" }, repair: ToolRoundRepair.REJECT }),
        );
        expect(rule.code).toBe(Code.FailedPrecondition);
        expect(rule.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "PROVIDER_RULE_VIOLATED", metadata: { rule: "anthropic.open_call_position" } });
        const conversationId = newId();
        const empty = await connectFailure(compile({ conversationId, render: { provider: Provider.OPENAI_CHAT, model: "m" } }));
        expect(empty.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "CONVERSATION_EMPTY", metadata: { conversation_id: conversationId, version: "0" } });
      });

      it("a server stream's error carries them too (CompileStream)", async () => {
        const stream = async () => {
          for await (const message of context().compileStream({ request: { history: { messages: [textMessage("u1", Role.USER, "q"), badCall] } } })) void message;
        };
        const error = await connectFailure(stream());
        expect(error.code).toBe(Code.InvalidArgument);
        expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "TOOL_ARGUMENTS_INVALID", domain: "contextd.dev" });
        expect(error.findDetails(BadRequestSchema)[0]!.fieldViolations[0]!.field).toBe("history[1].parts[0].tool_call.arguments");
      });

      it("RESOURCE_EXHAUSTED over the token budget: BUDGET_EXCEEDED with the limit", async () => {
        const error = await connectFailure(
          compile({
            system: { messages: [textMessage("sys", Role.SYSTEM, "s")] },
            budget: { maxTokens: 5n, estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n } },
          }),
        );
        expect(error.code).toBe(Code.ResourceExhausted);
        expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({ reason: "BUDGET_EXCEEDED", domain: "contextd.dev", metadata: { limit_tokens: "5" } });
      });
    });
  }

  it("the direct unary gRPC path writes grpc-status-details-bin, read by a foreign client (grpc-js)", async () => {
    const client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    try {
      const error = await client.unary(ConversationService.method.commit, { conversationId: newId(), deltas: [appendHistory(badCall)] }).then(
        () => undefined,
        (reason: grpc.ServiceError) => reason,
      );
      expect(error!.code).toBe(grpc.status.INVALID_ARGUMENT);
      const [bin] = error!.metadata.get("grpc-status-details-bin");
      const status = fromBinary(StatusSchema, bin as Buffer);
      expect(status.code).toBe(Code.InvalidArgument);
      expect(status.message).toBe(error!.details);
      const info = status.details.map((any) => anyUnpack(any, ErrorInfoSchema)).find((detail) => detail !== undefined);
      const badRequest = status.details.map((any) => anyUnpack(any, BadRequestSchema)).find((detail) => detail !== undefined);
      expect(info!.reason).toBe("TOOL_ARGUMENTS_INVALID");
      expect(badRequest!.fieldViolations[0]!.field).toBe("deltas[0].append_messages.messages[0].parts[0].tool_call.arguments");
    } finally {
      client.close();
    }
  });
});
