import { Code, ConnectError } from "@connectrpc/connect";
import type { ConversationState, SetToolDefinitions } from "../../../gen/ts/contextd/v1/state_pb.js";
import { assertJsonDepth } from "../model/json-depth.js";

/**
 * Replaces the tool definitions. Names must be present and unique (calls refer to tools by name),
 * and `parameters`, when given, must be a JSON object: providers reject anything else, and finding
 * out at commit time beats finding out at the next model call.
 */
export function setToolDefinitions(state: ConversationState, delta: SetToolDefinitions): ConversationState {
  const names = new Set<string>();
  delta.toolDefinitions.forEach((definition, index) => {
    const path = `tool_definitions[${index}]`;
    if (definition.name === "") throw new ConnectError(`${path}.name is required`, Code.InvalidArgument);
    if (names.has(definition.name)) throw new ConnectError(`${path}.name: duplicate tool name "${definition.name}"`, Code.InvalidArgument);
    names.add(definition.name);
    assertJsonDepth(definition.parameters, `${path}.parameters`);
    if (definition.parameters !== "" && !isJsonObject(definition.parameters)) {
      throw new ConnectError(`${path}.parameters: tool "${definition.name}" parameters must be a JSON object (a JSON Schema)`, Code.InvalidArgument);
    }
  });
  return { ...state, toolDefinitions: [...delta.toolDefinitions] };
}

function isJsonObject(text: string): boolean {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value);
  } catch {
    return false;
  }
}
