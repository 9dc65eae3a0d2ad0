import { create } from "@bufbuild/protobuf";
import { BudgetStrategy, CompileRequestSchema, EstimatorKind, HistoryStart, type CompileRequest } from "#gen/contextd/v1/compile_pb";
import { MessageSchema, PartSchema, Provider, Role, type Message, type Part } from "#gen/contextd/v1/message_pb";
import { ConversationStateSchema, type ConversationState } from "#gen/contextd/v1/state_pb";
import { call, definition, image, message, reasoning, result, text } from "../providers/build-messages.js";

/**
 * A seeded generator of the conversations users store (issue 27): parallel calls, tool errors,
 * results with images, images and files of several types by URL and inline, reasoning with
 * signatures from each provider, summaries at the head (assistant and system role), pending rounds
 * and user messages, current turns, budgets that trim (with HISTORY_START_ANY too), tool-result and
 * reasoning clearing, and, in one conversation of ten each, tool-call ids and sender names in the
 * shapes other frameworks produce, and ids reused in every round.
 */

/** mulberry32: a tiny seeded PRNG, so every failure reproduces from its seed. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One generated conversation: what a stateless compile sends, and the same as stored state. */
export interface GeneratedConversation {
  seed: number;
  /** The traits drawn, for failure messages. */
  traits: string[];
  /** A stateless compile request (segments in the request), without `render`. */
  stateless: CompileRequest;
  /** The same conversation as a stateful compile: the request without segments, and the stored state. */
  stateful: { request: CompileRequest; stored: ConversationState };
}

const tools = ["search", "read_file", "get_weather"];
const png = new Uint8Array([137, 80, 78, 71, 13, 10, 26, 10]);
const pdf = new Uint8Array([37, 80, 68, 70, 45, 49, 46, 55]);
/** Call ids as other frameworks and OpenAI-compatible servers write them. */
const foreignIds = ["call/1@373", "functions.get_weather:0", "toolu_vrtx_01.abc", "tool call 7", "chatcmpl-tool-0123456789abcdef0123456789abcdef01"];
const foreignNames = ["Ana María", "bob.smith@example.com", "Zoë", "agent 007", "x".repeat(70)];

const file = (fields: { mimeType: string; data?: Uint8Array; uri?: string; name?: string }): Part => create(PartSchema, { kind: { case: "file", value: fields } });

