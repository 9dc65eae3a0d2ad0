import { Provider } from "#gen/contextd/v1/message_pb";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import type { BodyOrigin } from "../body-origin.js";
import { checkOpaquePassthrough } from "../opaque-passthrough.js";
import { isInstructionRole, messagesInRenderingOrder } from "../rendering-order.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { checkToolNames } from "../tool-definitions.js";
import type { AnthropicBlock, AnthropicCacheControl, AnthropicMessagesBody } from "./body.js";
import { anthropicMaxCacheBreakpoints } from "./render.js";
import { CallIdAssignment, callIdRules } from "../rendered-ids.js";
import { compactsHistory } from "../provider-compaction.js";

/** Anthropic tool_use ids: `^[a-zA-Z0-9_-]+$` (a 64-character cap kept by contextd, rendered-ids.ts). */
const toolUseIdPattern = /^[a-zA-Z0-9_-]{1,64}$/;

/** Anthropic tool names: letters, digits, underscores and dashes, at most 64. */
export const anthropicToolNamePattern = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * Checks an Anthropic Messages body against providers.md. `origins[i]` is the first payload message
 * merged into `body.messages[i]`. Throws FAILED_PRECONDITION naming the rule and the message id.
 */
export function validateAnthropic(body: AnthropicMessagesBody, origins: readonly BodyOrigin[], payload: CompiledPayload): void {
  if (body.messages.length === 0) throw providerRuleViolation("anthropic.messages_non_empty", "request", "there is no message to send");
  // A compaction block stands for the conversation before it and must come first in `messages`
  // (the SDK's CompactionBlockMisplacedError), in the assistant turn it came with.
  const startsWithCompaction = body.messages[0]!.content[0]?.type === "compaction";
  if (body.messages[0]!.role !== "user" && !startsWithCompaction) {
    throw providerRuleViolation(
      "anthropic.first_turn_user",
      atMessage(origins[0]!.messageId),
      `the first turn would be the assistant's; Anthropic (with Bedrock and Vertex) takes a body that starts with a user turn: start history with a user message, or leave budget.history_start at HISTORY_START_USER_TURN so trimming aligns it`,
    );
  }
  const final = body.messages.at(-1)!;
  const finalBlock = final.content.at(-1);
  if (final.role === "assistant" && finalBlock?.type === "text" && /\s$/.test(finalBlock.text)) {
    throw providerRuleViolation("anthropic.prefill_trailing_whitespace", atMessage(origins.at(-1)!.messageId), "the final assistant content ends in whitespace");
  }
  const seenCallIds = new Set<string>();

  body.messages.forEach((message, index) => {
    const where = atMessage(origins[index]!.messageId);
    if (message.content.length === 0) throw providerRuleViolation("anthropic.empty_content", where, "a message without content blocks");
    if (index > 0 && body.messages[index - 1]!.role === message.role) {
      throw providerRuleViolation("anthropic.role_alternation", where, `two consecutive "${message.role}" turns; they must be merged`);
    }
    const previousCalls = index > 0 ? toolUseIds(body.messages[index - 1]!.content) : [];
    const answered = new Set<string>();
    let leading = true;
    message.content.forEach((block, blockIndex) => {
      if (block.type === "compaction" && (index > 0 || blockIndex > 0)) {
        throw providerRuleViolation("anthropic.compaction_position", where, "a compaction block may only be the first block of messages, and there only one");
      }
    });
    for (const block of message.content) {
      if (block.type === "tool_result") {
        if (message.role !== "user" || !leading) {
          throw providerRuleViolation("anthropic.tool_result_first", where, `tool_result for "${block.tool_use_id}" must come first in a user turn`);
        }
        if (!previousCalls.includes(block.tool_use_id) || answered.has(block.tool_use_id)) {
          throw providerRuleViolation("anthropic.call_result_pairing", where, `tool_result for "${block.tool_use_id}" does not answer a tool_use of the previous assistant turn exactly once`);
        }
        answered.add(block.tool_use_id);
        continue;
      }
      leading = false;
      if (block.type === "tool_use") {
        if (message.role !== "assistant") throw providerRuleViolation("anthropic.call_result_pairing", where, `tool_use "${block.id}" outside an assistant turn`);
        if (!toolUseIdPattern.test(block.id)) throw providerRuleViolation("anthropic.tool_use_id", where, `tool_use id "${block.id}" does not match ^[a-zA-Z0-9_-]{1,64}$`);
        if (block.id === "" || seenCallIds.has(block.id)) throw providerRuleViolation("anthropic.call_result_pairing", where, `tool_use id "${block.id}" is empty or used twice`);
        seenCallIds.add(block.id);
      }
      if (block.type === "thinking" && block.signature === "") {
        throw providerRuleViolation("anthropic.thinking_signature", where, "a thinking block without its signature cannot be sent back");
      }
    }
    if (previousCalls.length > 0) {
      const missing = previousCalls.filter((id) => !answered.has(id));
      // Results still missing are fine only in the last turn: the open round at the tail.
      if (missing.length > 0 && index < body.messages.length - 1) {
        throw providerRuleViolation(
          "anthropic.open_call_position",
          atMessage(origins[index - 1]!.messageId),
          `tool calls ${missing.map((id) => `"${id}"`).join(", ")} have no tool_result in the next user turn; an open call may only be the last assistant turn`,
        );
      }
    }
  });

  checkCacheControl(body, origins);
  checkToolNames(body.tools?.map((tool) => tool.name) ?? [], anthropicToolNamePattern, "anthropic");

  const expectedSystem: string[] = [];
  const expectedOpaque: string[] = [];
  const ids = new CallIdAssignment(callIdRules.anthropic);
  for (const { message, segment } of messagesInRenderingOrder(payload)) {
    const inSystemSlot = segment === "system" && isInstructionRole(message.role);
    for (const part of message.parts) {
      const kind = part.kind;
      if (kind.case === "text" && inSystemSlot && kind.value.text !== "") expectedSystem.push(kind.value.text);
      if (kind.case === "toolCall") expectedOpaque.push(`tool_use:${ids.call(message.id, kind.value.id)}`);
      if (kind.case === "toolResult") expectedOpaque.push(`tool_result:${ids.result(kind.value.toolCallId)}`);
      if (kind.case === "providerCompaction" && kind.value.provider === Provider.ANTHROPIC_MESSAGES && compactsHistory(kind.value)) {
        expectedOpaque.push(`compaction:${kind.value.encryptedContent ?? null}:${kind.value.signature ?? null}:${kind.value.summary ?? null}`);
      }
      if (kind.case === "reasoning" && kind.value.provider === Provider.ANTHROPIC_MESSAGES) {
        expectedOpaque.push(kind.value.redactedData !== "" ? `redacted:${kind.value.redactedData}` : `signature:${kind.value.signature}`);
      }
    }
  }
  const actualSystem = (body.system ?? []).map((block) => block.text);
  if (actualSystem.join("\u0000") !== expectedSystem.join("\u0000")) {
    throw providerRuleViolation("anthropic.system_slot", "system", "the system field does not hold exactly the system segment's instructions");
  }
  // Merging moves results in front of other blocks of a user turn, so each kind is compared as
  // its own sequence; within a kind the order is the payload's.
  const byKind = (values: string[], prefix: string) => values.filter((value) => value.startsWith(prefix));
  const actualOpaque = body.messages.flatMap((message) => message.content.flatMap(opaqueValues));
  for (const prefix of ["tool_use:", "tool_result:", "signature:", "redacted:", "compaction:"]) {
    checkOpaquePassthrough("anthropic", byKind(expectedOpaque, prefix), byKind(actualOpaque, prefix));
  }
}

