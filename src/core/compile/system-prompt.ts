import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { IntroducedMessageSchema, TransformationAction, TransformationReason } from "../../../gen/ts/contextd/v1/compile_pb.js";
import { MessageSchema, PartSchema, Role, type Message, type Part } from "../../../gen/ts/contextd/v1/message_pb.js";
import { Segment, type ToolDefinition } from "../../../gen/ts/contextd/v1/state_pb.js";
import { setRecord, type CompileWork } from "./working-set.js";

/**
 * Why it exists: `tool_definitions` reach the model as provider tools (name, description, schema),
 * but nothing told it *how* to use them, and models also answered with tool calls written out as
 * text. Agents built that guidance into their system prompt by hand, stored it with the
 * conversation, and then sent it twice once a framework added its own. This stage builds two
 * compile-only SYSTEM messages from the definitions (docs/system-prompt.md has their format):
 *
 * - the tool guidance block, first in the system segment: per named tool, sorted by name, its
 *   description, its best practices numbered with repeats left out, and its prompt injection;
 * - the tool-call rules block, last in the system segment, after any copy of it already in the
 *   system messages' text has been taken out for this compile.
 *
 * Both run after deferred blocks, so `work.baseline` (what persistence saves) never holds them,
 * and every cost is linear in the definitions: normalisation is one pass over each text, repeats
 * are a set lookup, and "contained in the description" is one Aho–Corasick scan of the
 * description for all of a tool's practices at once (no regex, no `includes` per practice). The
 * size limits of practices and injections are checked with the definitions
 * (`checkToolDefinitionTexts` in deltas/tool-definitions.ts).
 */

export const toolGuidanceId = "system_prompt:tool_guidance";
export const toolCallRulesId = "system_prompt:tool_call_rules";

const guidanceOpen = "<tool_guidance>";
const guidanceClose = "</tool_guidance>";
const guidanceIntro = "Guidance for the tools you can call. Whenever you call one of them, follow the practices listed under it.";
const rulesOpen = "<tool_call_rules>";
const rulesClose = "</tool_call_rules>";

/** The tool-call rules block, exactly as sent. */
export const toolCallRulesText = [
  rulesOpen,
  "- Call a tool only through the structured tool-call channel of this API; never write a tool call out as text in your reply.",
  "- Use your text replies for your reasoning and for the final answer to the user.",
  "- Keep tool arguments and tool results in the tool channel; do not copy them into your text replies.",
  rulesClose,
].join("\n");

/** Characters of the definitions' text the tool guidance block is built from (for the text allowance). */
export function toolDefinitionTextCharacters(definitions: readonly ToolDefinition[]): number {
  let total = 0;
  for (const definition of definitions) {
    total += definition.name.length + definition.description.length + definition.promptInjection.length;
    for (const practice of definition.bestPractices) total += practice.length;
  }
  return total;
}

/** The code units JavaScript's `\s` matches (and `String.prototype.trim` removes). */
function isWhitespace(code: number): boolean {
  if (code <= 0x20) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  if (code < 0xa0) return false;
  return (
    code === 0xa0 || code === 0x1680 || (code >= 0x2000 && code <= 0x200a) || code === 0x2028 || code === 0x2029 ||
    code === 0x202f || code === 0x205f || code === 0x3000 || code === 0xfeff
  );
}

/** `text` with every run of whitespace as one space and the ends trimmed; backticks removed when `dropBackticks`. */
function collapseWhitespace(text: string, dropBackticks: boolean): string {
  let out = "";
  let pendingSpace = false;
  let start = 0;
  // Copies runs of ordinary characters with one slice each, so the loop stays linear.
  for (let index = 0; index <= text.length; index++) {
    const code = index < text.length ? text.charCodeAt(index) : -1;
    const whitespace = code >= 0 && isWhitespace(code);
    const backtick = dropBackticks && code === 0x60;
    if (code >= 0 && !whitespace && !backtick) continue;
    if (index > start) {
      if (pendingSpace && out !== "") out += " ";
      out += text.slice(start, index);
      pendingSpace = false;
    }
    if (whitespace) pendingSpace = true;
    start = index + 1;
  }
  return out;
}

/**
 * The form two best practices are compared in: backticks removed, whitespace runs as one space,
 * ends trimmed, lower-cased, one final "." dropped (and the space before it). One pass, no regex.
 */
export function normalizePractice(text: string): string {
  let normalized = collapseWhitespace(text, true).toLowerCase();
  if (normalized.endsWith(".")) normalized = normalized.slice(0, -1).trimEnd();
  return normalized;
}

