import { Code, ConnectError } from "@connectrpc/connect";
import { EstimatorKind, TokenizerEncoding, type Estimator } from "#gen/contextd/v1/compile_pb";
import { Provider, type Message, type Part } from "#gen/contextd/v1/message_pb";
import type { ToolDefinition } from "#gen/contextd/v1/state_pb";
import { toolPayloadText } from "../model/payload-text.js";
import { imageTokens, providerFraming } from "./framing.js";
import { runeCount, utf8ByteCount } from "./text-measures.js";
import { loadEncoding, loadPacedEncoding, type PacedTextTokenCounter, type TextTokenCounter } from "./encodings.js";
import { encodingOfModel } from "./model-encodings.js";
import type { DeadlineCheck } from "../compile/deadline.js";


/**
 * Where an estimator's text counters come from when counts are kept across requests: per encoding,
 * a counter that remembers the texts it counted. `TokenCountCache` is the one implementation; the
 * estimator asks only for this, so the two modules do not import each other.
 */
export interface TextCounterSource {
  textCounter(encoding: TokenizerEncoding, count: TextTokenCounter): TextTokenCounter;
  pacedTextCounter(encoding: TokenizerEncoding, countPaced: PacedTextTokenCounter): PacedTextTokenCounter;
}

/**
 * Counts tokens of messages and tool definitions under one estimator configuration (semantics §4).
 * `countMessage` counts the message again (TOKENIZER: through the text counts of the cache it was
 * built with); callers go through `TokenCountCache` so a conversation is counted once, not at
 * every compile.
 */
export interface TokenEstimator {
  readonly kind: EstimatorKind;
  /** Equal for two estimators exactly when they count every message the same; the cache key. */
  readonly cacheKey: string;
  /** Tokens added once per request (TOKENIZER: the provider's reply priming; else 0). */
  readonly perRequest: number;
  countMessage(message: Message): number;
  /**
   * Counts the texts of `message` long enough to take milliseconds (TOKENIZER only), giving the
   * event loop a turn between their chunks when `clock` says one is due, so that `countMessage`
   * finds them counted. Undefined when there is nothing to count that way.
   */
  countLongTexts?(message: Message, clock: DeadlineCheck): Promise<void> | undefined;
  countToolDefinitions(definitions: readonly ToolDefinition[]): number;
}

/**
 * Builds the estimator a request asks for. `renderProvider` picks the TOKENIZER framing when the
 * estimator names no provider. Without an estimator kind (and without chars_per_token),
 * `renderModel` picks TOKENIZER when its encoding is known (`encodingOfModel`), else
 * CHAR_FALLBACK. Loads BPE ranks lazily on first use of an encoding, hence async. With `cache`,
 * TOKENIZER counts each distinct text once across requests; with `deadline`, counting gives up
 * with DEADLINE_EXCEEDED once the call is over. INVALID_ARGUMENT naming the field for numbers
 * outside what the counts can represent (see `minCharsPerToken`, `maxFixedCost`), unknown kinds
 * or encodings.
 */
export async function createEstimator(
  options: Estimator | undefined,
  renderProvider: Provider,
  fieldPath: string,
  cache?: TextCounterSource,
  renderModel = "",
  deadline?: DeadlineCheck,
): Promise<TokenEstimator> {
  const estimator = await configuredEstimator(options, renderProvider, fieldPath, cache, renderModel, deadline);
  if (!deadline || estimator.kind === EstimatorKind.TOKENIZER) return estimator;
  return {
    ...estimator,
    countMessage(message) {
      deadline.check("token counting");
      return estimator.countMessage(message);
    },
  };
}

/**
 * The smallest non-zero chars_per_token: below it a 16 MiB text would count more tokens than
 * int64 and a double can hold exactly (1e-300 gave Infinity and INTERNAL).
 */
export const minCharsPerToken = 0.001;
/** The largest FIXED cost; 10,000 messages of 1,000 parts at this cost still count exactly. */
export const maxFixedCost = 1_000_000_000;

/** A text counter that gives up at the deadline, checked per text and between chunks of a long one. */
function deadlineBound(counter: TextTokenCounter, deadline: DeadlineCheck | undefined): TextTokenCounter {
  if (!deadline) return counter;
  // Weighed by length: a unit per 256 characters, and a whole reading per chunk of a long text, so
  // the clock is read at least every 8 KiB, about every few milliseconds at gpt-tokenizer's slowest
  // (5 µs per character on random letters it has not seen).
  const betweenChunks = () => void deadline.check("token counting", 32);
  return (text: string) => (deadline.check("token counting", 1 + (text.length >> 8)), counter(text, betweenChunks));
}