function toolUseIds(content: readonly AnthropicBlock[]): string[] {
  return content.flatMap((block) => (block.type === "tool_use" ? [block.id] : []));
}

function opaqueValues(block: AnthropicBlock): string[] {
  switch (block.type) {
    case "tool_use":
      return [`tool_use:${block.id}`];
    case "tool_result":
      return [`tool_result:${block.tool_use_id}`];
    case "thinking":
      return [`signature:${block.signature}`];
    case "redacted_thinking":
      return [`redacted:${block.data}`];
    case "compaction":
      return [`compaction:${block.encrypted_content}:${block.signature ?? null}:${block.content}`];
    default:
      return [];
  }
}

/** Invariant 6: at most 4 breakpoints, and a 1h entry never after a 5m one (Anthropic's ordering). */
function checkCacheControl(body: AnthropicMessagesBody, origins: readonly BodyOrigin[]): void {
  const marks: { control: AnthropicCacheControl; where: string }[] = [];
  for (const block of body.system ?? []) if (block.cache_control) marks.push({ control: block.cache_control, where: "system" });
  body.messages.forEach((message, index) => {
    for (const block of message.content) {
      if ("cache_control" in block && block.cache_control) marks.push({ control: block.cache_control, where: atMessage(origins[index]!.messageId) });
    }
  });
  if (marks.length > anthropicMaxCacheBreakpoints) {
    throw providerRuleViolation("anthropic.cache_breakpoints", marks[anthropicMaxCacheBreakpoints]!.where, `${marks.length} cache_control breakpoints; Anthropic allows ${anthropicMaxCacheBreakpoints}`);
  }
  let seenShort = false;
  for (const { control, where } of marks) {
    const ttl = control.ttl ?? "5m";
    if (ttl === "1h" && seenShort) throw providerRuleViolation("anthropic.cache_ttl_order", where, "a 1h cache breakpoint after a 5m one; longer TTLs must come first");
    if (ttl === "5m") seenShort = true;
  }
}
