import { Code, ConnectError } from "@connectrpc/connect";
import { describeJsonValue } from "../model/json-value-description.js";
import { jsonDepthExcess, maxJsonDepth } from "../model/json-depth.js";
import { ErrorReason, withErrorDetails } from "../model/error-details.js";

/**
 * Reading a provider response body whose shape is not ours: every accessor takes the JSON path of
 * the value ("choices[0].message.content") and a wrong shape is INVALID_ARGUMENT saying where.
 */

export type JsonObject = Record<string, unknown>;

export function malformed(path: string, detail: string): ConnectError {
  return withErrorDetails(new ConnectError(`malformed provider response at ${path}: ${detail}`, Code.InvalidArgument), ErrorReason.providerResponseMalformed, {
    metadata: { json_path: path },
  });
}

/**
 * Decodes UTF-8 JSON text; the root must be an object, nested no deeper than `maxJsonDepth` (what
 * is parsed here is stored, then serialized again by every render).
 */
export function parseJsonObject(json: Uint8Array, providerName: string): JsonObject {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(json);
  } catch (error) {
    throw malformed("$", `not a ${providerName} response: ${(error as Error).message}`);
  }
  const tooDeep = jsonDepthExcess(text);
  if (tooDeep !== undefined) throw malformed(tooDeep, `JSON nested deeper than ${maxJsonDepth} levels`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw malformed("$", `not a ${providerName} response: ${(error as Error).message}`);
  }
  return expectObject(value, "$");
}

export function expectObject(value: unknown, path: string): JsonObject {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw malformed(path, `expected a JSON object, got ${describeJsonValue(value)}`);
  return value as JsonObject;
}

export function expectArray(value: unknown, path: string): unknown[] {
  if (!Array.isArray(value)) throw malformed(path, `expected a JSON array, got ${describeJsonValue(value)}`);
  return value;
}

export function expectString(value: unknown, path: string): string {
  if (typeof value !== "string") throw malformed(path, `expected a JSON string, got ${describeJsonValue(value)}`);
  return value;
}

/** A string, or "" when absent or null (providers send null for "no value"). */
export function optionalString(value: unknown, path: string): string {
  return value === undefined || value === null ? "" : expectString(value, path);
}

/** An array, or [] when absent or null. */
export function optionalArray(value: unknown, path: string): unknown[] {
  return value === undefined || value === null ? [] : expectArray(value, path);
}
