import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { requestIdKey } from "./call-context.js";
import { completeErrorDetails } from "../../core/model/error-details.js";
import { currentVersionTrailer } from "../../store/store-errors.js";
import type { Logger } from "../operations/logger.js";
import type { Metrics } from "../operations/metrics.js";

/**
 * One log line and one metrics record per RPC. Calls are timed from the handler's start to the
 * last response message, so a stream's duration is its lifetime. Successful calls are logged at
 * debug, failed ones always (level "error"), with the request id the caller can quote. Being the
 * outermost interceptor, it is also where every failed call's error gets the structured details
 * it lacks (`completeErrorDetails`: ErrorInfo always, BadRequest for INVALID_ARGUMENT).
 *
 * A failed call's level says who is at fault (`failureLogLevel`): a version conflict is how
 * optimistic concurrency works and a refused argument is the caller's to fix, so neither pages an
 * operator who alerts on level "error".
 */
/**
 * The log level of a failed call: "error" when the server is at fault (the codes OpenTelemetry's
 * RPC conventions count as server errors: UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL,
 * UNAVAILABLE, DATA_LOSS), "warn" for callers the server refused (UNAUTHENTICATED,
 * PERMISSION_DENIED, RESOURCE_EXHAUSTED: worth seeing, maybe an attack or a limit to raise), "info"
 * for the failures a correct caller meets in normal work (ABORTED, CANCELED, INVALID_ARGUMENT,
 * NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION, OUT_OF_RANGE).
 */
export function failureLogLevel(code: Code): "info" | "warn" | "error" {
  switch (code) {
    case Code.Unknown:
    case Code.DeadlineExceeded:
    case Code.Unimplemented:
    case Code.Internal:
    case Code.Unavailable:
    case Code.DataLoss:
      return "error";
    case Code.Unauthenticated:
    case Code.PermissionDenied:
    case Code.ResourceExhausted:
      return "warn";
    default:
      return "info";
  }
}

export function instrumentCalls(logger: Logger, metrics: Metrics): Interceptor {
  return (next) => async (request) => {
    const method = `${request.method.parent.typeName}/${request.method.name}`;
    const started = performance.now();
    const finish = (error: unknown) => {
      const code = error === undefined ? "ok" : codeName(ConnectError.from(error).code);
      const seconds = (performance.now() - started) / 1000;
      metrics.recordRpc(method, code, seconds);
      const level = error === undefined ? "debug" : failureLogLevel(ConnectError.from(error).code);
      if (!logger.enabled(level)) return;
      logger.log(level, "rpc", {
        method,
        code,
        ms: Math.round(seconds * 1e6) / 1e3,
        requestId: request.contextValues.get(requestIdKey),
        protocol: request.header.get("content-type") ?? "",
        ...(error === undefined ? {} : { error: ConnectError.from(error).rawMessage }),
      });
    };
    let response;
    try {
      response = await next(request);
    } catch (error) {
      finish(error);
      throw withDetails(error);
    }
    if (!response.stream) {
      finish(undefined);
      return response;
    }
    const messages = response.message;
    return {
      ...response,
      message: (async function* () {
        let failure: unknown;
        try {
          yield* messages;
        } catch (error) {
          failure = error;
          throw withDetails(error);
        } finally {
          finish(failure);
        }
      })(),
    };
  };
}

// Only a ConnectError: anything else is a bug the transport answers as INTERNAL without its text.
function withDetails(error: unknown): unknown {
  if (!(error instanceof ConnectError)) return error;
  return completeErrorDetails(error, error.metadata.get(currentVersionTrailer) ?? undefined);
}

/** "not_found" for Code.NotFound: the names gRPC and Connect use on the wire. */
export function codeName(code: Code): string {
  return Code[code]!.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}
