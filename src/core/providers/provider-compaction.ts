import { create } from "@bufbuild/protobuf";
import { PartSchema, Provider, Role, type Message, type Part, type ProviderCompactionPart } from "#gen/contextd/v1/message_pb";
import { expectArray, expectObject, expectString, malformed, optionalString, type JsonObject } from "./json-reader.js";
import { atMessage, providerRuleViolation } from "./rule-violation.js";

/**
 * Why it exists: an Anthropic compaction block and an OpenAI Responses compaction item are one
 * typed part (`ProviderCompactionPart`), read from responses and streams by two parsers and sent
 * back by two renderers, and the compile's cut (`compile/provider-compaction-cut.ts`) must know
 * which of them stands for the history before it. Those readings and the JSON forms live here once.
 */

/** A provider compaction part as the parsers build it. */
export function providerCompactionPart(fields: Omit<ProviderCompactionPart, "$typeName" | "$unknown">): Part {
  return create(PartSchema, { kind: { case: "providerCompaction", value: fields } });
}

/** The compaction part of `part`, when it is one. */
export function compactionOf(part: Part): ProviderCompactionPart | undefined {
  return part.kind.case === "providerCompaction" ? part.kind.value : undefined;
}

/**
 * True when the part compacts what is before it: an OpenAI item always; an Anthropic block only
 * with content (a block with null content is a failed compaction, which Anthropic treats as a
 * no-op, so it stands for nothing and is never sent).
 */
export function compactsHistory(compaction: ProviderCompactionPart): boolean {
  return compaction.provider === Provider.OPENAI_RESPONSES || compaction.summary !== undefined;
}

/** Where the latest compacting part of `history` is: message index and part index, or undefined. */
export function latestCompaction(history: readonly Message[]): { message: number; part: number; compaction: ProviderCompactionPart } | undefined {
  for (let message = history.length - 1; message >= 0; message--) {
    const parts = history[message]!.parts;
    for (let part = parts.length - 1; part >= 0; part--) {
      const compaction = compactionOf(parts[part]!);
      if (compaction && compactsHistory(compaction)) return { message, part, compaction };
    }
  }
  return undefined;
}

/** A provider's name as its compaction parts and refusals say it. */
export function compactionProviderName(provider: Provider): string {
  return provider === Provider.ANTHROPIC_MESSAGES ? "Anthropic Messages" : provider === Provider.OPENAI_RESPONSES ? "OpenAI Responses" : Provider[provider] ?? String(provider);
}

/** A JSON string or null (absent too) as an optional proto string. */
function nullableString(value: unknown, path: string): string | undefined {
  return value === undefined || value === null ? undefined : expectString(value, path);
}

/**
 * An Anthropic `compaction` content block (response form: `content` and `encrypted_content`
 * string or null, `signature` optional, `tool_changes` an optional array or null) as a part.
 * Empty content is not a summary Anthropic takes back ("Empty string content is not allowed").
 */
export function anthropicCompactionPart(block: JsonObject, path: string): Part {
  const summary = nullableString(block["content"], `${path}.content`);
  if (summary === "") throw malformed(`${path}.content`, "a compaction block's content is a summary or null, never empty");
  const toolChanges = block["tool_changes"];
  let toolChangesJson = "";
  if (toolChanges === null) toolChangesJson = "null";
  else if (toolChanges !== undefined) {
    expectArray(toolChanges, `${path}.tool_changes`).forEach((entry, index) => {
      const entryPath = `${path}.tool_changes[${index}]`;
      const type = expectString(expectObject(entry, entryPath)["type"], `${entryPath}.type`);
      if (type !== "tool_addition" && type !== "tool_removal") throw malformed(`${entryPath}.type`, `expected "tool_addition" or "tool_removal", got "${type}"`);
      expectObject((entry as JsonObject)["tool"], `${entryPath}.tool`);
    });
    toolChangesJson = JSON.stringify(toolChanges);
  }
  return providerCompactionPart({
    provider: Provider.ANTHROPIC_MESSAGES,
    summary,
    encryptedContent: nullableString(block["encrypted_content"], `${path}.encrypted_content`),
    signature: nullableString(block["signature"], `${path}.signature`),
    toolChangesJson,
    itemId: "",
  });
}