/**
 * For each needle, whether it occurs in `haystack`: one Aho–Corasick automaton over the needles,
 * one scan of the haystack. Time is linear in the haystack plus the needles' length (each
 * node's chain of shorter matches is walked at most once), whatever the texts.
 */
export function occursIn(haystack: string, needles: readonly string[]): boolean[] {
  const found = needles.map(() => false);
  // Node 0 is the root; edges in one map keyed by node × 65536 + code unit.
  const edges = new Map<number, number>();
  const ending: number[] = [-1];
  const repeats: [number, number][] = [];
  for (const [needleIndex, needle] of needles.entries()) {
    if (needle === "") {
      found[needleIndex] = true;
      continue;
    }
    let node = 0;
    for (let index = 0; index < needle.length; index++) {
      const key = node * 65536 + needle.charCodeAt(index);
      let next = edges.get(key);
      if (next === undefined) {
        next = ending.length;
        ending.push(-1);
        edges.set(key, next);
      }
      node = next;
    }
    // A repeated needle shares the node of its first occurrence and its answer.
    if (ending[node] === -1) ending[node] = needleIndex;
    else repeats.push([needleIndex, ending[node]!]);
  }
  if (ending.length === 1) return found;
  const nodeCount = ending.length;
  const children: [number, number][][] = Array.from({ length: nodeCount }, () => []);
  for (const [key, child] of edges) children[Math.floor(key / 65536)]!.push([key % 65536, child]);
  const fail = new Int32Array(nodeCount);
  // The nearest node on the failure chain (itself excluded) at which a needle ends; -1 = none.
  const output = new Int32Array(nodeCount).fill(-1);
  const queue: number[] = [];
  for (const [, child] of children[0]!) queue.push(child);
  for (let head = 0; head < queue.length; head++) {
    const node = queue[head]!;
    for (const [code, child] of children[node]!) {
      let state = fail[node]!;
      let target = edges.get(state * 65536 + code);
      while (target === undefined && state !== 0) {
        state = fail[state]!;
        target = edges.get(state * 65536 + code);
      }
      fail[child] = target ?? 0;
      const failNode = fail[child]!;
      output[child] = ending[failNode] !== -1 ? failNode : output[failNode]!;
      queue.push(child);
    }
  }
  const visited = new Uint8Array(nodeCount);
  let state = 0;
  for (let index = 0; index < haystack.length; index++) {
    const code = haystack.charCodeAt(index);
    let next = edges.get(state * 65536 + code);
    while (next === undefined && state !== 0) {
      state = fail[state]!;
      next = edges.get(state * 65536 + code);
    }
    state = next ?? 0;
    for (let node = ending[state] !== -1 ? state : output[state]!; node > 0 && visited[node] === 0; node = output[node]!) {
      visited[node] = 1;
      found[ending[node]!] = true;
    }
  }
  for (const [repeat, first] of repeats) found[repeat] = found[first]!;
  return found;
}

/** The practices an entry shows: in order, repeats and those the description already says left out. */
function entryPractices(definition: ToolDefinition): string[] {
  const seen = new Set<string>();
  const kept: { shown: string; normalized: string }[] = [];
  for (const practice of definition.bestPractices) {
    const normalized = normalizePractice(practice);
    if (normalized === "" || seen.has(normalized)) continue;
    seen.add(normalized);
    kept.push({ shown: collapseWhitespace(practice, false), normalized });
  }
  if (kept.length === 0) return [];
  const description = normalizePractice(definition.description);
  const inDescription = occursIn(description, kept.map((practice) => practice.normalized));
  return kept.filter((_, index) => !inDescription[index]).map((practice) => practice.shown);
}

/**
 * The tool guidance block's text, or undefined when no definition has a name. Sorted by name, so
 * the same definitions in any order give the same text; two definitions with one name are
 * INVALID_ARGUMENT (which one to show would depend on their order).
 */
export function toolGuidanceText(definitions: readonly ToolDefinition[], path = "tool_definitions"): string | undefined {
  const named = new Map<string, number>();
  definitions.forEach((definition, index) => {
    if (definition.name.trim() === "") return;
    const earlier = named.get(definition.name);
    if (earlier !== undefined) {
      throw new ConnectError(
        `${path}[${index}].name: duplicate tool name "${definition.name}" (also ${path}[${earlier}]); the tool guidance block needs one definition per name`,
        Code.InvalidArgument,
      );
    }
    named.set(definition.name, index);
  });
  if (named.size === 0) return undefined;
  const names = [...named.keys()].sort((left, right) => (left < right ? -1 : left > right ? 1 : 0));
  const lines = [guidanceOpen, guidanceIntro];
  for (const name of names) {
    const definition = definitions[named.get(name)!]!;
    lines.push("", `Tool: ${name}`);
    const description = collapseWhitespace(definition.description, false);
    if (description !== "") lines.push(`Use it for: ${description}`);
    const practices = entryPractices(definition);
    if (practices.length > 0) {
      lines.push("Practices:");
      practices.forEach((practice, index) => lines.push(`${index + 1}. ${practice}`));
    }
    if (definition.promptInjection.trim() !== "") lines.push(definition.promptInjection);
  }
  lines.push(guidanceClose);
  return lines.join("\n");
}

