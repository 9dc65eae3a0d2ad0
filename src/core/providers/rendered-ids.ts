import { createHash } from "node:crypto";

/**
 * Tool-call ids as a provider takes them. Stored ids come from every framework and
 * OpenAI-compatible server (`call/1@373`, `functions.get_weather:0`, 48-character vLLM ids), and
 * one conversation may reuse an id in every round (`call_0` each turn); providers limit the
 * alphabet and length and want every id once per body. The table (docs/provider-ids.md):
 *
 * | provider | field | limit |
 * |---|---|---|
 * | OpenAI Chat | `tool_calls[].id`, `tool_call_id` | at most 40 characters |
 * | OpenAI Responses | `call_id` | at most 64 characters |
 * | Anthropic | `tool_use.id`, `tool_use_id` | `^[a-zA-Z0-9_-]+$`; 64 kept as the length |
 * | Gemini | `functionCall.id`, `functionResponse.id` | none documented; 64 kept |
 *
 * All four get the alphabet `[a-zA-Z0-9_-]` (the strictest, so one stored id reads alike
 * everywhere) and their own length.
 */
export interface CallIdRule {
  maxLength: number;
}

export const callIdRules = {
  openai_chat: { maxLength: 40 },
  openai_responses: { maxLength: 64 },
  anthropic: { maxLength: 64 },
  gemini: { maxLength: 64 },
} as const satisfies Record<string, CallIdRule>;

const idAlphabet = /^[a-zA-Z0-9_-]+$/;
/** Hex digits of the hash suffix: 48 bits, so two different stored ids meet by chance about once in 2^24 pairs per body. */
const suffixLength = 12;

function hashSuffix(...values: string[]): string {
  return createHash("sha256").update(values.join("\u0000")).digest("hex").slice(0, suffixLength);
}

/** `text` cut to leave room for `_` and the suffix, then the suffix. */
function withSuffix(text: string, suffix: string, maxLength: number): string {
  return `${text.slice(0, maxLength - suffix.length - 1)}_${suffix}`;
}

/**
 * The form of one stored id on its own: the id itself when the provider takes it, else its
 * characters outside the alphabet replaced by `_`, cut to the length, and a hash of the stored id
 * appended (so two ids that differ only in replaced characters stay apart). A pure function of
 * the stored id: every compile renders it the same way.
 */
export function acceptedCallId(stored: string, rule: CallIdRule): string {
  if (stored.length <= rule.maxLength && idAlphabet.test(stored)) return stored;
  const cleaned = stored.replace(/[^a-zA-Z0-9_-]/g, "_");
  return withSuffix(cleaned === "" ? "call" : cleaned, hashSuffix(stored), rule.maxLength);
}

/** One renamed id of a body: which call, stored as what, sent as what. */
export interface RenamedCallId {
  messageId: string;
  stored: string;
  rendered: string;
}

/**
 * The ids of one rendered body, assigned in body order. A call gets `acceptedCallId` of its stored
 * id unless an earlier call of the body already has that form; then (the same id reused in a later
 * round, or two stored ids with one form) it gets the form with a hash of its assistant message id
 * and stored id. Because only earlier calls decide, appending to a conversation never renames
 * what an earlier compile sent: cache prefixes hold. A result takes the id of the latest call with
 * its stored id before it, which is the call of its own round (a round's results follow it).
 *
 * Renderer and validator each walk the payload with one of these, so the validator checks the
 * body against the same assignment.
 */
export class CallIdAssignment {
  private readonly used = new Set<string>();
  /** Stored id → rendered id of the latest call with it. */
  private readonly latest = new Map<string, string>();
  readonly renamed: RenamedCallId[] = [];

  constructor(private readonly rule: CallIdRule) {}

  /** The id of a call of assistant message `messageId`, reserved for the rest of the body. */
  call(messageId: string, stored: string): string {
    let rendered = acceptedCallId(stored, this.rule);
    for (let attempt = 0; this.used.has(rendered); attempt++) {
      const salt = attempt === 0 ? [messageId, stored] : [messageId, stored, String(attempt)];
      rendered = withSuffix(acceptedCallId(stored, this.rule), hashSuffix(...salt), this.rule.maxLength);
    }
    this.used.add(rendered);
    this.latest.set(stored, rendered);
    if (rendered !== stored) this.renamed.push({ messageId, stored, rendered });
    return rendered;
  }

  /** The id a result answering `stored` carries: its call's. */
  result(stored: string): string {
    return this.latest.get(stored) ?? acceptedCallId(stored, this.rule);
  }
}

/** OpenAI Chat's `name` of a message: `^[a-zA-Z0-9_-]+$`, at most 64 characters. */
const chatNameMaxLength = 64;

/**
 * A sender name as OpenAI Chat takes it: unchanged when it fits the pattern, else cleaned like an
 * id with a hash of the stored name (so "Ana María" and "Ana Maria" stay two speakers). Pure: the
 * same name renders the same way in every body.
 */
export function acceptedChatName(stored: string): string {
  if (stored.length <= chatNameMaxLength && idAlphabet.test(stored)) return stored;
  const cleaned = stored.replace(/[^a-zA-Z0-9_-]/g, "_");
  return withSuffix(cleaned === "" ? "name" : cleaned, hashSuffix(stored), chatNameMaxLength);
}

/**
 * True when `id` is a Responses function-call item id that can be sent back: one the API issued
 * (`fc_…`, the alphabet, at most 64). Frameworks store placeholders there for items of other
 * models (the Agents SDK's `__fake_id__`), which the API rejects.
 */
export function isSendableCallItemId(id: string): boolean {
  return id.length <= 64 && /^fc_[a-zA-Z0-9_-]+$/.test(id);
}