export function generateConversation(seed: number): GeneratedConversation {
  const random = prng(seed);
  const chance = (p: number) => random() < p;
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const traits = new Set<string>();
  let counter = 0;
  const id = (prefix: string) => `${prefix}${seed}_${counter++}`;
  // Signatures are opaque base64 as the providers issue them (Gemini's types decode them).
  const signature = (prefix: string) => Buffer.from(id(prefix)).toString("base64");

  const idStyle = seed % 10 === 3 ? "foreign" : seed % 10 === 7 ? "reused" : "plain";
  if (idStyle !== "plain") traits.add(`ids:${idStyle}`);
  const foreignSenders = seed % 10 === 5;
  if (foreignSenders) traits.add("names:foreign");
  const reasoningFrom = pick([Provider.OPENAI_RESPONSES, Provider.ANTHROPIC_MESSAGES, Provider.GEMINI, Provider.UNSPECIFIED]);

  const userParts = (turn: number): Part[] => {
    const parts: Part[] = [text(`question ${turn}`)];
    if (chance(0.12)) parts.push(image({ url: "https://example.com/photo.png" })), traits.add("image:url");
    if (chance(0.12)) parts.push(image({ data: png, mimeType: pick(["image/png", "image/jpeg", "image/webp"]) })), traits.add("image:inline");
    if (chance(0.06)) parts.push(file({ mimeType: "application/pdf", uri: "https://example.com/report.pdf", name: "report.pdf" })), traits.add("file:pdf-url");
    if (chance(0.08)) parts.push(file({ mimeType: "application/pdf", data: pdf, ...(chance(0.5) ? { name: "scan.pdf" } : {}) })), traits.add("file:pdf-inline");
    if (chance(0.08)) parts.push(file({ mimeType: "text/plain", data: new TextEncoder().encode("plain notes\n"), ...(chance(0.5) ? { name: "notes.txt" } : {}) })), traits.add("file:text-inline");
    if (chance(0.03)) parts.push(file({ mimeType: "text/csv", data: new TextEncoder().encode("a,b\n1,2\n") })), traits.add("file:csv-inline");
    return parts;
  };
  const sender = () => (foreignSenders && chance(0.6) ? pick(foreignNames) : chance(0.1) ? "alice" : "");
  const callId = (round: number, index: number) => {
    if (idStyle === "reused") return `call_${index}`;
    if (idStyle === "foreign" && chance(0.7)) return `${pick(foreignIds)}${round}${index}`;
    return id("call_");
  };

  const history: Message[] = [];
  // A summary at the head (a compact delta's, or a SUMMARIZE compile's), in either role.
  if (chance(0.15)) {
    const role = chance(0.5) ? Role.ASSISTANT : Role.SYSTEM;
    history.push(create(MessageSchema, { id: id("summary"), role, parts: [text("Summary: the user is planning a trip.")], provenance: { kind: { case: "summary", value: { coveredMessageIds: ["old1", "old2"] } } } }));
    traits.add(`summary:${Role[role]}`);
  }
  // History that starts on an assistant greeting, as chat UIs store it.
  if (chance(0.05)) history.push(message(id("greet"), Role.ASSISTANT, [text("Hi, how can I help?")])), traits.add("greeting");
  let round = 0;
  const pushRound = (target: Message[], open: boolean) => {
    const calls = 1 + Math.floor(random() * 3);
    if (calls > 1) traits.add("parallel");
    const parts: Part[] = [];
    if (reasoningFrom !== Provider.UNSPECIFIED && chance(0.6)) {
      parts.push(reasoning(reasoningFrom, { text: chance(0.5) ? "thinking it over" : "", signature: reasoningFrom === Provider.OPENAI_RESPONSES ? "" : signature("sig"), itemId: reasoningFrom === Provider.OPENAI_RESPONSES ? id("rs_") : "", redactedData: reasoningFrom === Provider.OPENAI_RESPONSES ? id("enc") : "" }));
      traits.add(`reasoning:${Provider[reasoningFrom]}`);
    }
    if (chance(0.3)) parts.push(text("Let me check.", reasoningFrom === Provider.GEMINI && chance(0.5) ? signature("tsig") : ""));
    const ids: Array<{ id: string; name: string }> = [];
    for (let index = 0; index < calls; index++) {
      const entry = { id: callId(round, index), name: pick(tools) };
      ids.push(entry);
      parts.push(call(entry.id, entry.name, JSON.stringify({ q: `x${index}` }), { signature: reasoningFrom === Provider.GEMINI && index === 0 ? signature("gsig") : "", itemId: reasoningFrom === Provider.OPENAI_RESPONSES ? id("fc_") : "" }));
    }
    round++;
    target.push(message(id("a"), Role.ASSISTANT, parts));
    const answered = open ? ids.slice(0, Math.floor(random() * ids.length)) : ids;
    const results = answered.map((entry) => {
      const isError = chance(0.15);
      if (isError) traits.add("tool-error");
      const media = chance(0.15) ? [image({ data: png, mimeType: "image/png" })] : [];
      if (media.length > 0) traits.add("result-image");
      return result(entry.id, chance(0.5) ? entry.name : "", isError ? { text: "failed: timeout" } : chance(0.5) ? { text: "ok" } : { data: '{"value": 1}' }, { isError, contentParts: media });
    });
    if (results.length === 0) return;
    if (chance(0.5)) target.push(message(id("t"), Role.TOOL, results));
    else for (const part of results) target.push(message(id("t"), Role.TOOL, [part]));
  };

  const turns = chance(0.08) ? 0 : 1 + Math.floor(random() * 7);
  for (let turn = 0; turn < turns; turn++) {
    history.push(message(id("u"), Role.USER, userParts(turn), { senderName: sender() }));
    const rounds = Math.floor(random() * 3);
    for (let index = 0; index < rounds; index++) pushRound(history, false);
    if (chance(0.75)) {
      // A few answers end in whitespace: as the last turn they are a prefill.
      history.push(message(id("a"), Role.ASSISTANT, [text(chance(0.1) ? "Sure, here it is: " : `answer ${turn}`)], { senderName: foreignSenders && chance(0.3) ? "Asistente Ñ" : "" }));
    }
  }
  if (turns === 0) traits.add("empty-history");
  insertProviderCompaction(seed, history, traits);

  // Pending: a round in progress, or the user's new message; then perhaps a current turn.
  const pending: Message[] = [];
  const pendingKind = pick(["none", "none", "round", "user", "open-round"]);
  if (pendingKind === "round") pushRound(pending, false), traits.add("pending:round");
  if (pendingKind === "open-round") pushRound(pending, true), traits.add("pending:open-round");
  if (pendingKind === "user") pending.push(message(id("p"), Role.USER, [text("and one more thing")])), traits.add("pending:user");
  const withTurn = pendingKind !== "open-round" && chance(0.4);
  if (withTurn) traits.add("current-turn");

  const system: Message[] = [message(id("s"), Role.SYSTEM, [text("You are a careful assistant.")], chance(0.3) ? { cacheTtl: "5m" } : {})];
  if (chance(0.3)) system.push(message(id("d"), Role.DEVELOPER, [text("Answer in English.")]));
  const toolDefinitions = tools.map((name) => definition(name, `${name} tool`, { type: "object", properties: { q: { type: "string" } } }));

  // Budgets that trim: a few messages' worth, sometimes with HISTORY_START_ANY or clearing.
  const budget: Record<string, unknown> = {};
  if (chance(0.45)) {
    Object.assign(budget, { maxTokens: BigInt(40 + Math.floor(random() * 120)), estimator: { kind: EstimatorKind.FIXED, fixedPerMessage: 10n }, strategy: BudgetStrategy.DROP_HEAD });
    traits.add("budget");
    if (chance(0.25)) (budget["historyStart"] = HistoryStart.ANY), traits.add("history-start-any");
    if (chance(0.2)) (budget["trimLatestUserMessage"] = true), traits.add("trim-latest-user");
    if (chance(0.2)) (budget["toolResultClearing"] = { triggerTokens: 1n, keepRecent: 1 }), traits.add("tool-result-clearing");
    if (chance(0.2)) (budget["reasoningClearing"] = { keepRecentTurns: 1 }), traits.add("reasoning-clearing");
  }
  const common = {
    pending,
    ...(withTurn ? { currentTurn: { raw: message(id("now"), Role.USER, [text("what now?")]) } } : {}),
    ...(Object.keys(budget).length > 0 ? { budget } : {}),
  };
  const stateless = create(CompileRequestSchema, { ...common, system: { messages: system }, history: { messages: history }, toolDefinitions: { toolDefinitions } });
  const stored = create(ConversationStateSchema, { conversationId: `conv-${seed}`, version: 1n, system, history, toolDefinitions });
  const statefulRequest = create(CompileRequestSchema, { ...common, conversationId: `conv-${seed}` });
  return { seed, traits: [...traits], stateless, stateful: { request: statefulRequest, stored } };
}