/** The Anthropic request block of a compaction part (BetaCompactionBlockParam). */
export interface AnthropicCompactionBlock {
  type: "compaction";
  content: string | null;
  encrypted_content: string | null;
  signature?: string;
  tool_changes?: AnthropicToolChange[] | null;
  cache_control?: { type: "ephemeral"; ttl?: "5m" | "1h" };
}

/** A tool a compaction's `tool_changes` entry names: by reference, or a custom tool by value. */
type AnthropicToolChangeReference =
  | { type: "tool_reference"; name: string }
  | { type: "mcp_tool_reference"; name: string; server_name: string }
  | { type: "mcp_toolset_reference"; server_name: string };

/**
 * One entry of a compaction block's `tool_changes`, as the SDK types it. contextd checks only
 * `type` and that `tool` is an object: the entries are Anthropic's, sent back as they came.
 */
export type AnthropicToolChange =
  | { type: "tool_addition"; tool: AnthropicToolChangeReference | { type: "tool_definition"; definition: { name: string; description?: string; input_schema: { type: "object"; [key: string]: unknown } } } }
  | { type: "tool_removal"; tool: AnthropicToolChangeReference };

export function anthropicCompactionBlock(compaction: ProviderCompactionPart, messageId: string): AnthropicCompactionBlock {
  let toolChanges: AnthropicToolChange[] | null | undefined;
  if (compaction.toolChangesJson !== "") {
    // Parts committed by hand (not ingested) may hold anything here.
    try {
      toolChanges = JSON.parse(compaction.toolChangesJson) as AnthropicToolChange[] | null;
    } catch {
      toolChanges = undefined;
    }
    if (toolChanges !== null && !Array.isArray(toolChanges)) {
      throw providerRuleViolation("anthropic.compaction_tool_changes", atMessage(messageId), "the compaction part's tool_changes_json is not the JSON text of an array or null");
    }
  }
  return {
    type: "compaction",
    content: compaction.summary ?? null,
    encrypted_content: compaction.encryptedContent ?? null,
    ...(compaction.signature !== undefined ? { signature: compaction.signature } : {}),
    ...(toolChanges !== undefined ? { tool_changes: toolChanges } : {}),
  };
}

/**
 * An OpenAI Responses `compaction` output item (`id`, `encrypted_content`, `created_by`) as a
 * part. `created_by` is not part of an input item (ResponseCompactionItemParam), so it is not kept.
 */
export function openAIResponsesCompactionPart(item: JsonObject, path: string): Part {
  return providerCompactionPart({
    provider: Provider.OPENAI_RESPONSES,
    summary: undefined,
    encryptedContent: expectString(item["encrypted_content"], `${path}.encrypted_content`),
    signature: undefined,
    toolChangesJson: "",
    itemId: optionalString(item["id"], `${path}.id`),
  });
}

/** The Responses input item of a compaction part (ResponseCompactionItemParam). */
export interface ResponsesCompactionItem {
  type: "compaction";
  id?: string;
  encrypted_content: string;
}

export function responsesCompactionItem(compaction: ProviderCompactionPart, messageId: string): ResponsesCompactionItem {
  if (compaction.encryptedContent === undefined) {
    throw providerRuleViolation("openai_responses.compaction_encrypted_content", atMessage(messageId), "an OpenAI Responses compaction part without its encrypted_content cannot be sent back");
  }
  return { type: "compaction", ...(compaction.itemId !== "" ? { id: compaction.itemId } : {}), encrypted_content: compaction.encryptedContent };
}

/** What the cut at the latest compaction part did to a history. */
export interface CompactionCut {
  /** The history to send. */
  history: Message[];
  /** Ids of messages left out whole. */
  dropped: string[];
  /** Ids of messages sent with some of their parts left out. */
  formatted: string[];
}

/**
 * The history a body for `provider` sends, given its latest compacting part (`latestCompaction`):
 * - produced by `provider`: from that part on; the messages before it and its message's parts
 *   before it stand behind the compaction and are left out;
 * - produced by another: the contextd summaries before it (provenance `summary`) stand for that
 *   range when they cover every other message there; the covered messages and the compaction part
 *   are left out. No summary, or a message no summary covers: FAILED_PRECONDITION with rule
 *   `<rulePrefix>.provider_compaction` at the compaction's message.
 * A tool result whose call was left out goes too (no provider takes a result without its call).
 * Undefined when history has no compacting part. Linear in the parts of `history`.
 */
