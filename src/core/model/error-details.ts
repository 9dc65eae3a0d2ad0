import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, type BadRequest, type ErrorInfo } from "#gen/google/rpc/error_details_pb";

/**
 * The structured details every contextd error carries, so clients act on a stable reason instead
 * of parsing messages (docs/errors.md):
 *
 * - `google.rpc.ErrorInfo`, domain `contextd.dev`, a stable UPPER_SNAKE `reason` (the list below)
 *   and string metadata (the rule, the current version, ...);
 * - for INVALID_ARGUMENT, `google.rpc.BadRequest` with the field path and what is wrong with it.
 *
 * Errors are raised in hundreds of places as plain `ConnectError`s with a message of the form
 * `path: what is wrong`; the places where a reason more specific than the code matters attach it
 * with `withErrorDetails`, and `completeErrorDetails` (run once per failed RPC by the server's
 * instrumentation) fills in the rest, so no error leaves without them.
 */

export const errorDomain = "contextd.dev";

/**
 * The stable reasons. Besides these, an error without a more specific reason has the name of its
 * status code as its reason (INVALID_ARGUMENT, NOT_FOUND, ...). A reason is never renamed.
 */
export const ErrorReason = {
  /** ABORTED: the conversation is not at the expected version; metadata `current_version`. */
  versionConflict: "VERSION_CONFLICT",
  /** FAILED_PRECONDITION: a rendered body breaks a provider rule; metadata `rule`. */
  providerRuleViolated: "PROVIDER_RULE_VIOLATED",
  /** RESOURCE_EXHAUSTED: what must be sent does not fit the token budget. */
  budgetExceeded: "BUDGET_EXCEEDED",
  /** INVALID_ARGUMENT: a tool round breaks a rule; metadata `rule`. */
  toolRoundInvalid: "TOOL_ROUND_INVALID",
  /** INVALID_ARGUMENT: tool-call arguments that are not a JSON object; metadata `tool_call_id`. */
  toolArgumentsInvalid: "TOOL_ARGUMENTS_INVALID",
  /** INVALID_ARGUMENT: a provider response body (append_provider_response) of the wrong shape. */
  providerResponseMalformed: "PROVIDER_RESPONSE_MALFORMED",
  /** FAILED_PRECONDITION: a rendered compile of a conversation that has no messages. */
  conversationEmpty: "CONVERSATION_EMPTY",
  /** RESOURCE_EXHAUSTED before the body is read: calls in progress hold the request-memory budget; metadata `limit_bytes`, `flag`. Retry later. */
  requestMemoryExhausted: "REQUEST_MEMORY_EXHAUSTED",
  /** RESOURCE_EXHAUSTED: one request message over `--max-request-bytes`; metadata `limit_bytes`, `flag`. */
  requestTooLarge: "REQUEST_TOO_LARGE",
  /** DEADLINE_EXCEEDED: the request body did not arrive within `--request-body-timeout-ms`; metadata `timeout_ms`, `flag`. */
  requestBodyTimeout: "REQUEST_BODY_TIMEOUT",
  /** PERMISSION_DENIED: without bearer tokens, a Host that is not loopback nor in `--allowed-hosts` (DNS rebinding); metadata `flag`. */
  hostNotAllowed: "HOST_NOT_ALLOWED",
  /** PERMISSION_DENIED: a browser request whose `Origin` is not the origin it was sent to. */
  originNotAllowed: "ORIGIN_NOT_ALLOWED",
  /** RESOURCE_EXHAUSTED: a GetState answer over the message limit; metadata `limit_bytes`, `flag`, `read_with` (the paged read). */
  stateTooLarge: "STATE_TOO_LARGE",
} as const;

export type ErrorReason = (typeof ErrorReason)[keyof typeof ErrorReason];

export interface FieldViolation {
  /** The request field, in protobuf field names: `deltas[1].append_messages.messages[0].role`. */
  readonly field: string;
  readonly description: string;
}

export interface ErrorDetailOptions {
  readonly metadata?: Readonly<Record<string, string>>;
  readonly fieldViolations?: readonly FieldViolation[];
}

