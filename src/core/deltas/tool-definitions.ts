import { Code, ConnectError } from "@connectrpc/connect";
import type { ConversationState, SetToolDefinitions, ToolDefinition } from "#gen/contextd/v1/state_pb";
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
  checkToolDefinitionTexts(delta.toolDefinitions, "tool_definitions");
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

/** The most characters (UTF-16 code units) of one `ToolDefinition.best_practices` item. */
export const maxBestPracticeChars = 2_000;
/** The most characters of one `ToolDefinition.prompt_injection`. */
export const maxPromptInjectionChars = 8_000;

/**
 * INVALID_ARGUMENT for a best practice or prompt injection over its limit, naming the tool. Run on
 * every definition a commit stores and every definition a compile reads.
 */
export function checkToolDefinitionTexts(definitions: readonly ToolDefinition[], path: string): void {
  definitions.forEach((definition, index) => {
    const tool = definition.name === "" ? "without a name" : `"${definition.name}"`;
    definition.bestPractices.forEach((practice, practiceIndex) => {
      if (practice.length > maxBestPracticeChars) {
        throw new ConnectError(
          `${path}[${index}].best_practices[${practiceIndex}]: tool ${tool} has a best practice of ${practice.length} characters, over the limit of ${maxBestPracticeChars}`,
          Code.InvalidArgument,
        );
      }
    });
    if (definition.promptInjection.length > maxPromptInjectionChars) {
      throw new ConnectError(
        `${path}[${index}].prompt_injection: tool ${tool} has a prompt injection of ${definition.promptInjection.length} characters, over the limit of ${maxPromptInjectionChars}`,
        Code.InvalidArgument,
      );
    }
  });
}
