import type { ConversationState } from "#gen/contextd/v1/state_pb";
import { tenantOf } from "../core/model/conversation-tenant.js";

/**
 * When a conversation expires: its last commit plus its idle TTL, the conversation's own
 * (`ConversationState.idle_ttl_ms`) or else its tenant's default (`--idle-ttl-ms`,
 * `--idle-ttl-per-tenant`). Why it exists: every store computes the same expiry at commit time
 * (the one commit engine asks this) and keeps it beside the conversation, each expiring it its
 * own way (memory: a bounded sweep, Redis: key expiry, Postgres: a reader that treats it as
 * absent and a batched delete); the tenant rule and the TTL's meaning live here once.
 */

export interface IdleTtlPolicy {
  /** Idle TTL of a conversation whose tenant has no override, in ms; 0 = never expire. */
  defaultMs: number;
  /** Per tenant (the id's part before its first "/"), the idle TTL in ms; 0 = never. */
  perTenant: ReadonlyMap<string, number>;
}

/** How many expired conversations one sweep batch removes; stores yield to the event loop between batches. */
export const expirySweepBatch = 100;
/** Batches one sweep runs at most before it waits for the next interval. */
export const expirySweepBatches = 10;
/** How often stores sweep expired conversations by default, in ms. */
export const defaultExpirySweepMs = 1_000;

export class ConversationExpiry {
  constructor(private readonly policy: IdleTtlPolicy = { defaultMs: 0, perTenant: new Map() }) {}

  /** The idle TTL `state` lives by, in ms; 0 = never. */
  ttlOf(conversationId: string, state: ConversationState): number {
    if (state.idleTtlMs === -1n) return 0;
    if (state.idleTtlMs > 0n) return Number(state.idleTtlMs);
    const tenant = tenantOf(conversationId);
    return this.policy.perTenant.get(tenant) ?? this.policy.defaultMs;
  }

  /** When a conversation committed at `committedAtUnixMs` as `state` expires (Unix ms); 0n = never. */
  expiresAt(conversationId: string, state: ConversationState, committedAtUnixMs: bigint): bigint {
    const ttl = this.ttlOf(conversationId, state);
    return ttl === 0 ? 0n : committedAtUnixMs + BigInt(ttl);
  }
}

/** Whether a conversation that expires at `expiresAtUnixMs` (0n = never) has expired at `nowMs`. */
export function hasExpired(expiresAtUnixMs: bigint, nowMs: number): boolean {
  return expiresAtUnixMs > 0n && expiresAtUnixMs <= BigInt(nowMs);
}