async function configuredEstimator(
  options: Estimator | undefined,
  renderProvider: Provider,
  fieldPath: string,
  cache: TextCounterSource | undefined,
  renderModel: string,
  deadline: DeadlineCheck | undefined,
): Promise<TokenEstimator> {
  const kind = options?.kind ?? EstimatorKind.UNSPECIFIED;
  // chars_per_token without a kind asks for CHAR_FALLBACK at that ratio, whatever the model.
  if (kind === EstimatorKind.UNSPECIFIED && !options?.charsPerToken) {
    const modelEncoding = encodingOfModel(renderModel);
    if (modelEncoding !== undefined) {
      if (Provider[renderProvider] === undefined) {
        throw new ConnectError(`render.provider: unknown provider ${renderProvider}`, Code.InvalidArgument);
      }
      const count = await loadEncoding(modelEncoding);
      const countPaced = await loadPacedEncoding(modelEncoding);
      return tokenizerEstimator(
        deadlineBound(cache ? cache.textCounter(modelEncoding, count) : count, deadline),
        cache ? cache.pacedTextCounter(modelEncoding, countPaced) : countPaced,
        modelEncoding,
        renderProvider,
      );
    }
  }
  switch (kind) {
    case EstimatorKind.UNSPECIFIED:
    case EstimatorKind.CHAR_FALLBACK: {
      const charsPerToken = options?.charsPerToken ?? 0;
      if (!Number.isFinite(charsPerToken) || charsPerToken < 0 || (charsPerToken > 0 && charsPerToken < minCharsPerToken)) {
        throw new ConnectError(
          `${fieldPath}.chars_per_token must be 0 (= 4) or a finite number of at least ${minCharsPerToken}, got ${charsPerToken}`,
          Code.InvalidArgument,
        );
      }
      return charFallbackEstimator(charsPerToken === 0 ? 4 : charsPerToken);
    }
    case EstimatorKind.CHARS:
      return charsEstimator;
    case EstimatorKind.FIXED: {
      const cost = (value: bigint, name: string) => {
        if (value < 0n || value > BigInt(maxFixedCost)) {
          throw new ConnectError(`${fieldPath}.${name} must be from 0 to ${maxFixedCost}, got ${value}`, Code.InvalidArgument);
        }
        return Number(value);
      };
      return fixedEstimator(
        cost(options!.fixedPerMessage, "fixed_per_message"),
        cost(options!.fixedPerPart, "fixed_per_part"),
        cost(options!.fixedPerToolCall, "fixed_per_tool_call"),
      );
    }
    case EstimatorKind.TOKENIZER: {
      const encoding = options!.encoding;
      if (TokenizerEncoding[encoding] === undefined) {
        throw new ConnectError(`${fieldPath}.encoding: unknown tokenizer encoding ${encoding}`, Code.InvalidArgument);
      }
      const provider = options!.provider !== Provider.UNSPECIFIED ? options!.provider : renderProvider;
      if (Provider[provider] === undefined) {
        throw new ConnectError(`${fieldPath}.provider: unknown provider ${provider}`, Code.InvalidArgument);
      }
      const count = await loadEncoding(encoding);
      // UNSPECIFIED is o200k_base: one text cache for both spellings.
      const textKey = encoding === TokenizerEncoding.UNSPECIFIED ? TokenizerEncoding.O200K_BASE : encoding;
      const cached = cache ? cache.textCounter(textKey, count) : count;
      const countPaced = await loadPacedEncoding(encoding);
      return tokenizerEstimator(deadlineBound(cached, deadline), cache ? cache.pacedTextCounter(textKey, countPaced) : countPaced, encoding, provider);
    }
    default:
      throw new ConnectError(`${fieldPath}.kind: unknown estimator kind ${kind}`, Code.InvalidArgument);
  }
}

/** Every text an estimator reads from a message, in part order (tool results include nested parts). */
function forEachText(parts: readonly Part[], visit: (text: string) => void): void {
  for (const part of parts) {
    const kind = part.kind;
    switch (kind.case) {
      case "text":
        visit(kind.value.text);
        break;
      case "reasoning":
        visit(kind.value.text);
        break;
      case "providerCompaction":
        visit(kind.value.summary ?? "");
        break;
      case "toolCall":
        visit(kind.value.name);
        visit(toolPayloadText(kind.value.arguments));
        break;
      case "toolResult":
        visit(toolPayloadText(kind.value.payload));
        forEachText(kind.value.contentParts, visit);
        break;
      default:
        break;
    }
  }
}

function countParts(parts: readonly Part[], kind: "toolCall" | "image"): number {
  let count = 0;
  for (const part of parts) {
    if (part.kind.case === kind) count++;
    else if (part.kind.case === "toolResult") count += countParts(part.kind.value.contentParts, kind);
  }
  return count;
}

function definitionTexts(definition: ToolDefinition): string[] {
  return [definition.name, definition.description, definition.parameters];
}

