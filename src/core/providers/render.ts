import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  RenderedRequestSchema,
  type CompiledPayload,
  type RenderedRequest,
  type RenderOptions,
  type Warning,
} from "../../../gen/ts/contextd/v1/compile_pb.js";
import { Provider } from "../../../gen/ts/contextd/v1/message_pb.js";
import { renderAnthropic } from "./anthropic/render.js";
import { validateAnthropic } from "./anthropic/validate.js";
import { renderGemini } from "./gemini/render.js";
import { validateGemini } from "./gemini/validate.js";
import { renderOpenAIChat } from "./openai-chat/render.js";
import { validateOpenAIChat } from "./openai-chat/validate.js";
import { renderOpenAIResponses } from "./openai-responses/render.js";
import { validateOpenAIResponses } from "./openai-responses/validate.js";

/** Receives non-fatal notices of a render; they end up in `RenderedRequest.warnings`. */
type RenderWarningSink = (warning: Warning) => void;

/**
 * Renders the compiled payload as the request body parts contextd owns for one provider (system
 * slot, messages/contents/input, tools), validates the body against that provider's rules, and
 * returns it as UTF-8 JSON with the render's warnings (for example Anthropic cache breakpoints
 * beyond 4). A rule violation is FAILED_PRECONDITION naming the rule and the message id: a bad body
 * is never returned.
 */
export function renderRequest(payload: CompiledPayload, options: RenderOptions): RenderedRequest {
  const warnings: Warning[] = [];
  const body = renderBody(payload, options, (warning) => warnings.push(warning));
  return create(RenderedRequestSchema, {
    provider: options.provider,
    model: options.model,
    json: new TextEncoder().encode(JSON.stringify(body)),
    warnings,
  });
}

function renderBody(payload: CompiledPayload, options: RenderOptions, report: RenderWarningSink): unknown {
  switch (options.provider) {
    case Provider.OPENAI_CHAT: {
      const { body, origins } = renderOpenAIChat(payload, options.model);
      validateOpenAIChat(body, origins, payload);
      return body;
    }
    case Provider.OPENAI_RESPONSES: {
      const { body, origins } = renderOpenAIResponses(payload, options.model);
      validateOpenAIResponses(body, origins, payload);
      return body;
    }
    case Provider.ANTHROPIC_MESSAGES: {
      const { body, origins } = renderAnthropic(payload, options.model, report);
      validateAnthropic(body, origins, payload);
      return body;
    }
    case Provider.GEMINI: {
      const { body, origins } = renderGemini(payload, options.model);
      validateGemini(body, origins, payload);
      return body;
    }
    case Provider.UNSPECIFIED:
      throw new ConnectError("render.provider: a provider is required to render", Code.InvalidArgument);
    default:
      throw new ConnectError(`render.provider: unknown provider ${options.provider}`, Code.InvalidArgument);
  }
}