/**
 * In about one conversation of eight, an answer that compacted the turns before it: an Anthropic
 * compaction block or a Responses compaction item heading an assistant message that goes before a
 * user turn, and in half of those a contextd summary at the head covering every message before it
 * (so the other providers render the summary instead of refusing). Its own PRNG: the other traits
 * of every seed stay as they were.
 */
function insertProviderCompaction(seed: number, history: Message[], traits: Set<string>): void {
  const random = prng(seed * 104_729);
  if (random() >= 0.125) return;
  const userTurns = history.flatMap((message, index) => (message.role === Role.USER && index > 0 ? [index] : []));
  if (userTurns.length === 0) return;
  const at = userTurns[Math.floor(random() * userTurns.length)]!;
  const anthropic = random() < 0.5;
  const compaction = create(PartSchema, {
    kind: {
      case: "providerCompaction",
      value: anthropic
        ? { provider: Provider.ANTHROPIC_MESSAGES, summary: "Summary of the turns so far.", encryptedContent: Buffer.from(`enc${seed}`).toString("base64"), signature: Buffer.from(`sig${seed}`).toString("base64"), ...(random() < 0.5 ? { toolChangesJson: "[]" } : {}) }
        : { provider: Provider.OPENAI_RESPONSES, itemId: `cmp_${seed}`, encryptedContent: `gAAAAB${seed}` },
    },
  });
  history.splice(at, 0, message(`cmp${seed}`, Role.ASSISTANT, [compaction, text("Continuing from the compacted context.")]));
  traits.add(`compaction:${anthropic ? "anthropic" : "openai_responses"}`);
  if (random() < 0.5) {
    const covered = history.slice(0, at).flatMap((entry) => (entry.provenance?.kind.case === "summary" ? entry.provenance.kind.value.coveredMessageIds : [entry.id]));
    history.unshift(create(MessageSchema, { id: `summary-cmp${seed}`, role: Role.USER, parts: [text("Summary: what happened before the compaction.")], provenance: { kind: { case: "summary", value: { coveredMessageIds: covered } } } }));
    traits.add("compaction:covered");
  }
}

/** Whether a seed's renders leave unsupported media out (half do; the other half refuse them). */
export function dropsUnsupportedMedia(seed: number): boolean {
  return prng(seed * 7919)() < 0.5;
}
