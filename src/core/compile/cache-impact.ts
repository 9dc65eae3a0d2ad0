import { hash } from "node:crypto";
import type { CacheImpact, CompiledPayload } from "#gen/contextd/v1/compile_pb";
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
}

/**
 * Where the previous compile of each conversation is remembered (bounded by whoever supplies it),
 * under a key the compile makes of the conversation, the render provider and the model.
 */
export interface CompileMemory {
  previous(key: string): CompiledPrefix | undefined;
  remember(key: string, prefix: CompiledPrefix): void;
}

/** 96 bits of SHA-256 in base64: two different messages agreeing on it is not a concern. */
const digest = (text: string) => hash("sha256", text, "base64").slice(0, 16);

/**
 * The payload's entries in rendering order with their estimated tokens, compared with `previous`.
 * Linear in the payload; counts come from the count cache the budget filled.
 */
export function cacheImpact(payload: CompiledPayload, estimator: TokenEstimator, tokenCounts: TokenCountCache, version: bigint, previous: CompiledPrefix | undefined): { impact: CacheImpact; prefix: CompiledPrefix } {
  const digests: string[] = [];
  const tokens: number[] = [];
  if (payload.toolDefinitions.length > 0) {
    digests.push(digest(payload.toolDefinitions.map((definition) => `${definition.name}\u0001${definition.description}\u0001${definition.parameters}`).join("\u0002")));
    tokens.push(tokenCounts.countToolDefinitions(estimator, payload.toolDefinitions));
  }
  for (const { message } of messagesInRenderingOrder(payload)) {
    digests.push(digest(messageContentKey(message)));
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
    },
    prefix: { version, digests },
  };
}
