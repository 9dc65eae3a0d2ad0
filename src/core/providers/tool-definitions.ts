import type { ToolDefinition } from "#gen/contextd/v1/state_pb";
import { jsonDepthExcess, maxJsonDepth } from "../model/json-depth.js";
import { atToolDefinition, providerRuleViolation } from "./rule-violation.js";
import { isJsonObject } from "./tool-arguments.js";

/** The JSON Schema sent for a definition without parameters: an object with no properties. */
function emptyParameters(): Record<string, unknown> {
  return { type: "object", properties: {} };
}

/**
 * The definition's parameters as a JSON Schema object. `parameters` is JSON text; text that is not
 * a JSON object is FAILED_PRECONDITION under `${provider}.tool_parameters`.
 */
export function toolParametersSchema(definition: ToolDefinition, provider: string): Record<string, unknown> {
  if (definition.parameters === "") return emptyParameters();
  // Serializing the body again would overflow the stack.
  const tooDeep = jsonDepthExcess(definition.parameters);
  if (tooDeep !== undefined) {
    throw providerRuleViolation(`${provider}.tool_parameters`, atToolDefinition(definition.name), `parameters nest deeper than ${maxJsonDepth} levels at ${tooDeep}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(definition.parameters);
  } catch {
    throw providerRuleViolation(`${provider}.tool_parameters`, atToolDefinition(definition.name), "parameters are not valid JSON");
  }
  if (!isJsonObject(value)) {
    throw providerRuleViolation(`${provider}.tool_parameters`, atToolDefinition(definition.name), "parameters are not a JSON Schema object");
  }
  return value;
}

/**
 * Checks tool names against the provider's pattern and for duplicates (every provider rejects two
 * tools with one name): FAILED_PRECONDITION under `${provider}.tool_name`.
 */
export function checkToolNames(names: readonly string[], pattern: RegExp, provider: string): void {
  const seen = new Set<string>();
  for (const name of names) {
    if (!pattern.test(name)) {
      throw providerRuleViolation(`${provider}.tool_name`, atToolDefinition(name), `the name does not match ${pattern.source}`);
    }
    if (seen.has(name)) throw providerRuleViolation(`${provider}.tool_name`, atToolDefinition(name), "the name is defined twice");
    seen.add(name);
  }
}
