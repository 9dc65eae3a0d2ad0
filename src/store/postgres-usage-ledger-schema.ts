/**
 * The Postgres schema of the usage ledger (`UsageLedgerStore`), migration 10, kept beside the
 * ledger's queries rather than in postgres-schema.ts's list, which only names it (append only,
 * as every migration is).
 *
 * - `contextd_usage_conversations`: per `(tenant, conversation_id)` (UTF-8 as `bytea`) the sums
 *   (`usageSumFields`) and `next_seq`, the sequence number the next entry takes;
 * - `contextd_usage_entries`: per `(tenant, conversation_id, seq)` one kept entry
 *   (`encodeUsageEntry`) and its `report_id`, unique per conversation;
 * - `contextd_usage_tenants`: per tenant the sums over its conversations.
 *
 * `contextd_record_usage` records one report in one statement: it locks the conversation's row
 * (created when missing), answers a kept report id as a duplicate, else inserts the entry, drops
 * those past the bound and adds the report to both sums. Two reports of one conversation are
 * serialised by its row lock, and of one tenant by the tenant's row, so the sums are exact.
 */
export const usageLedgerMigration = {
  version: 10,
  name: "usage ledger: entries, conversation and tenant totals, the record function",
  sql: `
CREATE TABLE contextd_usage_conversations (
  tenant bytea NOT NULL,
  conversation_id bytea NOT NULL,
  reports bigint NOT NULL DEFAULT 0,
  input_tokens bigint NOT NULL DEFAULT 0,
  output_tokens bigint NOT NULL DEFAULT 0,
  cached_input_tokens bigint NOT NULL DEFAULT 0,
  compiled_tokens bigint NOT NULL DEFAULT 0,
  first_ms bigint NOT NULL DEFAULT 0,
  last_ms bigint NOT NULL DEFAULT 0,
  next_seq bigint NOT NULL DEFAULT 1,
  PRIMARY KEY (tenant, conversation_id)
);

CREATE TABLE contextd_usage_entries (
  tenant bytea NOT NULL,
  conversation_id bytea NOT NULL,
  seq bigint NOT NULL,
  report_id bytea NOT NULL,
  entry text NOT NULL,
  PRIMARY KEY (tenant, conversation_id, seq),
  UNIQUE (tenant, conversation_id, report_id)
);

CREATE TABLE contextd_usage_tenants (
  tenant bytea PRIMARY KEY,
  reports bigint NOT NULL DEFAULT 0,
  input_tokens bigint NOT NULL DEFAULT 0,
  output_tokens bigint NOT NULL DEFAULT 0,
  cached_input_tokens bigint NOT NULL DEFAULT 0,
  compiled_tokens bigint NOT NULL DEFAULT 0,
  first_ms bigint NOT NULL DEFAULT 0,
  last_ms bigint NOT NULL DEFAULT 0
);

CREATE FUNCTION contextd_record_usage(
  p_tenant bytea, p_id bytea, p_report bytea, p_entry text,
  p_input bigint, p_output bigint, p_cached bigint, p_compiled bigint, p_now_ms bigint, p_max_entries bigint)
RETURNS TABLE (outcome text, entry text, reports bigint, input_tokens bigint, output_tokens bigint, cached_input_tokens bigint, compiled_tokens bigint, first_ms bigint, last_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  r contextd_usage_conversations%ROWTYPE;
  v_kept text;
BEGIN
  INSERT INTO contextd_usage_conversations AS c (tenant, conversation_id) VALUES (p_tenant, p_id) ON CONFLICT DO NOTHING;
  SELECT * INTO r FROM contextd_usage_conversations c WHERE c.tenant = p_tenant AND c.conversation_id = p_id FOR UPDATE;
  SELECT e.entry INTO v_kept FROM contextd_usage_entries e WHERE e.tenant = p_tenant AND e.conversation_id = p_id AND e.report_id = p_report;
  IF FOUND THEN
    RETURN QUERY SELECT 'duplicate'::text, v_kept, r.reports, r.input_tokens, r.output_tokens, r.cached_input_tokens, r.compiled_tokens, r.first_ms, r.last_ms;
    RETURN;
  END IF;
  INSERT INTO contextd_usage_entries (tenant, conversation_id, seq, report_id, entry) VALUES (p_tenant, p_id, r.next_seq, p_report, p_entry);
  IF r.next_seq > p_max_entries THEN
    DELETE FROM contextd_usage_entries e WHERE e.tenant = p_tenant AND e.conversation_id = p_id AND e.seq <= r.next_seq - p_max_entries;
  END IF;
  UPDATE contextd_usage_conversations c SET
    reports = c.reports + 1,
    input_tokens = c.input_tokens + p_input,
    output_tokens = c.output_tokens + p_output,
    cached_input_tokens = c.cached_input_tokens + p_cached,
    compiled_tokens = c.compiled_tokens + p_compiled,
    first_ms = CASE WHEN c.reports = 0 THEN p_now_ms ELSE c.first_ms END,
    last_ms = p_now_ms,
    next_seq = c.next_seq + 1
  WHERE c.tenant = p_tenant AND c.conversation_id = p_id
  RETURNING c.* INTO r;
  INSERT INTO contextd_usage_tenants AS t (tenant, reports, input_tokens, output_tokens, cached_input_tokens, compiled_tokens, first_ms, last_ms)
    VALUES (p_tenant, 1, p_input, p_output, p_cached, p_compiled, p_now_ms, p_now_ms)
    ON CONFLICT (tenant) DO UPDATE SET
      reports = t.reports + 1,
      input_tokens = t.input_tokens + EXCLUDED.input_tokens,
      output_tokens = t.output_tokens + EXCLUDED.output_tokens,
      cached_input_tokens = t.cached_input_tokens + EXCLUDED.cached_input_tokens,
      compiled_tokens = t.compiled_tokens + EXCLUDED.compiled_tokens,
      last_ms = EXCLUDED.last_ms;
  RETURN QUERY SELECT 'ok'::text, NULL::text, r.reports, r.input_tokens, r.output_tokens, r.cached_input_tokens, r.compiled_tokens, r.first_ms, r.last_ms;
END
$$;
`,
};
