// The recall helper against a real sidecar: a compile with recallTools trims a coding history and
// sends contextd's recall tools; the model's calls of them are answered with one
// answerRecallToolCall each, from what the budget dropped.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Code, ContextdError, RECALL_TOOL_NAMES, ToolRound, appendUser, isRecallTool, textPayload, toolCall, userText } from "@contextd/client";
import { Provider } from "@contextd/client/v1";
import { freshId, sidecarForFile } from "./sidecar.ts";

const suite = sidecarForFile();

describe("answerRecallToolCall", () => {
  test("answers the model's search_history and recall_message calls from the dropped history", async () => {
    const { client } = suite;
    const conversationId = freshId("recall");
    let version = 0n;
    for (let index = 0; index < 30; index++) {
      const round = new ToolRound("", toolCall(`c${index}`, "run_command", JSON.stringify({ command: `make -C services/worker_${index} test` })))
        .answer(`c${index}`, textPayload(`ok services/worker_${index}\n${"build output line\n".repeat(100)}`));
      const committed = await client.commit({ conversationId, expectedVersion: version, deltas: [appendUser(userText(`step ${index}`)), round.delta()] });
      version = committed.version;
    }
    const { result } = await client.compile({ conversationId, budget: { maxTokens: 2_000n }, recallTools: true, render: { provider: Provider.OPENAI_CHAT, model: "gpt-4o" } });
    const body = JSON.parse(new TextDecoder().decode(result!.rendered!.json)) as { tools: Array<{ function: { name: string } }> };
    const names = body.tools.map((tool) => tool.function.name);
    assert.deepEqual(names.filter(isRecallTool), [...RECALL_TOOL_NAMES]);
    assert.ok(result!.budgetDroppedMessages > 0n);

    const found = await client.answerRecallToolCall(conversationId, "contextd_search_history", JSON.stringify({ query: "services/worker_2", max_results: 3 }));
    assert.match(found, /make -C services\/worker_2 test/);
    const id = /--- message (\S+) · position \d+ · assistant · run_command\ntool call run_command \(c2\)/.exec(found)?.[1];
    assert.ok(id, found);
    const whole = await client.answerRecallToolCall(conversationId, "contextd_recall_message", JSON.stringify({ message_ids: [id] }));
    assert.match(whole, /make -C services\/worker_2 test/);
  });

  test("throws INVALID_ARGUMENT naming a call that is not a recall tool's", async () => {
    const { client } = suite;
    const error = await client.answerRecallToolCall(freshId("recall"), "read_file", "{}").catch((caught: unknown) => caught);
    assert.ok(error instanceof ContextdError);
    assert.equal(error.code, Code.InvalidArgument);
    assert.match(error.message, /tool_call.name: "read_file" is not a recall tool/);
  });
});
