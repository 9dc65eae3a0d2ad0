import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { IdentityPolicy, WritebackMessageSchema, type CompileRequest, type WritebackMessage } from "#gen/contextd/v1/compile_pb";
import type { Message } from "#gen/contextd/v1/message_pb";
import { Segment } from "#gen/contextd/v1/state_pb";
import { messageContentHash } from "../model/content-hash.js";

/** Where a message without an id sits, which decides how its id is derived and reported. */
export type IdentitySlot =
  | { kind: "segment"; segment: Segment; scope: string; index: number }
  | { kind: "deferred"; segment: Segment; scope: string; blockIndex: number; index: number }
  | { kind: "pending"; index: number }
  | { kind: "current_turn" };

/**
 * Assigns ids to messages that arrive without one (semantics §3 stage 1) and lists each assignment
 * for the writeback. One instance serves one compile: STABLE content ids count identical messages
 * per scope so two equal messages in a segment get different, reproducible ids.
 */
export class IdentityAssigner {
  readonly assigned: WritebackMessage[] = [];
  private readonly occurrences = new Map<string, number>();
  private readonly policy: IdentityPolicy;
  private readonly prefix: string;

  constructor(
    private readonly request: CompileRequest,
    private readonly randomId: () => string,
  ) {
    this.policy = request.identity?.policy ?? IdentityPolicy.UNSPECIFIED;
    this.prefix = request.identity?.prefix ?? "";
    if (IdentityPolicy[this.policy] === undefined) {
      throw new ConnectError(`identity.policy: unknown identity policy ${this.policy}`, Code.InvalidArgument);
    }
  }

  /**
   * The message with an id: unchanged when it has one, else a copy with an assigned id. STABLE
   * occurrence numbers count identical id-less messages in a scope; messages that already carry an
   * id (for example persisted from an earlier writeback) do not take part.
   */
  ensureId(message: Message, slot: IdentitySlot, path: string): Message {
    if (message.id !== "") return message;
    const id = this.newId(message, slot, path);
    this.assigned.push(writebackEntry(slot, id));
    return { ...message, id };
  }

  /** An id for the current turn, whose raw and prompt-safe forms share it. */
  currentTurnId(message: Message, path: string): string {
    const id = this.newId(message, { kind: "current_turn" }, path);
    this.assigned.push(writebackEntry({ kind: "current_turn" }, id));
    return id;
  }

  private newId(message: Message, slot: IdentitySlot, path: string): string {
    switch (this.policy) {
      case IdentityPolicy.UNSPECIFIED:
        if (this.request.identity?.requireDurable) {
          throw new ConnectError(
            `missing identity policy: ${path} has no id and identity.require_durable is set without identity.policy`,
            Code.FailedPrecondition,
          );
        }
        return this.randomId();
      case IdentityPolicy.RANDOM:
        return this.randomId();
      default:
        return this.stableId(message, slot, path);
    }
  }

  private stableId(message: Message, slot: IdentitySlot, path: string): string {
    if (slot.kind === "pending" || slot.kind === "current_turn") {
      if (this.request.turnId === "") {
        throw new ConnectError(`turn_id is required for STABLE ids of pending and current-turn messages (${path} has no id)`, Code.InvalidArgument);
      }
      const kind = slot.kind === "pending" ? "pending_event" : "current_turn";
      const ordinal = slot.kind === "pending" ? slot.index : 0;
      return "event:" + sha256Hex(JSON.stringify([this.prefix, this.request.turnId, kind, ordinal]));
    }
    // Content, scope and occurrence only: never the position, so trimming older history (or
    // adding newer) does not rename a message.
    const hash = messageContentHash(message);
    const key = slot.scope + "\u0000" + hash;
    const occurrence = this.occurrences.get(key) ?? 0;
    this.occurrences.set(key, occurrence + 1);
    return "msg:" + sha256Hex(JSON.stringify([this.prefix, slot.scope, hash, occurrence])).slice(0, 32);
  }
}

function writebackEntry(slot: IdentitySlot, id: string): WritebackMessage {
  switch (slot.kind) {
    case "segment":
      return create(WritebackMessageSchema, { segment: slot.segment, index: BigInt(slot.index), id });
    case "deferred":
      return create(WritebackMessageSchema, { segment: slot.segment, index: BigInt(slot.index), id, origin: `deferred_blocks[${slot.blockIndex}]` });
    case "pending":
      return create(WritebackMessageSchema, { index: BigInt(slot.index), id, origin: "pending" });
    case "current_turn":
      return create(WritebackMessageSchema, { index: 0n, id, origin: "current_turn" });
  }
}

function sha256Hex(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}
