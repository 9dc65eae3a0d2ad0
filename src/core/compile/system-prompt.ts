import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { IntroducedMessageSchema, TransformationAction, TransformationReason } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { Segment, type ToolDefinition } from "#gen/contextd/v1/state_pb";
import type { DeadlineCheck } from "./deadline.js";
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

/** Haystack × total needle length up to which `occursIn` searches with `includes`. */
const naiveSearchBound = 1 << 16;

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
 * node's chain of shorter matches is walked at most once), whatever the texts. A needle longer
 * than the haystack cannot occur and is not added.
 *
 * The trie is flat typed arrays: most nodes have one child (a practice is a chain), kept in
 * `firstCode`/`firstChild`; a node that branches keeps its other children in a Map of its own.
 * (One Map keyed by node × 65536 + code took 0.4 µs per node: its keys outgrow small integers.)
 */
export function occursIn(haystack: string, needles: readonly string[]): boolean[] {
  const found = needles.map((needle) => needle === "");
  let capacity = 1;
  for (const needle of needles) if (needle.length <= haystack.length) capacity += needle.length;
  if (capacity === 1) return found;
  // Small inputs: `includes` compares at most haystack × needle characters per needle, so below
  // this product its worst case is a constant, and it skips building the automaton (which cost
  // 40 µs per tool of 10 practices, most of the assembly's time).
  if (haystack.length * (capacity - 1) <= naiveSearchBound) {
    return needles.map((needle, index) => found[index]! || (needle.length <= haystack.length && haystack.includes(needle)));
  }
  const firstCode = new Int32Array(capacity).fill(-1);
  const firstChild = new Int32Array(capacity);
  const more: (Map<number, number> | undefined)[] = [];
  // The needle that ends at a node (-1 = none); a repeated needle shares its first one's answer.
  const ending = new Int32Array(capacity).fill(-1);
  const repeats: [number, number][] = [];
  let nodeCount = 1;
  const child = (node: number, code: number): number => {
    if (firstCode[node] === code) return firstChild[node]!;
    return more[node]?.get(code) ?? -1;
  };
  for (const [needleIndex, needle] of needles.entries()) {
    if (needle === "" || needle.length > haystack.length) continue;
    let node = 0;
    for (let index = 0; index < needle.length; index++) {
      const code = needle.charCodeAt(index);
      let next = child(node, code);
      if (next < 0) {
        next = nodeCount++;
        if (firstCode[node] === -1) {
          firstCode[node] = code;
          firstChild[node] = next;
        } else {
          (more[node] ??= new Map()).set(code, next);
        }
      }
      node = next;
    }
    if (ending[node] === -1) ending[node] = needleIndex;
    else repeats.push([needleIndex, ending[node]!]);
  }
  const fail = new Int32Array(nodeCount);
  // The nearest node on the failure chain (itself excluded) at which a needle ends; -1 = none.
  const output = new Int32Array(nodeCount).fill(-1);
  /** The automaton's move from `state` on `code`, following failure links. */
  const step = (state: number, code: number): number => {
    for (;;) {
      const next = child(state, code);
      if (next >= 0) return next;
      if (state === 0) return 0;
      state = fail[state]!;
    }
  };
  const queue = new Int32Array(nodeCount);
  let tail = 0;
  const visit = (parent: number, code: number, node: number) => {
    // Children of the root fail to the root.
    const failNode = parent === 0 ? 0 : step(fail[parent]!, code);
    fail[node] = failNode;
    output[node] = ending[failNode] !== -1 ? failNode : output[failNode]!;
    queue[tail++] = node;
  };
  for (let head = -1; head < tail; head++) {
    const parent = head < 0 ? 0 : queue[head]!;
    if (firstCode[parent] === -1) continue;
    visit(parent, firstCode[parent]!, firstChild[parent]!);
    const others = more[parent];
    if (others) for (const [code, node] of others) visit(parent, code, node);
  }
  const visited = new Uint8Array(nodeCount);
  let state = 0;
  for (let index = 0; index < haystack.length; index++) {
    state = step(state, haystack.charCodeAt(index));
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
  const steps = toolGuidanceSteps(definitions, path);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * `toolGuidanceText` giving the event loop its turns and checking the deadline between tools
 * (`DeadlineCheck`): 6,000 tools with 20 practices each held the loop 592 ms in one slice, past
 * a 300 ms deadline (issue 29 #10).
 */
export async function toolGuidanceTextPaced(definitions: readonly ToolDefinition[], deadline: DeadlineCheck, stage: string): Promise<string | undefined> {
  const steps = toolGuidanceSteps(definitions, "tool_definitions");
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    if (deadline.check(stage, step.value)) await deadline.pause(stage);
  }
}

/** Builds the block tool by tool, yielding after each the units of work it took (1 + 1 per KiB of its text). */
function* toolGuidanceSteps(definitions: readonly ToolDefinition[], path: string): Generator<number, string | undefined> {
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
  yield 1 + (names.length >> 5);
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
    let characters = definition.description.length + definition.promptInjection.length;
    for (const practice of definition.bestPractices) characters += practice.length;
    yield 1 + (characters >> 10);
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
export async function applySystemPrompt(work: CompileWork): Promise<void> {
  const options = work.request.systemPrompt;
  if (!options || (!options.toolGuidance && !options.toolCallRules)) return;
  let system = work.segments.system;
  const { deadline } = work;
  if (options.toolCallRules) {
    const kept: Message[] = [];
    for (const message of system) {
      if (deadline.check("system_prompt.tool_call_rules")) await deadline.pause("system_prompt.tool_call_rules");
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
    const text = await toolGuidanceTextPaced(work.toolDefinitions, deadline, "system_prompt.tool_guidance");
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
