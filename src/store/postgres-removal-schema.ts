/**
 * Migration 13 of the Postgres store: what a deleted or expired conversation leaves goes with it.
 * Kept beside the store's other schema files rather than in postgres-schema.ts's list, which only
 * names it (append only, as every migration is).
 *
 * `contextd_delete_rows` — the one function every removal goes through (`contextd_delete`, the
 * sweep's `contextd_delete_expired`, and a commit to an expired conversation no sweep reached yet)
 * — also deletes, in the same transaction:
 * - the conversation's idempotency records: a new conversation under the id must never be
 *   answered with the old one's commits (before, a retry after a delete answered `replayed` with
 *   the deleted conversation's version);
 * - its usage ledger: its entries and its totals (`contextd_usage_entries`,
 *   `contextd_usage_conversations`). The tenant's totals (`contextd_usage_tenants`) keep its
 *   reports: they are what the tenant used.
 * Each is one indexed `DELETE` per table (the primary keys start with the ids), so a removal costs
 * the rows it removes.
 */
export const removalMigration = {
  version: 13,
  name: "a removed conversation's idempotency records and usage ledger go with it",
  sql: `
-- The tenant a conversation id's ledger is kept under: its UTF-8 before the first '/' (a byte no
-- multibyte character contains), '' without one; as tenantOf in the sidecar.
CREATE FUNCTION contextd_tenant_of(p_id bytea) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN position('/'::bytea IN p_id) = 0 THEN ''::bytea ELSE substring(p_id FROM 1 FOR position('/'::bytea IN p_id) - 1) END
$$;

CREATE OR REPLACE FUNCTION contextd_delete_rows(p_ids bytea[]) RETURNS void LANGUAGE sql AS $$
  DELETE FROM contextd_messages m WHERE m.conversation_id = ANY(p_ids);
  DELETE FROM contextd_changes ch WHERE ch.conversation_id = ANY(p_ids);
  DELETE FROM contextd_message_ids x WHERE x.conversation_id = ANY(p_ids);
  DELETE FROM contextd_tool_calls t WHERE t.conversation_id = ANY(p_ids);
  DELETE FROM contextd_idempotency k WHERE k.conversation_id = ANY(p_ids);
  DELETE FROM contextd_usage_entries e USING unnest(p_ids) AS d(id) WHERE e.tenant = contextd_tenant_of(d.id) AND e.conversation_id = d.id;
  DELETE FROM contextd_usage_conversations u USING unnest(p_ids) AS d(id) WHERE u.tenant = contextd_tenant_of(d.id) AND u.conversation_id = d.id;
  DELETE FROM contextd_conversations c WHERE c.id = ANY(p_ids);
$$;
`,
};
