import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { grpcJsClient, rpcFailure } from "../../support/grpc-js.js";
import { sidecarStores, startSidecar, type Sidecar } from "../../support/sidecar.js";
import { appendHistory, textMessage } from "../../store/fixtures.js";
import { create } from "@bufbuild/protobuf";
import { MessageSchema } from "#gen/contextd/v1/message_pb";

// A large tool result is sent as a preview; the model's read_tool_result call is answered by
// ReadToolResult from the stored conversation, slice by slice. Real sidecar, grpc-js, both stores.

describe.each(sidecarStores)("large tool results by reference (real sidecar, %s)", (_name, backend) => {
  let sidecar: Sidecar;
  let client: ReturnType<typeof grpcJsClient>;
  let stopBackend: (() => Promise<void>) | undefined;
  // Characters of one, two, three and four UTF-8 bytes: slices must never split one.
  const fileText = Array.from({ length: 3_000 }, (_, index) => `${index} aé€😀\n`).join("");
  const conversationId = `refs-${Date.now()}`;

  beforeAll(async () => {
    const started = await backend();
    stopBackend = started.stop;
    sidecar = await startSidecar(started.args);
    client = grpcJsClient(`127.0.0.1:${sidecar.port}`);
    await client.unary(ConversationService.method.commit, {
      conversationId,
      expectedVersion: 0n,
      deltas: [
        appendHistory(
          textMessage("u0", Role.USER, "read the file"),
          create(MessageSchema, { id: "a0", role: Role.ASSISTANT, parts: [{ kind: { case: "toolCall", value: { id: "call-1", name: "read_file", arguments: { data: "{}" } } } }] }),
          create(MessageSchema, { id: "t0", role: Role.TOOL, parts: [{ kind: { case: "toolResult", value: { toolCallId: "call-1", name: "read_file", payload: { text: fileText } } } }] }),
        ),
      ],
    });
  });
  afterAll(async () => {
    client?.close();
    await sidecar?.stop();
    await stopBackend?.();
  });

  it("compiles the result as a preview naming the handle, and reads the whole text back in slices", async () => {
    const { result } = await client.unary(ContextService.method.compile, {
      conversationId,
      largeToolResults: { addReadTool: true },
      render: { provider: Provider.ANTHROPIC_MESSAGES, model: "claude" },
    });
    const body = new TextDecoder().decode(result!.rendered!.json);
    // 1,024 bytes end inside a four-byte character: the head stops at 1,021.
    expect(body).toContain('the first 1021 shown; read more with read_tool_result(tool_call_id \\"call-1\\", offset 1021)');
    expect(body).toContain('"name":"read_tool_result"');
    expect(body.length).toBeLessThan(Buffer.byteLength(fileText) / 4);

    let offset = 0n;
    let joined = "";
    for (;;) {
      const slice = await client.unary(ConversationService.method.readToolResult, { conversationId, toolCallId: "call-1", offset, maxBytes: 5_001 });
      expect(slice.offset).toBe(offset);
      expect(slice.name).toBe("read_file");
      expect(slice.version).toBe(1n);
      expect(slice.totalBytes).toBe(BigInt(Buffer.byteLength(fileText)));
      joined += slice.text;
      if (slice.nextOffset === slice.totalBytes) break;
      offset = slice.nextOffset;
    }
    expect(joined).toBe(fileText);
    const whole = await client.unary(ConversationService.method.readToolResult, { conversationId, toolCallId: "call-1", maxBytes: 1_048_576 });
    expect(whole.text).toBe(fileText);
  });

  it("moves forward when max_bytes is smaller than the character at offset: that one character, whole (issue 29 #13)", async () => {
    // "0 aé€😀\n": offset 3 starts "é" (2 bytes), 5 "€" (3), 8 "😀" (4). Paging by next_offset
    // with 1 byte asked used to stay at 3 with an empty slice.
    const texts: string[] = [];
    let offset = 0n;
    while (offset < 13n) {
      const slice = await client.unary(ConversationService.method.readToolResult, { conversationId, toolCallId: "call-1", offset, maxBytes: 1 });
      expect(slice.nextOffset).toBeGreaterThan(offset);
      texts.push(slice.text);
      offset = slice.nextOffset;
    }
    expect(texts).toEqual(["0", " ", "a", "é", "€", "😀", "\n"]);
    // Inside a character the offset still moves back to its start, and 3 bytes asked there give the whole 4.
    const inside = await client.unary(ConversationService.method.readToolResult, { conversationId, toolCallId: "call-1", offset: 9n, maxBytes: 3 });
    expect(inside).toMatchObject({ text: "😀", offset: 8n, nextOffset: 12n });
  });

  it("answers NOT_FOUND for a call without a result and INVALID_ARGUMENT for bad requests", async () => {
    const missing = await rpcFailure(client.unary(ConversationService.method.readToolResult, { conversationId, toolCallId: "nope" }));
    expect(missing.code).toBe(grpc.status.NOT_FOUND);
    expect(missing.details).toBe(`conversation "${conversationId}" (version 1) has no result for tool call "nope"`);
    const tooMuch = await rpcFailure(client.unary(ConversationService.method.readToolResult, { conversationId, toolCallId: "call-1", maxBytes: 1_048_577 }));
    expect(tooMuch.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(tooMuch.details).toBe("max_bytes: at most 1048576, got 1048577");
    const noCall = await rpcFailure(client.unary(ConversationService.method.readToolResult, { conversationId }));
    expect(noCall.details).toBe("tool_call_id is required");
  });
});
