import type { Role } from "#gen/contextd/v1/message_pb";

/**
 * Which payload message a body entry (a message, content, or input item) was rendered from, so a
 * validator can name the message id in its error. `role` is the payload role, which may differ
 * from the body role (Anthropic renders a TOOL message as a user turn).
 */
export interface BodyOrigin {
  messageId: string;
  role: Role;
}
