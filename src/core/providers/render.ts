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
import type { DeadlineCheck } from "../compile/deadline.js";

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
  const body = renderBody(payload, options, (warning) => warnings.push(warning), deadline);
  deadline?.checkNow("render");
  return create(RenderedRequestSchema, {
    provider: options.provider,
    model: options.model,
    json: new TextEncoder().encode(JSON.stringify(body)),
    warnings,
  });
}

function renderBody(payload: CompiledPayload, options: RenderOptions, report: RenderWarningSink, deadline: DeadlineCheck | undefined): unknown {
  switch (options.provider) {
    case Provider.OPENAI_CHAT: {
      const { body, origins } = renderOpenAIChat(payload, options.model);
      deadline?.checkNow("render");
      validateOpenAIChat(body, origins, payload);
      return body;
    }
    case Provider.OPENAI_RESPONSES: {
      const { body, origins } = renderOpenAIResponses(payload, options.model);
      deadline?.checkNow("render");
      validateOpenAIResponses(body, origins, payload);
      return body;
    }
    case Provider.ANTHROPIC_MESSAGES: {
      const { body, origins } = renderAnthropic(payload, options.model, report);
      deadline?.checkNow("render");
      validateAnthropic(body, origins, payload);
      return body;
    }
    case Provider.GEMINI: {
      const { body, origins } = renderGemini(payload, options.model);
      deadline?.checkNow("render");
      validateGemini(body, origins, payload);
      return body;
    }
    case Provider.UNSPECIFIED:
      throw new ConnectError("render.provider: a provider is required to render", Code.InvalidArgument);
    default:
      throw new ConnectError(`render.provider: unknown provider ${options.provider}`, Code.InvalidArgument);
  }
}
