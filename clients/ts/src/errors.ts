// Typed errors for failed contextd calls. Every error the sidecar sends carries a
// google.rpc.ErrorInfo (a stable reason and its metadata) and, for INVALID_ARGUMENT, a
// google.rpc.BadRequest naming the request fields; a version conflict also names the stored version.
// Reading them from a bare ConnectError takes a schema lookup per detail, so the client does it once
// here and every method throws one of these classes.
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "../generated/google/rpc/error_details_pb.js";

/** The trailer in which the sidecar reports the stored version of a version conflict. */
export const CURRENT_VERSION_TRAILER = "contextd-current-version";

/** The domain of the google.rpc.ErrorInfo every contextd error carries. */
export const ERROR_DOMAIN = "contextd.dev";

// For servers (or proxies) that drop trailers: "expected version 3, current version 5".
const currentVersionInMessage = /current version\D{0,4}(\d+)/;

/**
 * One google.rpc.BadRequest field violation: the request field in protobuf field names
 * (`deltas[1].append_messages.messages[0].parts[0].tool_call.arguments`) and what is wrong.
 */
export interface FieldViolation {
  field: string;
  description: string;
}

/**
 * A failed contextd call. It is a ConnectError (`code`, `rawMessage`, `metadata`, `findDetails`),
 * with the structured details already read (docs/errors.md): `reason` is the ErrorInfo's stable
 * reason ("TOOL_ARGUMENTS_INVALID", "VERSION_CONFLICT", or the code's name; "" when the error did
 * not come from the sidecar), `errorMetadata` its metadata ("rule", "current_version", ...), and
 * `fieldViolations` the BadRequest violations of an INVALID_ARGUMENT.
 */
export class ContextdError extends ConnectError {
  // Its name stays "ConnectError", which is what ConnectError's own instanceof check reads, so that
  // code catching ConnectError (and ConnectError.from) keeps working on these errors.
  readonly reason: string;
  readonly errorMetadata: Readonly<Record<string, string>>;
  readonly fieldViolations: readonly FieldViolation[];

  constructor(message: string, code: Code, options: { metadata?: ConstructorParameters<typeof Headers>[0]; cause?: unknown; reason?: string; errorMetadata?: Record<string, string>; fieldViolations?: FieldViolation[] } = {}) {
    super(message, code, options.metadata, undefined, options.cause);
    this.reason = options.reason ?? "";
    this.errorMetadata = options.errorMetadata ?? {};
    this.fieldViolations = options.fieldViolations ?? [];
  }

  // ConnectError's instanceof accepts any error shaped like one; a subclass needs the plain
  // prototype check, or every ConnectError would pass for a VersionConflictError.
  static override [Symbol.hasInstance](value: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }
}

/**
 * ABORTED: the conversation is no longer at the version the caller expected. `currentVersion` is
 * the stored version when the sidecar rejected the call (from the ErrorInfo, the
 * `contextd-current-version` trailer or the message), undefined when it did not say.
 */
export class VersionConflictError extends ContextdError {
  readonly currentVersion: bigint | undefined;

  constructor(message: string, currentVersion: bigint | undefined, options: ConstructorParameters<typeof ContextdError>[2] = {}) {
    super(message, Code.Aborted, options);
    this.currentVersion = currentVersion;
  }
}

/**
 * A write (a commit, or a compile with `commit`) whose outcome the client could not learn within
 * its retries: it may or may not have applied. Sending the same request again with
 * `idempotencyKey` applies it at most once. `last` is the last attempt's error (UNAVAILABLE,
 * DEADLINE_EXCEEDED, or RESOURCE_EXHAUSTED for an answer over the receive limit); `code` is its code.
 */
export class OutcomeUnknownError extends ContextdError {
  readonly idempotencyKey: string;
  readonly last: ContextdError;

  constructor(idempotencyKey: string, last: ContextdError) {
    super(
      `outcome unknown (the write may have applied; send it again with idempotency key ${JSON.stringify(idempotencyKey)} to apply it at most once): ${last.message}`,
      last.code,
      { cause: last, reason: last.reason, errorMetadata: { ...last.errorMetadata }, fieldViolations: [...last.fieldViolations] },
    );
    this.idempotencyKey = idempotencyKey;
    this.last = last;
  }
}

/** Converts whatever a connect call threw into a ContextdError (a ContextdError is returned as is). */
export function toContextdError(thrown: unknown): ContextdError {
  if (thrown instanceof ContextdError) return thrown;
  const error = ConnectError.from(thrown);
  let reason = "";
  let errorMetadata: Record<string, string> = {};
  const fieldViolations: FieldViolation[] = [];
  for (const info of error.findDetails(ErrorInfoSchema)) {
    if (info.domain === ERROR_DOMAIN && reason === "") {
      reason = info.reason;
      errorMetadata = { ...info.metadata };
    }
  }
  for (const badRequest of error.findDetails(BadRequestSchema)) {
    for (const violation of badRequest.fieldViolations) fieldViolations.push({ field: violation.field, description: violation.description });
  }
  const options = { metadata: error.metadata, cause: thrown, reason, errorMetadata, fieldViolations };
  const converted =
    error.code === Code.Aborted
      ? new VersionConflictError(error.rawMessage, currentVersion(errorMetadata, error.metadata, error.rawMessage), options)
      : new ContextdError(error.rawMessage, error.code, options);
  // Kept so that a caller's findDetails for other detail types still works.
  converted.details = error.details;
  return converted;
}

function currentVersion(errorMetadata: Record<string, string>, trailer: Headers, message: string): bigint | undefined {
  for (const text of [errorMetadata["current_version"], trailer.get(CURRENT_VERSION_TRAILER) ?? undefined, currentVersionInMessage.exec(message)?.[1]]) {
    if (text !== undefined && /^\d+$/.test(text)) return BigInt(text);
  }
  return undefined;
}

/**
 * Whether `error` is this client refusing an answer over its receive limit (connect-es: "message
 * size N is larger than configured readMaxBytes M", raised locally), as opposed to the sidecar
 * refusing a request, which applied nothing.
 */
export function isResponseTooLarge(error: ContextdError): boolean {
  const connectError = error.cause instanceof ConnectError ? error.cause : error;
  return error.code === Code.ResourceExhausted && error.reason === "" && !connectError.isWireError && /larger than configured readMaxBytes/.test(error.rawMessage);
}

/**
 * Whether `error` leaves open whether the sidecar applied a write: it commits before it answers,
 * so a lost connection, a deadline that ran out after the commit, or an answer refused for its size
 * may all hide a commit that happened.
 */
export function isOutcomeUnknown(error: ContextdError): boolean {
  return error.code === Code.Unavailable || error.code === Code.DeadlineExceeded || isResponseTooLarge(error);
}
