import type { Message } from "#gen/contextd/v1/message_pb";

/**
 * True for a message that stands in for earlier ones (provenance `summary`). Providers that want
 * the body to start on the user's turn (Anthropic, Gemini) render a summary as user-role context
 * whatever its stored role: it is what the conversation knew, not something the model said.
 */
export function isSummary(message: Message): boolean {
  return message.provenance?.kind.case === "summary";
}
