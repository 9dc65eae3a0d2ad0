import { create } from "@bufbuild/protobuf";
import type { Message } from "#gen/contextd/v1/message_pb";
import { DeltaSchema, type ConversationState, type Delta } from "#gen/contextd/v1/state_pb";
import { tenantOf } from "../core/model/conversation-tenant.js";

/**
 * The deployment's default prune: a bound on each conversation's history in messages and/or
 * bytes, per tenant or for all (`--prune-max-messages`, `--prune-max-bytes`,
 * `--prune-per-tenant`), which the commit engine keeps by adding a `prune_history` delta to a
 * batch whose result is past it, down to 90% of the bound (`lowWaterOf`). Why it exists: `Delta.prune_history` bounds a conversation only
 * when its caller remembers to send it; an operator bounding every conversation of a tenant would
 * otherwise rely on every agent. The prune is `prune_history`'s own (whole units, the newest kept,
 * one summary standing for what went), recorded in the commit's change like a delta the caller
 * sent, so Watch, the version history and every store see the same commit.
 */

/** One bound; 0 = no bound of that kind. */
export interface HistoryBoundLimits {
  maxMessages: number;
  maxBytes: number;
}

export interface HistoryBoundPolicy {
  /** The bound of a conversation whose tenant has none of its own. */
  defaultLimits: HistoryBoundLimits;
  /** Per tenant (the id's part before its first "/"), its bound; `{0, 0}` = none, whatever the default. */
  perTenant: ReadonlyMap<string, HistoryBoundLimits>;
}

export class HistoryBound {
  constructor(private readonly policy: HistoryBoundPolicy) {}

  /** Whether some conversation has a bound (a store plans commits on the stored tail only when none does). */
  get any(): boolean {
    return bounded(this.policy.defaultLimits) || [...this.policy.perTenant.values()].some(bounded);
  }

  /** The bound `conversationId` lives by, undefined for none. */
  limitsOf(conversationId: string): HistoryBoundLimits | undefined {
    const limits = this.policy.perTenant.get(tenantOf(conversationId)) ?? this.policy.defaultLimits;
    return bounded(limits) ? limits : undefined;
  }

  /**
   * The `prune_history` delta a commit that produced `state` adds, undefined while its history is
   * within the bound. Measuring costs what the bound allows, not the history: messages are counted
   * in O(1), bytes summed from the newest message back only until they pass `maxBytes`
   * (`sizeOf`: a message's protobuf encoding, the store's kept one when it has it).
   */
  pruneFor(conversationId: string, state: ConversationState, sizeOf: (message: Message) => number): Delta | undefined {
    const limits = this.limitsOf(conversationId);
    if (limits === undefined) return undefined;
    const history = state.history;
    // The summaries at the head are the boundary a prune leaves, not counted against the bound (as
    // `prune_history` counts what it keeps after its summary): a history pruned to the bound is
    // within it.
    let head = 0;
    while (head < history.length && history[head]!.provenance?.kind.case === "summary") head++;
    let over = limits.maxMessages > 0 && history.length - head > limits.maxMessages;
    if (!over && limits.maxBytes > 0) {
      let bytes = 0;
      for (let index = history.length - 1; index >= head && !over; index--) {
        bytes += sizeOf(history[index]!);
        over = bytes > limits.maxBytes;
      }
    }
    if (!over) return undefined;
    return create(DeltaSchema, { operation: { case: "pruneHistory", value: { maxMessages: lowWaterOf(limits.maxMessages), maxBytes: BigInt(lowWaterOf(limits.maxBytes)) } } });
  }
}

/**
 * What a prune keeps of a bound: 90% of it (at least one below it; 0 stays none). Why not the
 * bound itself: a prune walks the whole history (its tool rounds), so pruning back to the bound
 * made every later append prune again: 58.8 ms per one-message commit at a 10,000-message bound
 * in memory, beside 0.14 ms unbounded (`npm run bench:retention`). Pruned to 90%, the next tenth
 * of the bound's appends commit without a prune.
 */
export function lowWaterOf(bound: number): number {
  return bound === 0 ? 0 : Math.max(1, bound - Math.max(1, Math.floor(bound / 10)));
}

function bounded(limits: HistoryBoundLimits): boolean {
  return limits.maxMessages > 0 || limits.maxBytes > 0;
}
