// The TypeScript client of the contextd sidecar. The generated API is at "@contextd/client/v1".
export { Client, RECALL_TOOL_NAMES, isRecallTool, renderedBody, DEFAULT_ADDRESS, DEFAULT_MAX_MESSAGE_BYTES, type CallOptions, type ClientOptions, type Summarize, type SummaryAnswer, type TlsOptions } from "./client.js";
export {
  ToolRound,
  appendAssistant,
  appendMessages,
  appendProviderResponse,
  appendToolResult,
  appendUser,
  assistantText,
  errorPayload,
  jsonPayload,
  remember,
  setMetadata,
  pruneHistory,
  setToolDefinitions,
  systemText,
  textMessage,
  textPart,
  textPayload,
  toolCall,
  toolResultMessage,
  userText,
} from "./builders.js";
export {
  CURRENT_VERSION_TRAILER,
  ContextdError,
  ERROR_DOMAIN,
  OutcomeUnknownError,
  VersionConflictError,
  isOutcomeUnknown,
  isResponseTooLarge,
  toContextdError,
  type FieldViolation,
} from "./errors.js";
export { DEFAULT_RETRY_POLICY, backoff, backoffBound, type RetryPolicy } from "./retry.js";
export { Code } from "@connectrpc/connect";
