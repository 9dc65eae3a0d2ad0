import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ToolDefinitionSchema, type ToolDefinition } from "#gen/contextd/v1/state_pb";

/**
 * Why it exists: what the budget trimmed stays in the store, but a model cannot ask for what it
 * does not know exists. These two tools tell it, in their descriptions, that earlier messages may
 * be missing from the prompt, and give it a way to fetch them that the agent answers with one
 * `Recall` call. Their definitions are constants, so the tools part of a cached prompt prefix is
 * the same in every compile. The names carry a `contextd_` prefix so that they do not meet a
 * user's own tools; a definition with one of them is refused rather than replaced.
 */

export const recallMessageToolName = "contextd_recall_message";
export const searchHistoryToolName = "contextd_search_history";
export const recallToolNames: readonly string[] = [recallMessageToolName, searchHistoryToolName];

/** Most ids one recall by id takes, and most hits of a search. */
export const maxRecallIds = 16;
export const maxRecallResults = 50;
export const defaultRecallResults = 5;

export const recallMessageDefinition: ToolDefinition = create(ToolDefinitionSchema, {
  name: recallMessageToolName,
  description:
    "Return the full text of earlier messages of this conversation by their ids. Earlier messages may have been left out of this prompt or shortened to fit its size; contextd_search_history hits and shortened tool results name their ids.",
  parameters: JSON.stringify({
    type: "object",
    properties: {
      message_ids: { type: "array", items: { type: "string" }, minItems: 1, maxItems: maxRecallIds, description: "The ids of the messages to return." },
    },
    required: ["message_ids"],
    additionalProperties: false,
  }),
});

export const searchHistoryDefinition: ToolDefinition = create(ToolDefinitionSchema, {
  name: searchHistoryToolName,
  description:
    "Search this conversation's earlier messages, including those left out of this prompt to fit its size, by words: file paths or their parts, commands, error messages, tool names, identifiers. Returns the best-matching messages with their ids and an excerpt of each.",
  parameters: JSON.stringify({
    type: "object",
    properties: {
      query: { type: "string", description: "Words to look for, for example a file name or a command." },
      max_results: { type: "integer", minimum: 1, maximum: maxRecallResults, description: `How many messages to return (default ${defaultRecallResults}).` },
    },
    required: ["query"],
    additionalProperties: false,
  }),
});

/**
 * The tool definitions with the recall tools appended. A definition already named like one of them
 * is INVALID_ARGUMENT naming its index, whether it came from the request or the store, and so is a
 * stateless compile (`conversationId` empty), which has no stored history to recall from.
 */
export function withRecallTools(definitions: readonly ToolDefinition[], conversationId: string): ToolDefinition[] {
  if (conversationId === "") {
    throw new ConnectError("recall_tools: needs a stateful compile (conversation_id set): a stateless compile has no stored history to recall from", Code.InvalidArgument);
  }
  definitions.forEach((definition, index) => {
    if (recallToolNames.includes(definition.name)) {
      throw new ConnectError(
        `tool_definitions[${index}]: the name "${definition.name}" is reserved for contextd's recall tools while recall_tools is on; rename the tool or turn recall_tools off`,
        Code.InvalidArgument,
      );
    }
  });
  return [...definitions, recallMessageDefinition, searchHistoryDefinition];
}

/** What a recall tool call asks for. */
export type RecallAsk = { kind: "ids"; ids: string[] } | { kind: "search"; query: string; maxResults: number };

/** The ask of a model's call of a recall tool: INVALID_ARGUMENT naming what is wrong with it. */
export function recallAskOfToolCall(name: string, argumentsJson: string): RecallAsk {
  if (!recallToolNames.includes(name)) {
    throw new ConnectError(`tool_call.name: "${name}" is not a recall tool (${recallToolNames.join(", ")})`, Code.InvalidArgument);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(argumentsJson === "" ? "{}" : argumentsJson);
  } catch {
    throw new ConnectError(`tool_call.arguments: not JSON text (${name} takes a JSON object)`, Code.InvalidArgument);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new ConnectError(`tool_call.arguments: ${name} takes a JSON object`, Code.InvalidArgument);
  }
  const fields = parsed as Record<string, unknown>;
  if (name === recallMessageToolName) {
    const ids = fields["message_ids"];
    if (!Array.isArray(ids) || ids.some((id) => typeof id !== "string")) {
      throw new ConnectError(`tool_call.arguments.message_ids: ${name} takes an array of message id strings`, Code.InvalidArgument);
    }
    return { kind: "ids", ids: ids as string[] };
  }
  const query = fields["query"];
  if (typeof query !== "string") throw new ConnectError(`tool_call.arguments.query: ${name} takes a query string`, Code.InvalidArgument);
  const maxResults = fields["max_results"] ?? 0;
  if (typeof maxResults !== "number" || !Number.isInteger(maxResults) || maxResults < 0) {
    throw new ConnectError(`tool_call.arguments.max_results: a non-negative integer, got ${JSON.stringify(maxResults)}`, Code.InvalidArgument);
  }
  return { kind: "search", query, maxResults };
}