/** `error` with an ErrorInfo of `reason` (and a BadRequest when violations are given). */
export function withErrorDetails(error: ConnectError, reason: string, options: ErrorDetailOptions = {}): ConnectError {
  error.details.push({ desc: ErrorInfoSchema, value: { reason, domain: errorDomain, metadata: { ...options.metadata } } });
  if (options.fieldViolations && options.fieldViolations.length > 0) {
    error.details.push({ desc: BadRequestSchema, value: { fieldViolations: options.fieldViolations.map((violation) => ({ ...violation })) } });
  }
  return error;
}

/** The ErrorInfo and BadRequest attached to `error`, whether outgoing or read from the wire. */
export function readErrorDetails(error: ConnectError): { errorInfo?: ErrorInfo; badRequest?: BadRequest } {
  const [errorInfo] = error.findDetails(ErrorInfoSchema);
  const [badRequest] = error.findDetails(BadRequestSchema);
  return { ...(errorInfo ? { errorInfo } : {}), ...(badRequest ? { badRequest } : {}) };
}

/**
 * The same error with its message (and its field violations' paths) under `prefix`, as a batch
 * names the delta that failed: `deltas[2].append_user: ...`, field `deltas[2].append_user.message`.
 */
export function prefixError(error: ConnectError, prefix: string): ConnectError {
  const { errorInfo, badRequest } = readErrorDetails(error);
  const prefixed = new ConnectError(`${prefix}: ${error.rawMessage}`, error.code, error.metadata, undefined, error);
  if (!errorInfo) return prefixed;
  return withErrorDetails(prefixed, errorInfo.reason, {
    metadata: errorInfo.metadata,
    fieldViolations: (badRequest?.fieldViolations ?? []).map((violation) => ({
      field: violation.field === "" ? prefix : `${prefix}.${violation.field}`,
      description: violation.description,
    })),
  });
}

/**
 * Fills in what `error` lacks: an ErrorInfo (the code's name as reason; VERSION_CONFLICT with
 * `current_version` for ABORTED) and, for INVALID_ARGUMENT, a BadRequest read from the message's
 * leading field path. `currentVersion` is what the store reported for an ABORTED commit.
 */
export function completeErrorDetails(error: ConnectError, currentVersion?: string): ConnectError {
  const { errorInfo, badRequest } = readErrorDetails(error);
  if (!errorInfo) {
    const aborted = error.code === Code.Aborted;
    const metadata: Record<string, string> = aborted && currentVersion !== undefined ? { current_version: currentVersion } : {};
    error.details.push({
      desc: ErrorInfoSchema,
      value: create(ErrorInfoSchema, { reason: aborted ? ErrorReason.versionConflict : codeReason(error.code), domain: errorDomain, metadata }),
    });
  }
  if (!badRequest && error.code === Code.InvalidArgument) {
    error.details.push({ desc: BadRequestSchema, value: { fieldViolations: [fieldViolationOf(error.rawMessage)] } });
  }
  return error;
}

/** "INVALID_ARGUMENT" for Code.InvalidArgument. */
export function codeReason(code: Code): string {
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

// One field path: `deltas[1].append_messages`, `messages[0].parts[0].tool_call.arguments`.
const fieldPath = /^[a-z][a-z0-9_]*(?:\[\d+\])*(?:\.[a-z][a-z0-9_]*(?:\[\d+\])*)*/;

/**
 * The field a message of the form `path: what` (or `path is required`, `path must be ...`) is
 * about, with the paths of nested `path: path: what` joined; a message that starts with no path
 * is about the request as a whole (field "").
 */
export function fieldViolationOf(message: string): FieldViolation {
  const fields: string[] = [];
  let rest = message;
  for (;;) {
    const match = fieldPath.exec(rest);
    if (!match) break;
    const after = rest.slice(match[0].length);
    if (after.startsWith(": ")) {
      fields.push(match[0]);
      rest = after.slice(2);
      continue;
    }
    if (/^ (?:is required|must be )/.test(after)) {
      fields.push(match[0]);
      rest = `${match[0].replace(/^.*\./, "")}${after}`;
    }
    break;
  }
  return { field: fields.join("."), description: rest };
}
