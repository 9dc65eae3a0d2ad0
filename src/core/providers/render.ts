import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  RenderedRequestSchema,
  WarningSchema,
  type CompiledPayload,
  type RenderedRequest,
  type RenderOptions,
  type Warning,
} from "#gen/contextd/v1/compile_pb";
import { Provider } from "#gen/contextd/v1/message_pb";
import { analyzeToolRounds } from "../model/tool-rounds.js";
import { renderAnthropic } from "./anthropic/render.js";
import { validateAnthropic } from "./anthropic/validate.js";
import { renderGemini } from "./gemini/render.js";
import { validateGemini } from "./gemini/validate.js";
import { renderOpenAIChat } from "./openai-chat/render.js";
import { validateOpenAIChat } from "./openai-chat/validate.js";
import { renderOpenAIResponses } from "./openai-responses/render.js";
import { validateOpenAIResponses } from "./openai-responses/validate.js";
import type { DeadlineCheck } from "../compile/deadline.js";
import { atMessage, providerRuleViolation } from "./rule-violation.js";
import type { RenamedCallId } from "./rendered-ids.js";
import type { MediaPolicy } from "./media-capabilities.js";
import { cutAtLatestCompaction } from "./provider-compaction.js";

/** The first part of every rule name of a provider ("anthropic.open_call_position"). */
export const ruleNamePrefixes: Partial<Record<Provider, string>> = {
  [Provider.OPENAI_CHAT]: "openai_chat",
  [Provider.OPENAI_RESPONSES]: "openai_responses",
  [Provider.ANTHROPIC_MESSAGES]: "anthropic",
  [Provider.GEMINI]: "gemini",
};

/**
 * One definition of an open round for every provider: an assistant message whose calls are not
 * all answered may only be the last unit of history (after it come only its own results). Each
 * body validator has its own view of this, and merging turns hid it from some: Anthropic merged
 * the current turn into the user turn after an unanswered tool_use and sent a body Anthropic
 * rejects. Checked on the payload, before rendering, so all four name the same rule and message.
 */
function assertOpenRoundLast(payload: CompiledPayload, rulePrefix: string): void {
  const analysis = analyzeToolRounds(payload.history, { allowOpenTail: true });
  const incomplete = analysis.violations.find((violation) => violation.rule === "incomplete_tool_round");
  if (!incomplete) return;
  const unit = analysis.units[incomplete.unitIndex]!;
  const missing = unit.round!.missingCallIds.map((id) => `"${id}"`).join(", ");
  throw providerRuleViolation(
    `${rulePrefix}.open_call_position`,
    atMessage(incomplete.messageId),
    `tool calls ${missing} have no result, and message "${payload.history[unit.end]!.id}" follows; an open call may only be the last assistant turn`,
  );
}

/** Receives non-fatal notices of a render; they end up in `RenderedRequest.warnings`. */
type RenderWarningSink = (warning: Warning) => void;

/**
 * Renders the compiled payload as the request body parts contextd owns for one provider (system
 * slot, messages/contents/input, tools), validates the body against that provider's rules, and
 * returns it as UTF-8 JSON with the render's warnings (for example Anthropic cache breakpoints
 * beyond 4). A rule violation is FAILED_PRECONDITION naming the rule and the message id: a bad body
 * is never returned. With `deadline`, gives up with DEADLINE_EXCEEDED between rendering, checking
 * and serializing once the call is over.
 */
export function renderRequest(payload: CompiledPayload, options: RenderOptions, deadline?: DeadlineCheck): RenderedRequest {
  const warnings: Warning[] = [];
  const rendered = renderBody(payload, options, (warning) => warnings.push(warning));
  deadline?.checkNow("render");
  rendered.validate();
  deadline?.checkNow("render");
  return renderedRequest(options, rendered, warnings);
}

/**
 * `renderRequest` giving the event loop a turn between rendering, checking and serializing when
 * `clock` says one is due: each is tens of milliseconds at 10,000 messages.
 */
