import { createContextKey } from "@connectrpc/connect";

/**
 * Per-call values shared by the interceptors and services through connect's context values.
 * The request id is set by the HTTP layer (`server.ts`) before connect sees the request.
 */
export const requestIdKey = createContextKey<string>("", { description: "contextd request id" });

/** The tenant of the caller's token; empty = unscoped (no auth, or a token without a tenant). */
export const tenantKey = createContextKey<string>("", { description: "contextd tenant" });
