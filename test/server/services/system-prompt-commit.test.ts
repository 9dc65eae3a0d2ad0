import { describe, expect, it } from "vitest";
import { CompileResultPart, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { ContextService } from "#gen/contextd/v1/context_service_pb";
import { ConversationService } from "#gen/contextd/v1/conversation_service_pb";
import { Provider, Role } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { toolCallRulesId, toolGuidanceId } from "../../../src/core/compile/system-prompt.js";
import { sidecarForSuite, sidecarStores } from "../../support/sidecar.js";
import { textMessage } from "../../store/fixtures.js";

describe.each(sidecarStores)("system-prompt blocks in a compile-commit (real sidecar, %s)", (_name, backend) => {
  const running = sidecarForSuite(backend);


  it("sends the blocks and their records by default, and stores neither the blocks nor the trimmed base prompt", async () => {
    const conversationId = `system-prompt-${Date.now()}`;
    const basePrompt = "You are a travel assistant.\n\n<tool_call_rules>\n- An older copy.\n</tool_call_rules>";
    await running.client.unary(ConversationService.method.commit, {
      conversationId,
      expectedVersion: 0n,
      deltas: [
        { operation: { case: "appendMessages", value: { segment: Segment.SYSTEM, messages: [textMessage("sys", Role.SYSTEM, basePrompt)] } } },
        {
          operation: {
            case: "setToolDefinitions",
            value: { toolDefinitions: [{ name: "get_weather", description: "Current weather for a city.", bestPractices: ["Give the city in English."] }] },
          },
        },
      ],
    });
    const { result } = await running.client.unary(ContextService.method.compile, {
      conversationId,
      currentTurn: { raw: textMessage("q1", Role.USER, "Weather in Oslo?") },
      systemPrompt: { toolGuidance: true, toolCallRules: true },
      render: { provider: Provider.OPENAI_RESPONSES, model: "gpt-4o" },
      commit: { expectedVersion: 1n },
      include: [CompileResultPart.PAYLOAD],
    });
    expect(result!.committedVersion).toBe(2n);
    expect(result!.payload!.system.map((message) => message.id)).toEqual([toolGuidanceId, "sys", toolCallRulesId]);
    expect(result!.introduced.map((introduced) => introduced.message!.id)).toEqual([toolCallRulesId, toolGuidanceId]);
    for (const id of [toolGuidanceId, toolCallRulesId]) {
      expect(result!.transformations[id]).toMatchObject({ action: TransformationAction.PASSED, reason: TransformationReason.SYSTEM_PROMPT_ASSEMBLY });
    }
    expect(result!.transformations["sys"]).toMatchObject({ action: TransformationAction.FORMATTED, reason: TransformationReason.SYSTEM_PROMPT_ASSEMBLY });
    const body = JSON.parse(new TextDecoder().decode(result!.rendered!.json)) as { instructions: string };
    expect(body.instructions.split("<tool_call_rules>")).toHaveLength(2);
    expect(body.instructions).toContain("1. Give the city in English.");

    const { state } = await running.client.unary(ConversationService.method.getState, { conversationId });
    expect(state!.version).toBe(2n);
    expect(state!.system.map((message) => [message.id, message.parts[0]!.kind.value])).toEqual([["sys", expect.objectContaining({ text: basePrompt })]]);
    expect(state!.history.map((message) => message.id)).toEqual(["q1"]);
    expect(state!.toolDefinitions[0]!.bestPractices).toEqual(["Give the city in English."]);
  });
});
