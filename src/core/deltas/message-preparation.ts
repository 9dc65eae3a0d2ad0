import { Code, ConnectError } from "@connectrpc/connect";
import { Role, type Message } from "../../../gen/ts/contextd/v1/message_pb.js";
import type { ConversationState } from "../../../gen/ts/contextd/v1/state_pb.js";
import type { DeltaContext } from "./delta-context.js";

/**
 * Readies messages a delta brings into the state: every message needs a role and parts whose
 * variant is set, messages without an id get one from the injected id source, and ids must stay
 * unique across all segments of the conversation (a compile of the state would reject duplicates).
 * `where` names the field the messages came from, for error messages ("messages", "results").
 * `defaultRole` fills an unset role where the operation implies one (append_user → USER).
 */
export function prepareMessages(
  state: ConversationState,
  messages: readonly Message[],
  context: DeltaContext,
  where: string,
  defaultRole?: Role,
  removedIds: ReadonlySet<string> = new Set(),
): Message[] {
  const taken = new Set<string>();
  for (const field of ["system", "history", "memory", "tools"] as const) {
    for (const message of state[field]) if (!removedIds.has(message.id)) taken.add(message.id);
  }
  return messages.map((message, index) => {
    const path = `${where}[${index}]`;
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
    const id = message.id === "" ? context.newMessageId() : message.id;
    if (taken.has(id)) throw new ConnectError(`${path}: duplicate message id "${id}"`, Code.InvalidArgument);
    taken.add(id);
    return id === message.id && role === message.role ? message : { ...message, id, role };
  });
}
