import { Role, type Message } from "#gen/contextd/v1/message_pb";
import type { CompiledPayload } from "#gen/contextd/v1/compile_pb";
import { analyzeToolRounds } from "../model/tool-rounds.js";

/** The payload field a message came from. */
export type PayloadSegment = "system" | "history" | "tools" | "memory" | "scratch";

/** A payload message with the segment it came from, in the order a provider body lists it. */
export interface OrderedMessage {
  message: Message;
  segment: PayloadSegment;
}

/**
 * The payload's messages in rendering order: system, history (with pending and the current turn),
 * tools, memory, then scratch last.
 *
 * One exception: when history ends in an open tool round (calls still waiting for results), the
 * tools, memory and scratch messages are placed just before that round's assistant message. Every
 * provider requires the results to follow the calls directly, so anything rendered after an open
 * round would break it; keeping the round at the very end is what "an open call may only be the
 * last assistant turn" (providers.md, invariant 2) allows.
 */
export function messagesInRenderingOrder(payload: CompiledPayload): OrderedMessage[] {
  const tagged = (messages: Message[], segment: PayloadSegment): OrderedMessage[] =>
    messages.map((message) => ({ message, segment }));
  const system = tagged(payload.system, "system");
  const history = tagged(payload.history, "history");
  const trailing = [...tagged(payload.tools, "tools"), ...tagged(payload.memory, "memory"), ...tagged(payload.scratch, "scratch")];
  const openRound = analyzeToolRounds(payload.history, { allowOpenTail: true }).openRound;
  if (openRound === undefined || trailing.length === 0) return [...system, ...history, ...trailing];
  return [...system, ...history.slice(0, openRound.start), ...trailing, ...history.slice(openRound.start)];
}

/** True for the roles that belong in a provider's system slot. */
export function isInstructionRole(role: Role): boolean {
  return role === Role.SYSTEM || role === Role.DEVELOPER;
}
