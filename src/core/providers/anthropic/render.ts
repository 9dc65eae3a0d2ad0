import { create } from "@bufbuild/protobuf";
import { WarningSchema, type CompiledPayload, type Warning } from "#gen/contextd/v1/compile_pb";
import { CacheType, Provider, Role, type FilePart, type ImagePart, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { toolPayloadText } from "../../model/payload-text.js";
import type { BodyOrigin } from "../body-origin.js";
import { base64, inlineImage } from "../media.js";
import { mediaPlan, type MediaPolicy } from "../media-capabilities.js";
import { isInstructionRole, messagesInRenderingOrder } from "../rendering-order.js";
import { CallIdAssignment, callIdRules, type RenamedCallId } from "../rendered-ids.js";
import { isSummary } from "../summary-role.js";
import { anthropicCompactionBlock, compactsHistory } from "../provider-compaction.js";
import { atMessage, providerRuleViolation } from "../rule-violation.js";
import { toolArgumentsObject } from "../tool-arguments.js";
import { toolParametersSchema } from "../tool-definitions.js";
import type { AnthropicTool } from "./body.js";
import type {
  AnthropicBlock,
  AnthropicCacheControl,
  AnthropicDocumentBlock,
  AnthropicImageBlock,
  AnthropicImageMediaType,
  AnthropicMessage,
  AnthropicMessagesBody,
  AnthropicTextBlock,
  AnthropicToolResultBlock,
} from "./body.js";

/** Anthropic allows at most this many `cache_control` breakpoints per request. */
export const anthropicMaxCacheBreakpoints = 4;

/** An Anthropic body and, for each of its messages, the first payload message merged into it. */
export interface RenderedAnthropic {
  body: AnthropicMessagesBody;
  origins: BodyOrigin[];
  /** Tool-call ids sent in another form than stored (`rendered-ids.ts`). */
  renamed: RenamedCallId[];
}


/**
 * Renders the payload as Anthropic `system`, `messages` and `tools`.
 * - SYSTEM and DEVELOPER messages of the system segment become `system` text blocks; instruction
 *   messages elsewhere (memory, tools segment, scratch, mid-history notes) become user text in
 *   place, because `messages` has no system role and hoisting them into `system` would change the
 *   cached prefix on every request.
 * - TOOL messages become user turns whose `tool_result` blocks come first; consecutive same-role
 *   turns are merged (results stay in front of any text merged after them).
 * - Reasoning is sent only when Anthropic produced it (`thinking` / `redacted_thinking`).
 * - A message cache hint becomes `cache_control` on that message's last block that can carry one.
 *   More than 4 hints: see `breakpointsToDrop`; a warning names the messages whose hints were
 *   dropped.
 */
export function renderAnthropic(payload: CompiledPayload, model: string, report: (warning: Warning) => void, autoCacheBreakpoints: boolean, media: MediaPolicy): RenderedAnthropic {
  const system: AnthropicTextBlock[] = [];
  const messages: AnthropicMessage[] = [];
  const origins: BodyOrigin[] = [];
  // Per body message: how many leading tool_result blocks it has, so merged results stay first.
  const leadingResults: number[] = [];
  const breakpoints: Breakpoint[] = [];
  const ids = new CallIdAssignment(callIdRules.anthropic);
  // Where the system slot's breakpoints end in `breakpoints`, for its automatic one.
  let systemBreakpointsEnd = 0;

  for (const { message, segment } of messagesInRenderingOrder(payload)) {
    if (segment === "system" && isInstructionRole(message.role)) {
      const blocks = message.parts.flatMap((part, index): AnthropicTextBlock[] => {
        if (part.kind.case === "text") return part.kind.value.text === "" ? [] : [{ type: "text", text: part.kind.value.text }];
        throw providerRuleViolation("anthropic.system_slot", atMessage(message.id), `part ${index} (${part.kind.case ?? "empty"}) cannot go in the Anthropic system field, which takes text only`);
      });
      markCacheBreakpoint(message, blocks, breakpoints);
      system.push(...blocks);
      systemBreakpointsEnd = breakpoints.length;
      continue;
    }
    // A summary is context, not something the assistant said: as a user turn it gives a body that
    // starts with the user's turn, which Anthropic (and Bedrock, Vertex) require.
    const role = message.role === Role.ASSISTANT && !isSummary(message) ? "assistant" : "user";
    const { results, rest } = contentBlocks(message, ids, media);
    markCacheBreakpoint(message, [...results, ...rest], breakpoints);
    // The summary heads history and stays until the next compaction: a stable boundary. So does a
    // compaction block, which the compile's cut puts first.
    if (autoCacheBreakpoints && segment === "history" && message.provenance?.kind.case === "summary") autoBreakpoint([...results, ...rest], message.id, breakpoints);
    if (autoCacheBreakpoints && rest[0]?.type === "compaction") autoBreakpoint([rest[0]], message.id, breakpoints);
    if (results.length + rest.length === 0) continue;
    const last = messages[messages.length - 1];
    if (last && last.role === role) {
      const lead = leadingResults[messages.length - 1]!;
      last.content.splice(lead, 0, ...results);
      last.content.push(...rest);
      leadingResults[messages.length - 1] = lead + results.length;
    } else {
      messages.push({ role, content: [...results, ...rest] });
      origins.push({ messageId: message.id, role: message.role });
      leadingResults.push(results.length);
    }
  }

  let toolsBreakpoint: Breakpoint | undefined;
  const tools = payload.toolDefinitions.map((definition): AnthropicTool => {
    const schema = toolParametersSchema(definition, "anthropic");
    return {
      name: definition.name,
      ...(definition.description !== "" ? { description: definition.description } : {}),
      input_schema: { ...schema, type: "object" as const },
    };
  });
  if (autoCacheBreakpoints) {
    // In Anthropic's prefix order: tools, then system, then messages.
    const lastTool = tools.at(-1);
    if (lastTool) toolsBreakpoint = { block: lastTool, messageId: "tool_definitions", auto: true };
    const systemBlocks: AnthropicBlock[] = [...system];
    const systemEntries: Breakpoint[] = [];
    autoBreakpoint(systemBlocks, "system", systemEntries);
    breakpoints.splice(systemBreakpointsEnd, 0, ...systemEntries);
    const lastMessage = messages.at(-1);
    if (lastMessage) autoBreakpoint(lastMessage.content, origins.at(-1)!.messageId, breakpoints);
    if (toolsBreakpoint) {
      toolsBreakpoint.block.cache_control = { type: "ephemeral" };
      breakpoints.unshift(toolsBreakpoint);
    }
    withoutAutoBreakpointsBeforeLongerTtl(breakpoints);
  }

  if (breakpoints.length > anthropicMaxCacheBreakpoints) {
    const dropped = breakpointsToDrop(breakpoints);
    for (const { block } of dropped) delete block.cache_control;
    report(
      create(WarningSchema, {
        code: "anthropic_cache_breakpoints_dropped",
        message: `Anthropic allows ${anthropicMaxCacheBreakpoints} cache breakpoints; the request has ${breakpoints.length}, so the hints of messages ${dropped.map((entry) => `"${entry.messageId}"`).join(", ")} were not sent (the first and the last ${anthropicMaxCacheBreakpoints - 1} were kept)`,
      }),
    );
  }

  withoutTrailingWhitespaceInPrefill(messages, origins);
  const body: AnthropicMessagesBody = { ...(model !== "" ? { model } : {}), ...(system.length > 0 ? { system } : {}), messages };
  if (tools.length > 0) body.tools = tools;
  return { body, origins, renamed: ids.renamed };
}

/**
 * A body ending in an assistant turn asks the model to continue it (a prefill), and Anthropic
 * rejects one whose final content ends in whitespace. Trailing whitespace of that last text block
 * is left out (it carries nothing the model continues from); a block of only whitespace goes, and
 * a turn left empty with it.
 */
function withoutTrailingWhitespaceInPrefill(messages: AnthropicMessage[], origins: BodyOrigin[]): void {
  const last = messages.at(-1);
  if (!last || last.role !== "assistant") return;
  const block = last.content.at(-1);
  if (!block || block.type !== "text") return;
  block.text = block.text.trimEnd();
  if (block.text !== "") return;
  last.content.pop();
  if (last.content.length > 0) return;
  messages.pop();
  origins.pop();
}

/**
 * Which hints to drop when there are more than Anthropic's 4: the ones between the first and the
 * last 3. The first marks the most stable prefix (in practice the system prompt and tools, shared
 * by every request of the conversation and often by other conversations, and usually the 1h
 * entry); the last ones mark the longest prefixes, which save the most on the next request of this
 * conversation. Dropping the earliest ones, as contextd did, threw away the system prompt's hint
 * first. The kept hints keep their order, so a valid TTL order (1h before 5m) stays valid.
 */
function breakpointsToDrop<T>(breakpoints: readonly T[]): T[] {
  return breakpoints.slice(1, breakpoints.length - (anthropicMaxCacheBreakpoints - 1));
}

/** A message's blocks: its tool results (which must lead a user turn) and everything else. */
function contentBlocks(message: Message, ids: CallIdAssignment, media: MediaPolicy): { results: AnthropicToolResultBlock[]; rest: AnthropicBlock[] } {
  const results: AnthropicToolResultBlock[] = [];
  const rest: AnthropicBlock[] = [];
  message.parts.forEach((part, index) => {
    const kind = part.kind;
    switch (kind.case) {
      case "text":
        if (kind.value.text !== "") rest.push({ type: "text", text: kind.value.text });
        return;
      case "image":
        if (mediaPlan("anthropic", message, index, { kind: "image", image: kind.value }, media).send) rest.push(imageBlock(kind.value));
        return;
      case "file":
        if (mediaPlan("anthropic", message, index, { kind: "file", file: kind.value }, media).send) rest.push(documentBlock(kind.value));
        return;
      case "reasoning":
        if (kind.value.provider !== Provider.ANTHROPIC_MESSAGES) return;
        rest.push(
          kind.value.redactedData !== ""
            ? { type: "redacted_thinking", data: kind.value.redactedData }
            : { type: "thinking", thinking: kind.value.text, signature: kind.value.signature },
        );
        return;
      case "providerCompaction":
        // Only Anthropic's own with content: a null-content block is a no-op Anthropic ignores.
        if (kind.value.provider === Provider.ANTHROPIC_MESSAGES && compactsHistory(kind.value)) rest.push(anthropicCompactionBlock(kind.value, message.id));
        return;
      case "toolCall":
        rest.push({ type: "tool_use", id: ids.call(message.id, kind.value.id), name: kind.value.name, input: toolArgumentsObject(kind.value, message.id, "anthropic.tool_use_input") });
        return;
      case "toolResult": {
        const result = kind.value;
        const text = toolPayloadText(result.payload);
        let content: AnthropicToolResultBlock["content"] = text;
        if (result.contentParts.length > 0) {
          content = text === "" ? [] : [{ type: "text", text }];
          for (const inner of result.contentParts) content.push(...toolResultContent(inner, message, index, media));
        }
        results.push({ type: "tool_result", tool_use_id: ids.result(result.toolCallId), content, ...(result.isError ? { is_error: true } : {}) });
        return;
      }
      default:
        throw providerRuleViolation("anthropic.content_type", atMessage(message.id), `part ${index} is empty`);
    }
  });
  return { results, rest };
}

function toolResultContent(part: Part, message: Message, index: number, media: MediaPolicy): Array<AnthropicTextBlock | AnthropicImageBlock> {
  if (part.kind.case === "text") return part.kind.value.text === "" ? [] : [{ type: "text", text: part.kind.value.text }];
  if (part.kind.case === "image") return mediaPlan("anthropic", message, index, { kind: "image", image: part.kind.value }, media).send ? [imageBlock(part.kind.value)] : [];
  throw providerRuleViolation("anthropic.content_type", atMessage(message.id), `a tool result's content part (${part.kind.case ?? "empty"}) must be text or an image`);
}

/** An image the table let through (media-capabilities.ts): by URL, or inline of a type Anthropic takes. */
function imageBlock(image: ImagePart): AnthropicImageBlock {
  const inline = inlineImage(image);
  if (!inline) return { type: "image", source: { type: "url", url: image.url } };
  return { type: "image", source: { type: "base64", media_type: inline.mimeType as AnthropicImageMediaType, data: inline.base64 } };
}

/** A document the table let through: a PDF by URL or inline, or inline plain text. */
function documentBlock(file: FilePart): AnthropicDocumentBlock {
  const title = file.name !== "" ? { title: file.name } : {};
  if (file.uri !== "") return { type: "document", source: { type: "url", url: file.uri }, ...title };
  if (file.mimeType === "application/pdf") return { type: "document", source: { type: "base64", media_type: "application/pdf", data: base64(file.data) }, ...title };
  return { type: "document", source: { type: "text", media_type: "text/plain", data: new TextDecoder().decode(file.data) }, ...title };
}

/** One `cache_control` in the body; `auto` when `RenderOptions.auto_cache_breakpoints` put it there. */
interface Breakpoint {
  block: { cache_control?: AnthropicCacheControl };
  messageId: string;
  auto?: boolean;
}

/** An automatic breakpoint on the last block of `blocks` that can carry one, unless a hint put one there already. */
function autoBreakpoint(blocks: readonly AnthropicBlock[], messageId: string, breakpoints: Breakpoint[]): void {
  for (let index = blocks.length - 1; index >= 0; index--) {
    const block = blocks[index]!;
    if (block.type === "thinking" || block.type === "redacted_thinking") continue;
    if (block.cache_control) return;
    block.cache_control = { type: "ephemeral" };
    breakpoints.push({ block, messageId, auto: true });
    return;
  }
}

/**
 * Anthropic wants longer cache lifetimes before shorter ones: an automatic (5 minute) breakpoint
 * before a hint asking for "1h" would make the request invalid, so such automatic ones go.
 */
function withoutAutoBreakpointsBeforeLongerTtl(breakpoints: Breakpoint[]): void {
  let lastLong = -1;
  breakpoints.forEach((entry, index) => {
    if (entry.block.cache_control?.ttl === "1h") lastLong = index;
  });
  for (let index = lastLong - 1; index >= 0; index--) {
    const entry = breakpoints[index]!;
    if (!entry.auto) continue;
    delete entry.block.cache_control;
    breakpoints.splice(index, 1);
  }
}

/** Puts the message's cache hint on its last block that can carry `cache_control`. */
function markCacheBreakpoint(
  message: Message,
  blocks: readonly AnthropicBlock[],
  breakpoints: Breakpoint[],
): void {
  if (!message.cache || message.cache.type !== CacheType.EPHEMERAL) return;
  const ttl = message.cache.ttl;
  if (ttl !== "" && ttl !== "5m" && ttl !== "1h") {
    throw providerRuleViolation("anthropic.cache_ttl", atMessage(message.id), `cache ttl "${ttl}" is not "5m" or "1h"`);
  }
  for (let index = blocks.length - 1; index >= 0; index--) {
    const block = blocks[index]!;
    if (block.type === "thinking" || block.type === "redacted_thinking") continue;
    block.cache_control = { type: "ephemeral", ...(ttl !== "" ? { ttl } : {}) };
    breakpoints.push({ block, messageId: message.id });
    return;
  }
}
