import { hash } from "node:crypto";
import type { CacheImpact, CompiledPayload, CompileRequest } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { ToolDefinition } from "#gen/contextd/v1/state_pb";
import { messageContentKey } from "../model/content-hash.js";
import { messagesInRenderingOrder } from "../providers/rendering-order.js";
import type { TokenCountCache } from "../tokens/token-count-cache.js";
import type { TokenEstimator } from "../tokens/estimator.js";

/**
 * Why it exists: editing a context saves tokens but can cost more than it saves when it moves the
 * prefix a provider caches — a cache write is priced above a plain input token, a cache read far
 * below it. No peer tells its caller what a compile will cost in cache misses; this says it, per
 * compile, against the previous compile of the same conversation.
 */

/** What is remembered of one compile: its version and a digest of each entry in rendering order. */
export interface CompiledPrefix {
  version: bigint;
  /** One short digest per entry: the tool definitions (when any), then every message. */
  digests: readonly string[];
  /**
   * Where history starts in `digests` and the id of its first message (absent when the payload had
   * no history): what the minimum-gain rule (`min-trim-gain.ts`) finds the cached prompt by.
   */
  history?: { entry: number; firstId: string };
}

/**
 * Where the previous compile of each conversation is remembered (bounded by whoever supplies it),
 * under a key the compile makes of the conversation, the render provider and the model.
 */
export interface CompileMemory {
  previous(key: string): CompiledPrefix | undefined;
  remember(key: string, prefix: CompiledPrefix): void;
}

/**
 * The key a compile is remembered under: per provider and model, as providers cache (an
 * inspector's or a side model's compile of the same conversation is not the previous compile of
 * the agent's model).
 */
export function compileMemoryKey(request: CompileRequest): string {
  return JSON.stringify([request.conversationId, request.render?.provider ?? 0, request.render?.model ?? ""]);
}

/** 96 bits of SHA-256 in base64: two different messages agreeing on it is not a concern. */
const digest = (text: string) => hash("sha256", text, "base64").slice(0, 16);
const messageDigest = (message: Message) => digest(messageContentKey(message));
const toolDefinitionsDigest = (definitions: readonly ToolDefinition[]) =>
  digest(definitions.map((definition) => `${definition.name}\u0001${definition.description}\u0001${definition.parameters}`).join("\u0002"));

/**
 * The payload's entries in rendering order with their estimated tokens, compared with `previous`.
 * Linear in the payload; counts come from the count cache the budget filled.
 */
export function cacheImpact(payload: CompiledPayload, estimator: TokenEstimator, tokenCounts: TokenCountCache, version: bigint, previous: CompiledPrefix | undefined): { impact: CacheImpact; prefix: CompiledPrefix } {
  const digests: string[] = [];
  const tokens: number[] = [];
  if (payload.toolDefinitions.length > 0) {
    digests.push(toolDefinitionsDigest(payload.toolDefinitions));
    tokens.push(tokenCounts.countToolDefinitions(estimator, payload.toolDefinitions));
  }
  const historyEntry = digests.length + payload.system.length;
  for (const { message } of messagesInRenderingOrder(payload)) {
    digests.push(messageDigest(message));
    tokens.push(tokenCounts.count(estimator, message));
  }
  let common = 0;
  if (previous) while (common < digests.length && common < previous.digests.length && digests[common] === previous.digests[common]) common++;
  let unchanged = 0;
  let rewritten = 0;
  tokens.forEach((count, index) => (index < common ? (unchanged += count) : (rewritten += count)));
  return {
    impact: {
      $typeName: "contextd.v1.CacheImpact",
      previousVersion: previous?.version ?? 0n,
      unchangedPrefixTokens: BigInt(unchanged),
      rewrittenTokens: BigInt(rewritten),
      unchangedPrefixMessages: BigInt(common),
      trimSteps: [],
    },
    prefix: { version, digests, history: payload.history.length > 0 ? { entry: historyEntry, firstId: payload.history[0]!.id } : undefined },
  };
}

/** Where a walk over history stopped matching the cached prompt, and the tokens it matched. */
export interface CachedMatch {
  /** The index of the first message that differs (or is past the cached prompt's end). */
  end: number;
  tokens: number;
}

/**
 * The previous compile's prompt as a trim step sees it: what a version of this compile's history
 * keeps of it. Made only when everything before history (tool definitions, system) is unchanged:
 * otherwise nothing of history is cached and no step costs a cache write. Digests are made once
 * per message object, for this compile only.
 */
export class CachedPrompt {
  private readonly digests = new Map<Message, string>();

  private constructor(private readonly previous: CompiledPrefix & { history: { entry: number; firstId: string } }) {}

  /** The cached prompt of `previous`, or undefined when this compile's head differs from it. */
  static of(previous: CompiledPrefix | undefined, toolDefinitions: readonly ToolDefinition[], system: readonly Message[]): CachedPrompt | undefined {
    const history = previous?.history;
    if (!previous || !history) return undefined;
    const head: string[] = toolDefinitions.length > 0 ? [toolDefinitionsDigest(toolDefinitions)] : [];
    for (const message of system) head.push(messageDigest(message));
    if (head.length !== history.entry || head.some((value, index) => value !== previous.digests[index])) return undefined;
    return new CachedPrompt({ ...previous, history });
  }

  /** The index in `history` of the message the cached prompt's history started with, or -1. */
  historyStartIn(history: readonly Message[]): number {
    const id = this.previous.history.firstId;
    for (let index = 0; index < history.length; index++) if (history[index]!.id === id) return index;
    return -1;
  }

  /**
   * Compares `messages[from..]` with the cached prompt's history, message by message, and sums
   * `counts` of those that match until the first that does not. Linear in what it walks.
   */
  match(messages: readonly Message[], counts: readonly number[], from: number): CachedMatch {
    const { digests, history } = this.previous;
    let tokens = 0;
    let index = from;
    for (; index < messages.length; index++) {
      const entry = history.entry + index - from;
      if (entry >= digests.length || this.digestOf(messages[index]!) !== digests[entry]) break;
      tokens += counts[index]!;
    }
    return { end: index, tokens };
  }

  private digestOf(message: Message): string {
    let known = this.digests.get(message);
    if (known === undefined) this.digests.set(message, (known = messageDigest(message)));
    return known;
  }
}