/**
 * `text` without any "<tool_call_rules>…</tool_call_rules>" span, the pieces around each span
 * joined by one blank line; undefined when there is none. An opening tag without a closing one
 * is left alone. `indexOf` with fixed needles: linear.
 */
export function withoutToolCallRules(text: string): string | undefined {
  const pieces: string[] = [];
  let from = 0;
  for (;;) {
    const open = text.indexOf(rulesOpen, from);
    if (open < 0) break;
    const close = text.indexOf(rulesClose, open + rulesOpen.length);
    if (close < 0) break;
    pieces.push(text.slice(from, open));
    from = close + rulesClose.length;
  }
  if (pieces.length === 0) return undefined;
  pieces.push(text.slice(from));
  const last = pieces.length - 1;
  return pieces
    .map((piece, index) => (index === 0 ? piece.trimEnd() : index === last ? piece.trimStart() : piece.trim()))
    .filter((piece) => piece !== "")
    .join("\n\n");
}

function blockMessage(id: string, text: string): Message {
  return create(MessageSchema, { id, role: Role.SYSTEM, parts: [create(PartSchema, { kind: { case: "text", value: { text } } })] });
}

/** A system message with its rules blocks taken out: unchanged, changed, or nothing left (undefined). */
function withoutRulesBlocks(message: Message, work: CompileWork): Message | "unchanged" | undefined {
  let changed = false;
  const parts: Part[] = [];
  for (const part of message.parts) {
    const kind = part.kind;
    const text = kind.case === "text" ? withoutToolCallRules(kind.value.text) : undefined;
    if (kind.case !== "text" || text === undefined) {
      parts.push(part);
      continue;
    }
    changed = true;
    work.textAllowance.charge(text.length, `system_prompt.tool_call_rules (message "${message.id}")`);
    // Messages are never mutated: a new part (and text) in place of the old one, other fields kept.
    if (text !== "") parts.push({ ...part, kind: { case: "text", value: { ...kind.value, text } } });
  }
  if (!changed) return "unchanged";
  if (parts.length === 0) return undefined;
  return { ...message, parts };
}

/**
 * Stage 5: the system-prompt blocks `request.system_prompt` asks for (none = nothing changes).
 * The tool guidance block goes first in the system segment, the rules block last; with the rules
 * block on, copies of it in the system messages' text are taken out for this compile (FORMATTED,
 * or DROPPED when nothing is left; the stored message persists unchanged).
 */
export function applySystemPrompt(work: CompileWork): void {
  const options = work.request.systemPrompt;
  if (!options || (!options.toolGuidance && !options.toolCallRules)) return;
  let system = work.segments.system;
  if (options.toolCallRules) {
    const kept: Message[] = [];
    for (const message of system) {
      const changed = withoutRulesBlocks(message, work);
      if (changed === "unchanged") {
        kept.push(message);
      } else if (changed === undefined) {
        setRecord(work, message.id, TransformationAction.DROPPED, TransformationReason.SYSTEM_PROMPT_ASSEMBLY, Segment.SYSTEM);
      } else {
        kept.push(changed);
        setRecord(work, message.id, TransformationAction.FORMATTED, TransformationReason.SYSTEM_PROMPT_ASSEMBLY, Segment.SYSTEM);
      }
    }
    work.textAllowance.charge(toolCallRulesText.length, "system_prompt.tool_call_rules");
    system = [...kept, introduce(work, blockMessage(toolCallRulesId, toolCallRulesText))];
  }
  if (options.toolGuidance) {
    const text = toolGuidanceText(work.toolDefinitions);
    if (text !== undefined) {
      work.textAllowance.charge(text.length, "system_prompt.tool_guidance");
      system = [introduce(work, blockMessage(toolGuidanceId, text)), ...system];
    }
  }
  work.segments = { ...work.segments, system };
}

function introduce(work: CompileWork, message: Message): Message {
  work.introduced.push(create(IntroducedMessageSchema, { segment: Segment.SYSTEM, message }));
  setRecord(work, message.id, TransformationAction.PASSED, TransformationReason.SYSTEM_PROMPT_ASSEMBLY, Segment.SYSTEM);
  return message;
}
