import { Code, ConnectError } from "@connectrpc/connect";
import { Role, type Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import type { ConversationState } from "../../../gen/ts/contextd/v1/state_pb.js";
import { assertMessageJsonDepth } from "../model/json-depth.js";
import { assertToolArgumentsAreObjects, firstInvalidToolCall, keepsStoredInvalidCalls } from "../model/tool-call-arguments.js";
import type { DeltaContext, MessageIdLookup } from "./delta-context.js";

/**
 * Readies messages a delta brings into the state: every message needs a role and parts whose
 * variant is set, tool-call arguments must be JSON objects (what providers take; a call stored
 * otherwise could never be rendered), messages without an id get one from the injected id source,
 * and ids must stay unique across all segments of the conversation (a compile of the state would
 * reject duplicates).
 * `where` names the field the messages came from, for error messages ("messages", "results"); a
 * singular message field ("message", "assistant", "summary") is named without an index, as the
 * field path of a BadRequest violation must be (`append_user.message.role`).
 * `defaultRole` fills an unset role where the operation implies one (append_user → USER).
 * `replacedMessages` (replace_segment: the segment being replaced) may be stored again with the
 * invalid tool-call arguments they already had.
 */
const singularMessageFields: ReadonlySet<string> = new Set(["message", "assistant", "summary"]);

export function prepareMessages(
  state: ConversationState,
  messages: readonly Message[],
  context: DeltaContext,
  where: string,
  defaultRole?: Role,
  removedIds: ReadonlySet<string> = new Set(),
  replacedMessages: readonly Message[] = [],
  batchId?: string,
): Message[] {
  const inConversation = conversationHasId(state, removedIds, messages.length, context.messageIds?.(state));
  // `batchId`: a message the same delta brings before these (append_tool_round's assistant).
  const inBatch = new Set<string>(batchId === undefined ? [] : [batchId]);
  return messages.map((message, index) => {
    const path = singularMessageFields.has(where) ? where : `${where}[${index}]`;
    let role = message.role;
    if (role === Role.UNSPECIFIED) {
      if (defaultRole === undefined) throw new ConnectError(`${path}.role is required`, Code.InvalidArgument);
      role = defaultRole;
    } else if (defaultRole !== undefined && role !== defaultRole) {
      throw new ConnectError(`${path}.role must be ${Role[defaultRole]} or unset, got ${Role[role] ?? role}`, Code.InvalidArgument);
    }
    message.parts.forEach((part, partIndex) => {
      if (part.kind.case === undefined) {
        throw new ConnectError(`${path}.parts[${partIndex}]: no content variant set`, Code.InvalidArgument);
      }
    });
    // Nothing stored may be too deep to render later.
    assertMessageJsonDepth(message, path);
    const id = message.id === "" ? context.newMessageId() : message.id;
    if (firstInvalidToolCall(message) && !keepsStoredInvalidCalls(message, replacedMessages)) assertToolArgumentsAreObjects(message, path, id);
    if (inBatch.has(id) || inConversation(id)) throw new ConnectError(`${path}: duplicate message id "${id}"`, Code.InvalidArgument);
    inBatch.add(id);
    return id === message.id && role === message.role ? message : { ...message, id, role };
  });
}

const segmentFields = ["system", "history", "memory", "tools"] as const;

/** Up to this many incoming messages, their ids are looked for in place instead of indexed. */
const largestBatchLookedUpInPlace = 8;

/**
 * Whether a message of the conversation other than those in `removedIds` has the id. A commit
 * usually brings one or two messages into a long conversation: looking for those few ids in place
 * costs ~2 µs at 1,000 messages, where indexing every id first cost ~50 µs, half of a commit's CPU
 * outside Redis. Larger batches (a replace_segment, an import) get the index.
 */
function conversationHasId(state: ConversationState, removedIds: ReadonlySet<string>, incoming: number, indexed: MessageIdLookup | undefined): (id: string) => boolean {
  if (indexed) return (id) => !removedIds.has(id) && indexed.has(id);
  if (incoming > largestBatchLookedUpInPlace) {
    const ids = new Set<string>();
    for (const field of segmentFields) for (const message of state[field]) if (!removedIds.has(message.id)) ids.add(message.id);
    return (id) => ids.has(id);
  }
  return (id) => {
    if (removedIds.has(id)) return false;
    for (const field of segmentFields) {
      const messages = state[field];
      for (let index = 0; index < messages.length; index++) if (messages[index]!.id === id) return true;
    }
    return false;
  };
}