export async function renderRequestPaced(payload: CompiledPayload, options: RenderOptions, clock: DeadlineCheck): Promise<RenderedRequest> {
  const warnings: Warning[] = [];
  const rendered = renderBody(payload, options, (warning) => warnings.push(warning));
  if (clock.checkNow("render")) await clock.pause("render");
  rendered.validate();
  if (clock.checkNow("render")) await clock.pause("render");
  return renderedRequest(options, rendered, warnings);
}

function renderedRequest(options: RenderOptions, rendered: RenderedBody, warnings: Warning[]): RenderedRequest {
  return create(RenderedRequestSchema, {
    provider: options.provider,
    model: options.model,
    json: new TextEncoder().encode(JSON.stringify(rendered.body)),
    warnings,
    renamedToolCallIds: rendered.renamed.map((entry) => ({ messageId: entry.messageId, stored: entry.stored, rendered: entry.rendered })),
  });
}

interface RenderedBody {
  body: unknown;
  /** Tool-call ids the body sends in another form than stored. */
  renamed: RenamedCallId[];
  validate: () => void;
}

/** The body for the provider, and the check of its rules (separate, so a deadline or a turn can come between). */
function renderBody(given: CompiledPayload, options: RenderOptions, report: RenderWarningSink): RenderedBody {
  const rulePrefix = ruleNamePrefixes[options.provider];
  // A compile has cut history at its latest provider compaction before the budget (compile/
  // provider-compaction-cut.ts), and cutting again changes nothing; a payload rendered by itself
  // gets the same body that way.
  const cut = rulePrefix !== undefined ? cutAtLatestCompaction(given.history, options.provider, rulePrefix) : undefined;
  const payload = cut ? { ...given, history: cut.history } : given;
  if (rulePrefix !== undefined) assertOpenRoundLast(payload, rulePrefix);
  const media: MediaPolicy = { drop: options.dropUnsupportedMedia, report };
  switch (options.provider) {
    case Provider.OPENAI_CHAT: {
      const { body, origins, renamed } = renderOpenAIChat(payload, options.model, media);
      return { body: withPromptCacheKey(body, options), renamed, validate: () => validateOpenAIChat(body, origins, payload) };
    }
    case Provider.OPENAI_RESPONSES: {
      const { body, origins, renamed } = renderOpenAIResponses(payload, options.model, media);
      return { body: withPromptCacheKey(body, options), renamed, validate: () => validateOpenAIResponses(body, origins, payload) };
    }
    case Provider.ANTHROPIC_MESSAGES: {
      promptCacheKeyIgnored(options, report);
      const { body, origins, renamed } = renderAnthropic(payload, options.model, report, options.autoCacheBreakpoints, media);
      return { body, renamed, validate: () => validateAnthropic(body, origins, payload) };
    }
    case Provider.GEMINI: {
      promptCacheKeyIgnored(options, report);
      const { body, origins, renamed } = renderGemini(payload, options.model, media);
      return { body, renamed, validate: () => validateGemini(body, origins, payload) };
    }
    case Provider.UNSPECIFIED:
      throw new ConnectError("render.provider: a provider is required to render", Code.InvalidArgument);
    default:
      throw new ConnectError(`render.provider: unknown provider ${options.provider}`, Code.InvalidArgument);
  }
}

/** Most UTF-8 bytes of `RenderOptions.prompt_cache_key`. */
export const maxPromptCacheKeyBytes = 1_024;

/** An OpenAI body with `prompt_cache_key` last, when the options give one. */
function withPromptCacheKey<Body extends object>(body: Body, options: RenderOptions): Body {
  const key = options.promptCacheKey;
  if (key === "") return body;
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes > maxPromptCacheKeyBytes) throw new ConnectError(`render.prompt_cache_key has ${bytes} bytes, at most ${maxPromptCacheKeyBytes} are allowed`, Code.InvalidArgument);
  return { ...body, prompt_cache_key: key };
}

/** Providers without a cache key say that the key was not sent. */
function promptCacheKeyIgnored(options: RenderOptions, report: RenderWarningSink): void {
  if (options.promptCacheKey === "") return;
  report(create(WarningSchema, { code: "prompt_cache_key_ignored", message: `render.prompt_cache_key is for OpenAI; ${Provider[options.provider]} caches prefixes without one, so it was not sent` }));
}