export function cutAtLatestCompaction(history: readonly Message[], provider: Provider, rulePrefix: string): CompactionCut | undefined {
  const latest = latestCompaction(history);
  if (!latest) return undefined;
  const compactionMessage = history[latest.message]!;
  const dropped: string[] = [];
  const formatted: string[] = [];
  const kept: Message[] = [];
  const cutCalls = new Set<string>();
  const noteCalls = (parts: readonly Part[]) => {
    for (const part of parts) if (part.kind.case === "toolCall") cutCalls.add(part.kind.value.id);
  };
  if (latest.compaction.provider === provider) {
    for (let index = 0; index < latest.message; index++) {
      dropped.push(history[index]!.id);
      noteCalls(history[index]!.parts);
    }
    if (latest.part === 0) kept.push(compactionMessage);
    else {
      noteCalls(compactionMessage.parts.slice(0, latest.part));
      kept.push(withParts(compactionMessage, compactionMessage.parts.slice(latest.part)));
      formatted.push(compactionMessage.id);
    }
  } else {
    const covered = new Set<string>();
    let summaries = 0;
    for (let index = 0; index < latest.message; index++) {
      const message = history[index]!;
      if (message.provenance?.kind.case !== "summary") continue;
      summaries++;
      for (const id of message.provenance.kind.value.coveredMessageIds) covered.add(id);
    }
    const uncovered = history.slice(0, latest.message).find((message) => message.provenance?.kind.case !== "summary" && !covered.has(message.id));
    if (summaries === 0 || uncovered !== undefined) {
      const producer = compactionProviderName(latest.compaction.provider);
      throw providerRuleViolation(
        `${rulePrefix}.provider_compaction`,
        atMessage(compactionMessage.id),
        `part ${latest.part} is the ${producer} compaction of the conversation before it, which only ${producer} can read; ` +
          (summaries === 0 ? "no contextd summary stands for that range" : `message "${uncovered!.id}" before it is in no contextd summary`) +
          `: render for ${producer}, or compact that range with a compact delta (or budget.strategy SUMMARIZE before the compaction) so other providers get the summary`,
      );
    }
    for (let index = 0; index < latest.message; index++) {
      const message = history[index]!;
      if (message.provenance?.kind.case === "summary") kept.push(message);
      else {
        dropped.push(message.id);
        noteCalls(message.parts);
      }
    }
    const rest = compactionMessage.parts.filter((_, index) => index !== latest.part);
    if (rest.length > 0) {
      kept.push(withParts(compactionMessage, rest));
      formatted.push(compactionMessage.id);
    } else dropped.push(compactionMessage.id);
  }
  for (let index = latest.message + 1; index < history.length; index++) kept.push(history[index]!);
  return { history: cutCalls.size > 0 ? withoutOrphanedResults(kept, cutCalls, dropped, formatted) : kept, dropped, formatted };
}

/** `kept` without the results of calls that were cut (and not made again in what is kept). */
function withoutOrphanedResults(kept: Message[], cutCalls: ReadonlySet<string>, dropped: string[], formatted: string[]): Message[] {
  const keptCalls = new Set<string>();
  const history: Message[] = [];
  for (const message of kept) {
    const orphaned = (part: Part) => part.kind.case === "toolResult" && cutCalls.has(part.kind.value.toolCallId) && !keptCalls.has(part.kind.value.toolCallId);
    for (const part of message.parts) if (part.kind.case === "toolCall") keptCalls.add(part.kind.value.id);
    if (message.role !== Role.TOOL || !message.parts.some(orphaned)) {
      history.push(message);
      continue;
    }
    const parts = message.parts.filter((part) => !orphaned(part));
    if (parts.length === 0) dropped.push(message.id);
    else {
      history.push(withParts(message, parts));
      formatted.push(message.id);
    }
  }
  return history;
}

/** A copy of `message` with other parts (messages are never mutated: they may be frozen and shared). */
function withParts(message: Message, parts: Part[]): Message {
  return { ...message, parts };
}