/** CHARS: runes of text plus UTF-8 bytes of tool names, ids, arguments and results. */
const charsEstimator: TokenEstimator = {
  kind: EstimatorKind.CHARS,
  cacheKey: "chars",
  perRequest: 0,
  countMessage(message) {
    let total = 0;
    const visitParts = (parts: readonly Part[]) => {
      for (const part of parts) {
        const kind = part.kind;
        switch (kind.case) {
          case "text":
          case "reasoning":
            total += runeCount(kind.value.text);
            break;
          case "providerCompaction":
            total += runeCount(kind.value.summary ?? "");
            break;
          case "toolCall":
            total += utf8ByteCount(kind.value.id) + utf8ByteCount(kind.value.name) + utf8ByteCount(toolPayloadText(kind.value.arguments));
            break;
          case "toolResult":
            total += utf8ByteCount(kind.value.toolCallId) + utf8ByteCount(kind.value.name) + utf8ByteCount(toolPayloadText(kind.value.payload));
            visitParts(kind.value.contentParts);
            break;
          default:
            break;
        }
      }
    };
    visitParts(message.parts);
    return total;
  },
  countToolDefinitions(definitions) {
    let total = 0;
    for (const definition of definitions) for (const text of definitionTexts(definition)) total += utf8ByteCount(text);
    return total;
  },
};

/** CHAR_FALLBACK: ceil(runes / chars_per_token) + 20 per tool call + 85 per image. */
function charFallbackEstimator(charsPerToken: number): TokenEstimator {
  return {
    kind: EstimatorKind.CHAR_FALLBACK,
    cacheKey: `char_fallback:${charsPerToken}`,
    perRequest: 0,
    countMessage(message) {
      let runes = 0;
      forEachText(message.parts, (text) => (runes += runeCount(text)));
      return Math.ceil(runes / charsPerToken) + 20 * countParts(message.parts, "toolCall") + 85 * countParts(message.parts, "image");
    },
    countToolDefinitions(definitions) {
      let total = 0;
      for (const definition of definitions) {
        let runes = 0;
        for (const text of definitionTexts(definition)) runes += runeCount(text);
        total += Math.ceil(runes / charsPerToken);
      }
      return total;
    },
  };
}

/** FIXED: per message + per part + per tool call; a tool definition costs one part. */
function fixedEstimator(perMessage: number, perPart: number, perToolCall: number): TokenEstimator {
  return {
    kind: EstimatorKind.FIXED,
    cacheKey: `fixed:${perMessage}:${perPart}:${perToolCall}`,
    perRequest: 0,
    countMessage(message) {
      return perMessage + perPart * message.parts.length + perToolCall * countParts(message.parts, "toolCall");
    },
    countToolDefinitions(definitions) {
      return perPart * definitions.length;
    },
  };
}

/**
 * Texts longer than this are counted by `countLongTexts` when a caller can wait: at the 5 µs per
 * character gpt-tokenizer takes on random letters it has not seen, about 20 ms.
 */
const pacedTextLength = 4_096;

/** TOKENIZER: BPE counts of every text plus the provider framing documented in `framing.ts`. */
function tokenizerEstimator(countText: TextTokenCounter, countPaced: PacedTextTokenCounter, encoding: TokenizerEncoding, provider: Provider): TokenEstimator {
  const framing = providerFraming(provider);
  // Long texts `countLongTexts` counted for this request; the cache (when there is one) knows them too.
  const longCounts = new Map<string, number>();
  const count = (text: string) => (text.length > pacedTextLength ? (longCounts.get(text) ?? countText(text)) : countText(text));
  const countPartsTokens = (parts: readonly Part[]): number => {
    let total = 0;
    for (const part of parts) {
      const kind = part.kind;
      switch (kind.case) {
        case "text":
          total += count(kind.value.text);
          break;
        case "reasoning":
          total += count(kind.value.text);
          break;
        case "providerCompaction":
          total += count(kind.value.summary ?? "");
          break;
        case "toolCall":
          total += framing.perToolCall + count(kind.value.name) + count(toolPayloadText(kind.value.arguments));
          break;
        case "toolResult":
          total += framing.perToolResult + count(kind.value.name) + count(toolPayloadText(kind.value.payload));
          total += countPartsTokens(kind.value.contentParts);
          break;
        case "image":
          total += imageTokens(framing, kind.value.detail);
          break;
        case "file":
          total += framing.perFile;
          break;
        default:
          break;
      }
    }
    return total;
  };
  return {
    kind: EstimatorKind.TOKENIZER,
    cacheKey: `tokenizer:${encoding}:${provider}`,
    perRequest: framing.perRequest,
    countMessage(message) {
      return framing.perMessage + (message.senderName !== "" ? framing.perName : 0) + countPartsTokens(message.parts);
    },
    countLongTexts(message, clock) {
      let long: string[] | undefined;
      forEachText(message.parts, (text) => {
        if (text.length > pacedTextLength && !longCounts.has(text)) (long ??= []).push(text);
      });
      if (!long) return undefined;
      const texts = long;
      return (async () => {
        for (const text of texts) longCounts.set(text, await countPaced(text, clock, "token counting"));
      })();
    },
    countToolDefinitions(definitions) {
      if (definitions.length === 0) return 0;
      let total = framing.toolsPreamble;
      for (const definition of definitions) {
        total += framing.perToolDefinition;
        for (const text of definitionTexts(definition)) total += count(text);
      }
      return total;
    },
  };
}
