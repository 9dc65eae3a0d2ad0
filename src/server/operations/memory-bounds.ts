import { defaultToolResultTextBytes } from "../../application/tool-result-texts.js";
import { defaultMaxIdempotencyBytes } from "../../store/idempotency-records.js";
import type { Config } from "./config.js";

/**
 * What a sidecar keeps between calls, each with the byte bound its flags give it: the one list that
 * docs/limits.md ("Caches and what a sidecar keeps"), bench:fleet's million-turns section and the
 * memory test (test/server/operations/memory-bounds.test.ts) add up, so that "the heap is bounded
 * by the flags" names one sum. The in-memory store's conversations are data, not in this list.
 */
export interface MemoryBound {
  what: string;
  /** The flag that sets it, or "" for a fixed bound. */
  flag: string;
  bytes: number;
  /** When it fills: "always" for caches any turn fills; otherwise what must be in use. */
  fills: "always" | "redis or postgres" | "memory store" | "ReadToolResult" | "ReadMessages" | "Recall" | "WatchEvents subscribers" | "tracing";
}

export function memoryBounds(config: Config): MemoryBound[] {
  return [
    { what: "request messages handed out again", flag: "--recent-message-bytes", bytes: config.recentMessageBytes, fills: "always" },
    { what: "encodings of stored lists and messages", flag: "--retained-encoding-bytes", bytes: config.retainedEncodingBytes, fills: "always" },
    { what: "decoded states", flag: "--decoded-state-bytes", bytes: config.decodedStateBytes, fills: "redis or postgres" },
    { what: "kept tails of conversations committed on without a copy", flag: "--kept-tail-bytes", bytes: config.keptTailBytes, fills: "redis or postgres" },
    { what: "conversation ids written to the listing index (Redis)", flag: "--listed-id-bytes", bytes: config.listedIdBytes, fills: "redis or postgres" },
    { what: "conversation ids whose stored id index was found stale", flag: "--listed-id-bytes", bytes: config.listedIdBytes, fills: "redis or postgres" },
    { what: "homes of forks on Redis Cluster", flag: "--listed-id-bytes", bytes: config.listedIdBytes, fills: "redis or postgres" },
    { what: "history facts", flag: "--history-facts-bytes", bytes: config.historyFactsBytes, fills: "always" },
    { what: "token counts of texts", flag: "--token-count-text-bytes", bytes: config.tokenCountTextBytes, fills: "always" },
    { what: "last counted list per conversation start", flag: "--token-count-list-bytes", bytes: config.tokenCountListBytes, fills: "always" },
    { what: "last compiles for cache_impact", flag: "--cache-impact-bytes", bytes: config.cacheImpactBytes, fills: "always" },
    { what: "idempotency records", flag: "", bytes: defaultMaxIdempotencyBytes, fills: "memory store" },
    { what: "ReadToolResult encodings", flag: "", bytes: defaultToolResultTextBytes, fills: "ReadToolResult" },
    { what: "ReadMessages windows kept for page tokens", flag: "--read-pin-bytes", bytes: config.readPinBytes, fills: "ReadMessages" },
    { what: "Recall's kept terms of stored messages", flag: "--recall-index-bytes", bytes: config.recallIndexBytes, fills: "Recall" },
    { what: "WatchEvents queues (per tenant)", flag: "--telemetry-bytes", bytes: config.telemetryBytes, fills: "WatchEvents subscribers" },
    { what: "spans waiting for the collector", flag: "--trace-queue-bytes", bytes: config.traceQueueBytes, fills: "tracing" },
  ];
}

/** The bounds a sidecar on `store` fills by turning conversations alone (no readers of tool results, subscribers or tracing). */
export function turnMemoryBounds(config: Config, store: "memory" | "redis" | "postgres"): MemoryBound[] {
  return memoryBounds(config).filter((bound) => bound.fills === "always" || (bound.fills === "memory store" ? store === "memory" : bound.fills === "redis or postgres" && store !== "memory"));
}
