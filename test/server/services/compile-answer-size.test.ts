import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompiledPayloadSchema, CompileRequestSchema, CompileResultPart, EstimatorKind } from "#gen/contextd/v1/compile_pb";
import { CompileResponseSchema } from "#gen/contextd/v1/context_service_pb";
import { CommitRequestSchema, CommitResponseSchema } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { appendHistory, textMessage } from "../../store/fixtures.js";
import { startSidecar, type Sidecar } from "../../support/sidecar.js";

// Issue 14's target: the default answer of a compile rendered for OpenAI Chat, at 10,000 stored
// ~1 KB messages with a budget of 8,000 tokens, is at most twice its rendered body. Measured on
// the wire: a Connect unary answer's body is the encoded CompileResponse, byte for byte.
const sentence = "The agent read the file, ran the tests and noted what failed and why it failed. ";
const kilobyte = sentence.repeat(Math.ceil(1024 / sentence.length)).slice(0, 1024);
const stored = 10_000;

describe("the default compile answer of a long conversation (real sidecar, Connect binary)", () => {
  let sidecar: Sidecar;
  beforeAll(async () => {
    sidecar = await startSidecar();
  });
  afterAll(async () => {
    await sidecar?.stop();
  });

  /** The answer's bytes as received, and the answer decoded from them. */
  async function call<I extends DescMessage, O extends DescMessage>(method: string, input: I, output: O, request: MessageInitShape<I>) {
    const response = await fetch(`${sidecar.url}/${method}`, { method: "POST", headers: { "content-type": "application/proto" }, body: toBinary(input, create(input, request)) });
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(response.status, new TextDecoder().decode(bytes)).toBe(200);
    return { bytes: bytes.length, message: fromBinary(output, bytes) };
  }

  it("is at most 2x the rendered body at 10,000 stored messages; the typed payload comes only when included", async () => {
    const conversationId = "answer-size";
    let version = 0n;
    for (let start = 0; start < stored; start += 1_000) {
      const batch = Array.from({ length: 1_000 }, (_, offset) => textMessage(`m${start + offset}`, (start + offset) % 2 === 0 ? Role.USER : Role.ASSISTANT, `${start + offset} ${kilobyte}`));
      const committed = await call("contextd.v1.ConversationService/Commit", CommitRequestSchema, CommitResponseSchema, { conversationId, expectedVersion: version, deltas: [appendHistory(...batch)] });
      version = committed.message.version;
    }
    const compile = (include: CompileResultPart[]) =>
      call("contextd.v1.ContextService/Compile", CompileRequestSchema, CompileResponseSchema, {
        conversationId,
        budget: { maxTokens: 8_000n, estimator: { kind: EstimatorKind.CHAR_FALLBACK } },
        render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" },
        include,
      });
    const lean = await compile([]);
    const body = lean.message.result!.rendered!.json.length;
    expect(body).toBeGreaterThan(30_000);
    expect(lean.message.result!.payload).toBeUndefined();
    expect(lean.message.result!.budgetDroppedMessages).toBeGreaterThan(9_000n);
    expect(lean.bytes).toBeLessThanOrEqual(2 * body);

    // Asked for, the payload is the second copy of the prompt it used to be by default.
    const asked = await compile([CompileResultPart.PAYLOAD]);
    const payload = toBinary(CompiledPayloadSchema, asked.message.result!.payload!).length;
    expect(payload).toBeGreaterThan(body / 2);
    expect(asked.message.result!.rendered!.json).toEqual(lean.message.result!.rendered!.json);
    // The answers' stage timings are durations (varints of a few bytes each), so two answers of the
    // same compile differ by a few bytes: compared with that slack, the payload comes on top.
    expect(asked.bytes).toBeGreaterThan(lean.bytes + payload - 64);
    expect(asked.bytes).toBeGreaterThan(2 * body);
  });
});
