import { Code, ConnectError } from "@connectrpc/connect";
import type { Message } from "#gen/contextd/v1/message_pb";
import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { withErrorDetails, ErrorReason } from "../core/model/error-details.js";
import { varintBytes } from "./message-windows.js";

export interface StateSizing {
  /** A stored message's encoding length without tag and length (the codec's kept encoding). */
  messageBytes: (message: Message) => number;
  /** The length of everything of a state but its segments and version (`Codec.encodeStateRest`). */
  restBytes: (state: ConversationState) => number;
}

/**
 * Refuses a `GetState` whose response would be larger than `limitBytes`, before it is encoded:
 * a response over the clients' receive limit fails there as a transport error ("message larger
 * than max") that names nothing the caller can act on. The sizes are added up message by message
 * and the count stops as soon as it passes the limit, so refusing a 50 MB state costs what
 * `limitBytes` of it costs, not the whole state.
 */
export function assertStateFits(state: ConversationState, limitBytes: number, sizing: StateSizing): void {
  let stateBytes = sizing.restBytes(state);
  if (state.version !== 0n) stateBytes += 1 + varintBytes(Number(state.version));
  for (const messages of [state.system, state.history, state.memory, state.tools]) {
    for (const message of messages) {
      const length = sizing.messageBytes(message);
      stateBytes += 1 + varintBytes(length) + length;
      if (stateBytes > limitBytes) throw stateTooLarge(state, limitBytes);
    }
  }
  // GetStateResponse.state: a one-byte tag and the length.
  if (1 + varintBytes(stateBytes) + stateBytes > limitBytes) throw stateTooLarge(state, limitBytes);
}

/**
 * One server's GetState limit: `assertStateFits` against the message limit, remembering the
 * stored states already found to fit. States are immutable, so a GetState of a state read before
 * sizes nothing again; the set is weak, so it keeps no state alive that the store has let go.
 */
export class StateSizeLimit {
  private readonly fitting = new WeakSet<ConversationState>();

  constructor(
    readonly limitBytes: number,
    private readonly sizing: StateSizing,
  ) {}

  /** Refuses a stored state (as the store handed it out) over the limit; sizes each state once. */
  assertStoredFits(state: ConversationState): void {
    if (this.fitting.has(state)) return;
    assertStateFits(state, this.limitBytes, this.sizing);
    this.fitting.add(state);
  }

  /** Refuses a state built for one answer (a state without its messages) over the limit. */
  assertFits(state: ConversationState): void {
    assertStateFits(state, this.limitBytes, this.sizing);
  }
}

function stateTooLarge(state: ConversationState, limitBytes: number): ConnectError {
  const messages = state.system.length + state.history.length + state.memory.length + state.tools.length;
  const error = new ConnectError(
    `conversation "${state.conversationId}" (version ${state.version}, ${messages} messages) is larger than the message limit of ${limitBytes} bytes ` +
      `(--max-request-bytes): read its messages in pages with ConversationService.ReadMessages`,
    Code.ResourceExhausted,
  );
  return withErrorDetails(error, ErrorReason.stateTooLarge, {
    metadata: { limit_bytes: String(limitBytes), flag: "--max-request-bytes", read_with: "contextd.v1.ConversationService.ReadMessages", version: String(state.version), messages: String(messages) },
  });
}
