import type { ServiceImpl } from "@connectrpc/connect";
import type { ConversationService } from "../../../gen/ts/contextd/v1/conversation_service_pb.js";

/** ConversationService: stored state and commits. Methods not listed answer UNIMPLEMENTED. */
export function conversationService(): Partial<ServiceImpl<typeof ConversationService>> {
  return {};
}
