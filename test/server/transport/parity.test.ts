import { create, toJson, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { compressionGzip, createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompileRequestSchema, CompileResultPart, CompileResultSchema } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { CommitResponseSchema, ConversationService, GetStateResponseSchema } from "#gen/contextd/v1/conversation_service_pb";
import { MessageSchema, Provider, Role } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, Segment, type Delta } from "#gen/contextd/v1/state_pb";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// One request path (docs/architecture.md): whichever way bytes reach the services — unary gRPC
// straight from the HTTP/2 stream, or through connect-node's adapter with the codec (binary) or
// without it (JSON) — the same calls give the same results, errors and metadata. Each protocol
// runs the same scenario on its own conversation of a real sidecar; the results must be equal.

const text = (value: string) => ({ kind: { case: "text" as const, value: { text: value } } });
const history: MessageInitShape<typeof MessageSchema>[] = [
  { id: "u1", role: Role.USER, parts: [text("What is the weather in Oslo?")] },
  { id: "a1", role: Role.ASSISTANT, parts: [text("Checking."), { kind: { case: "toolCall", value: { id: "call_1", name: "weather", arguments: { data: '{"city":"Oslo"}' } } } }] },
  { id: "t1", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "call_1", name: "weather", payload: { text: "4°C, rain" } } } }] },
  { id: "a2", role: Role.ASSISTANT, parts: [text("It is 4°C and raining in Oslo.")] },
  { id: "u2", role: Role.USER, parts: [text("And tomorrow? ".repeat(8))] },
];
const append = (messages: MessageInitShape<typeof MessageSchema>[]): Delta =>
  create(DeltaSchema, { operation: { case: "appendMessages", value: { segment: Segment.HISTORY, messages } } });
const compileRequest = (extra: { conversationId?: string; history?: { messages: MessageInitShape<typeof MessageSchema>[] } }) =>
  create(CompileRequestSchema, {
    system: { messages: [{ id: "sys", role: Role.SYSTEM, parts: [text("Be brief.")] }] },
    budget: { maxTokens: 80n },
    render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
    // The typed payload beside the rendered body: the enum in every encoding, and ids to compare.
    include: [CompileResultPart.PAYLOAD],
    ...extra,
  });

/** What a protocol answered in the scenario, with what varies per call (stage durations) removed. */
interface Outcome {
  stateless: JsonObject;
  committed: JsonObject;
  state: JsonObject;
  stateful: JsonObject;
  conflict: { code: Code; message: string; currentVersion: string | null };
  invalid: { code: Code; message: string };
  requestId: string | undefined;
}

function withoutTimings(json: JsonObject): JsonObject {
  const { stageTimings: _timings, ...rest } = json;
  return rest;
}

async function scenario(transport: Transport, conversationId: string): Promise<Outcome> {
  const context = createClient(ContextService, transport);
  const conversations = createClient(ConversationService, transport);
  const stateless = await context.compile(compileRequest({ history: { messages: history } }));
  const committed = await conversations.commit({ conversationId, deltas: [append(history)], idempotencyKey: "parity-1" });
  const state = await conversations.getState({ conversationId });
  let requestId: string | undefined;
  const stateful = await context.compile(compileRequest({ conversationId }), {
    headers: { "x-request-id": "parity-trace-1" },
    onHeader: (headers) => (requestId = headers.get("x-request-id") ?? undefined),
  });
  const conflict = await conversations.commit({ conversationId, expectedVersion: 7n, deltas: [append([{ id: "u3", role: Role.USER, parts: [text("late")] }])] }).then(
    () => expect.unreachable("a stale expected_version must be refused"),
    (error: unknown) => {
      const connectError = ConnectError.from(error);
      return { code: connectError.code, message: connectError.rawMessage, currentVersion: connectError.metadata.get("contextd-current-version") };
    },
  );
  const invalid = await context.compile({ budget: { maxTokens: 10n }, history: { messages: [{ id: "", role: 99 as Role, parts: [] }] } }).then(
    () => expect.unreachable("an invalid role must be refused"),
    (error: unknown) => ({ code: ConnectError.from(error).code, message: ConnectError.from(error).rawMessage }),
  );
  // The conversation id appears in the answers; each protocol has its own.
  const json = (value: JsonObject) => JSON.parse(JSON.stringify(value).replaceAll(conversationId, "<conversation>")) as JsonObject;
  return {
    stateless: withoutTimings(toJson(CompileResultSchema, stateless.result!) as JsonObject),
    committed: json(toJson(CommitResponseSchema, committed) as JsonObject),
    state: json(toJson(GetStateResponseSchema, state) as JsonObject),
    stateful: json(withoutTimings(toJson(CompileResultSchema, stateful.result!) as JsonObject)),
    conflict: { ...conflict, message: conflict.message.replaceAll(conversationId, "<conversation>") },
    invalid,
    requestId,
  };
}

describe("every protocol gives the same answers", () => {
  let sidecar: Sidecar;
  let throughConnect: Sidecar;
  beforeAll(async () => {
    [sidecar, throughConnect] = await Promise.all([startSidecar(), startSidecar(["--direct-unary-grpc", "false"])]);
  });
  afterAll(async () => {
    await Promise.all([sidecar?.stop(), throughConnect?.stop()]);
  });

  it("gRPC (direct path and through connect, binary, gzip, JSON), Connect (binary, JSON) and gRPC-Web", async () => {
    const protocols: [string, () => Transport][] = [
      ["gRPC, served from the HTTP/2 stream", () => createGrpcTransport({ baseUrl: sidecar.url })],
      ["gRPC, through connect (--direct-unary-grpc false)", () => createGrpcTransport({ baseUrl: throughConnect.url })],
      ["gRPC, gzip-compressed requests", () => createGrpcTransport({ baseUrl: sidecar.url, sendCompression: compressionGzip, compressMinBytes: 0 })],
      ["gRPC, JSON codec", () => createGrpcTransport({ baseUrl: sidecar.url, useBinaryFormat: false })],
      ["Connect, binary", () => createConnectTransport({ baseUrl: sidecar.url, httpVersion: "2", useBinaryFormat: true })],
      ["Connect, JSON over HTTP/1.1", () => createConnectTransport({ baseUrl: sidecar.url, httpVersion: "1.1", useBinaryFormat: false })],
      ["gRPC-Web, binary over HTTP/1.1", () => createGrpcWebTransport({ baseUrl: sidecar.url, httpVersion: "1.1", useBinaryFormat: true })],
    ];
    const outcomes: [string, Outcome][] = [];
    for (const [index, [name, transport]] of protocols.entries()) outcomes.push([name, await scenario(transport(), `parity/${index}`)]);
    const [, reference] = outcomes[0]!;
    // The reference itself is what the scenario means.
    expect(reference.committed).toMatchObject({ version: "1" });
    expect(reference.conflict).toMatchObject({ code: Code.Aborted, currentVersion: "1" });
    expect(reference.invalid.code).toBe(Code.InvalidArgument);
    expect(reference.requestId).toBe("parity-trace-1");
    // The budget trims: the head round goes, the latest user turn stays.
    const kept = ((reference.stateful.payload as JsonObject).history as JsonObject[]).map((message) => message.id);
    expect(kept.length).toBeLessThan(history.length);
    expect(kept.at(-1)).toBe("u2");
    expect((reference.stateless.payload as JsonObject).history).toEqual((reference.stateful.payload as JsonObject).history);
    for (const [name, outcome] of outcomes.slice(1)) expect(outcome, name).toEqual(reference);
  });
});
