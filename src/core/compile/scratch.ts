import { Role, type Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { recordPassed, type CompileWork } from "./working-set.js";

/**
 * Stage 11: per-request notes go last, as SYSTEM, whatever role they came with. They are counted in
 * the budget's reserved tokens and never persisted.
 */
export function scratchMessages(work: CompileWork, scratch: readonly Message[]): Message[] {
  const messages = scratch.map((message) => (message.role === Role.SYSTEM ? message : { ...message, role: Role.SYSTEM }));
  recordPassed(work, messages, Segment.SYSTEM);
  return messages;
}
