/**
 * Which tenant a conversation belongs to. Why it exists: the stores (expiry, default prunes,
 * idempotency records, encryption keys, the usage ledger) and the application (the usage ledger)
 * each need it and must agree with what `--auth-tokens-file` scopes a token to (a tenant's token
 * may only name ids starting with `<tenant>/`, server/policy/auth.ts); it was written three times.
 */

/** The tenant of a conversation id: the part before the first "/", "" for an id without one. */
export function tenantOf(conversationId: string): string {
  const slash = conversationId.indexOf("/");
  return slash < 0 ? "" : conversationId.slice(0, slash);
}
