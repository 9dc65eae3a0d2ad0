import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorReason, withErrorDetails } from "../model/error-details.js";

/**
 * A rendered body that breaks a provider rule (providers.md). It is FAILED_PRECONDITION rather
 * than INVALID_ARGUMENT because the request itself may be well-formed; the conversation just cannot
 * be sent to this provider as it stands. `rule` is a stable dotted name ("openai_chat.tool_call_answered")
 * and `where` locates it (`message "m3"`, `tool definition "search"`).
 */
export function providerRuleViolation(rule: string, where: string, detail: string): ConnectError {
  return withErrorDetails(new ConnectError(`provider rule ${rule} violated at ${where}: ${detail}`, Code.FailedPrecondition), ErrorReason.providerRuleViolated, {
    metadata: { rule },
  });
}

/** The `where` of a rule violation for a payload message. */
export function atMessage(messageId: string): string {
  return `message "${messageId}"`;
}

/** The `where` of a rule violation for a tool definition. */
export function atToolDefinition(name: string): string {
  return `tool definition "${name}"`;
}
