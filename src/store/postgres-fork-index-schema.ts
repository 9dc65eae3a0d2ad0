/**
 * Migration 15 of the Postgres store: a fork at the source's current version gets the source's
 * id index (`contextd_message_ids`, `contextd_tool_calls`, migration 11) in the fork's statement.
 * Why: migration 14's fork left the fork's `ids_at` 0, so its first commit planned on the stored
 * tail found the index stale and read the fork whole, and the next wrote the index whole: 1.10 s
 * and 0.74 s at 100,000 messages beside a 1 ms bare commit (bench/fork.ts, docs/history.md).
 * Here the rows cross no wire (`INSERT … SELECT` of the source's rows, O(messages) inside the
 * database, measured in docs/history.md) and the fork's first commits cost what the source's do.
 * A fork at a past version, or of a source whose index is stale, leaves the fork's index stale
 * as before: its first commit rebuilds it, once.
 *
 * Additive: `contextd_fork_indexed` takes `contextd_fork_shared`'s arguments and answers and calls
 * it, so a sidecar of the previous release (calling `contextd_fork_shared` or `contextd_fork`)
 * still forks as before, with a stale index its next commit rebuilds.
 */
export const forkIndexMigration = {
  version: 15,
  name: "a fork at the current version copies its source's current id index",
  sql: `
-- contextd_fork_shared, then, when it forked the source's current version whole and the source's
-- index is current (ids_at its version: contextd_fork_shared holds its header FOR SHARE, so no
-- commit moves it before this transaction ends), the source's index rows as the fork's, ids_at 1.
CREATE FUNCTION contextd_fork_indexed(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest bytea, p_rest_suffix bytea,
  p_lengths integer[], p_title text, p_labels jsonb, p_change bytea, p_now_ms bigint, p_notify text
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_outcome text;
BEGIN
  v_outcome := contextd_fork_shared(p_source, p_version, p_target, p_created, p_rest, p_rest_suffix, p_lengths, p_title, p_labels, p_change, p_now_ms, p_notify);
  IF v_outcome <> 'ok' OR p_lengths IS NOT NULL THEN RETURN v_outcome; END IF;
  IF NOT EXISTS (SELECT 1 FROM contextd_conversations c WHERE c.id = p_source AND c.version = p_version AND c.ids_at = p_version) THEN RETURN v_outcome; END IF;
  -- Rows a conversation of the fork's id left behind would make the index claim ids it lacks.
  DELETE FROM contextd_message_ids x WHERE x.conversation_id = p_target;
  DELETE FROM contextd_tool_calls t WHERE t.conversation_id = p_target;
  INSERT INTO contextd_message_ids (conversation_id, message_id) SELECT p_target, x.message_id FROM contextd_message_ids x WHERE x.conversation_id = p_source;
  INSERT INTO contextd_tool_calls (conversation_id, call_id, name) SELECT p_target, t.call_id, t.name FROM contextd_tool_calls t WHERE t.conversation_id = p_source;
  UPDATE contextd_conversations c SET ids_at = 1 WHERE c.id = p_target;
  RETURN v_outcome;
END
$$;
`,
};
