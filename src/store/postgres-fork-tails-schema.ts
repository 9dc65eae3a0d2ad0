/**
 * Migration 18 of the Postgres store: a fork at any past version shares, per segment, the longest
 * prefix of the source's current rows the past segment starts with, and writes only the rest (its
 * "tail") as its own rows. Why: `contextd_fork_linked` shares only prefixes of the current
 * segments, so a fork at a version before a rewind, a removal or a compaction went through the
 * engine, every message written again (2.8-6.1 s at 100,000 messages, bench/fork.ts,
 * docs/history.md "Migration 18").
 *
 * `contextd_fork_tailed`: `contextd_fork_linked`'s 13 arguments (`p_lengths` the shared lengths),
 * then the tail, all in one call (one transaction):
 * - `p_tail_segments`, `p_tail_messages`, `p_tail_ids`: per tail message its segment (0-3), its
 *   encoding (sealed for the fork under encryption) and its id's UTF-8; a segment's messages in
 *   their order (the sidecar sends them segment after segment);
 * - `p_call_ids`, `p_call_names`, `p_call_at`: per call the history tail's ASSISTANT messages make,
 *   its id and name (UTF-8) and the 0-based place in the history tail of the message making it.
 * On 'ok' the tail goes to the fork's own storage (the header's `COALESCE(storage, id)`) right
 * after what it shares: position `segment_first + shared + k` for the k-th (0-based, in array
 * order) message of a segment's tail, `segment_length` raised by the tail's length. The shared
 * rows are read through the links `contextd_fork_linked` made, clipped at the shared length, so
 * the two never overlap.
 * When the fork's index is current (`ids_at` 1: the source's was, and the rows are linked, not
 * copied) the tail's ids go to `contextd_stored_ids` and the history tail's calls to
 * `contextd_stored_calls` in the same storage, so its first commits plan on the stored tail; else
 * (`ids_at` 0) the fork's first commit writes its index whole, as for any stale index. Any other
 * outcome writes nothing of the tail. Arguments that do not fit together raise
 * `invalid_parameter_value` (a sidecar's bug) before anything is written.
 *
 * Rolling upgrade: nothing of a previous release changes; its sidecars keep calling
 * `contextd_fork_linked` and `contextd_fork_shared`, as they were (forks at past versions that are
 * no prefix then go through their engine). A fork with a tail is a header with links and rows of
 * its own storage, as any fork after its first commit is, so every release's reads and commits
 * take it as they are.
 */
export const forkTailsMigration = {
  version: 18,
  name: "a fork at any past version shares the longest prefix the source still holds and writes the rest as its own rows",
  sql: `
CREATE FUNCTION contextd_fork_tailed(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest bytea, p_rest_suffix bytea,
  p_lengths integer[], p_title text, p_labels jsonb, p_change bytea, p_now_ms bigint, p_notify text, p_copies boolean,
  p_tail_segments smallint[], p_tail_messages bytea[], p_tail_ids bytea[], p_call_ids bytea[], p_call_names bytea[], p_call_at integer[]
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_outcome text;
  v_first bigint[];
  v_shared integer[];
  v_ids_at bigint;
  v_own bytea;
  v_tails integer[];
BEGIN
  IF p_tail_segments IS NULL OR p_tail_messages IS NULL OR p_tail_ids IS NULL OR p_call_ids IS NULL OR p_call_names IS NULL OR p_call_at IS NULL THEN
    RAISE EXCEPTION 'contextd_fork_tailed: the tail and call arrays may be empty, not NULL' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF cardinality(p_tail_messages) <> cardinality(p_tail_segments) OR cardinality(p_tail_ids) <> cardinality(p_tail_segments) THEN
    RAISE EXCEPTION 'contextd_fork_tailed: % tail segments, % messages and % ids: one of each per tail message',
      cardinality(p_tail_segments), cardinality(p_tail_messages), cardinality(p_tail_ids) USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF cardinality(p_call_names) <> cardinality(p_call_ids) OR cardinality(p_call_at) <> cardinality(p_call_ids) THEN
    RAISE EXCEPTION 'contextd_fork_tailed: % call ids, % names and % places: one of each per call',
      cardinality(p_call_ids), cardinality(p_call_names), cardinality(p_call_at) USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Each check one pass over the arrays (a join of two of them, planned as a nested loop, took
  -- 22 s at 20,000 messages).
  IF EXISTS (SELECT 1 FROM unnest(p_tail_segments, p_tail_messages, p_tail_ids) AS t(segment, message, id)
      WHERE t.segment IS NULL OR t.segment NOT BETWEEN 0 AND 3 OR t.message IS NULL OR t.id IS NULL) THEN
    RAISE EXCEPTION 'contextd_fork_tailed: a tail message has no segment 0-3, no encoding or no id' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT array_agg((SELECT count(*) FROM unnest(p_tail_segments) AS t(segment) WHERE t.segment = g.segment)::integer ORDER BY g.segment)
    INTO v_tails FROM generate_series(0, 3) AS g(segment);
  IF EXISTS (SELECT 1 FROM unnest(p_call_ids, p_call_names, p_call_at) AS c(id, name, at)
      WHERE c.id IS NULL OR c.name IS NULL OR c.at IS NULL OR c.at < 0 OR c.at >= v_tails[2]) THEN
    RAISE EXCEPTION 'contextd_fork_tailed: a call is made at no message of the history tail (% messages), or has no id or name', v_tails[2]
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_outcome := contextd_fork_linked(p_source, p_version, p_target, p_created, p_rest, p_rest_suffix, p_lengths, p_title, p_labels, p_change, p_now_ms, p_notify, p_copies);
  IF v_outcome <> 'ok' OR cardinality(p_tail_segments) = 0 THEN RETURN v_outcome; END IF;
  SELECT c.segment_first, c.segment_length, c.ids_at, COALESCE(c.storage, c.id) INTO v_first, v_shared, v_ids_at, v_own
    FROM contextd_conversations c WHERE c.id = p_target FOR UPDATE;
  INSERT INTO contextd_messages (conversation_id, segment, position, message)
    SELECT v_own, t.segment, v_first[t.segment + 1] + v_shared[t.segment + 1] + t.k, t.message
    FROM (SELECT u.segment, u.message, (row_number() OVER (PARTITION BY u.segment ORDER BY u.n) - 1) AS k
          FROM unnest(p_tail_segments, p_tail_messages) WITH ORDINALITY AS u(segment, message, n)) t;
  IF v_ids_at = 1 THEN
    INSERT INTO contextd_stored_ids AS x (storage, message_id, segment, position)
      SELECT v_own, t.id, t.segment, v_first[t.segment + 1] + v_shared[t.segment + 1] + t.k
      FROM (SELECT u.segment, u.id, (row_number() OVER (PARTITION BY u.segment ORDER BY u.n) - 1) AS k
            FROM unnest(p_tail_segments, p_tail_ids) WITH ORDINALITY AS u(segment, id, n)) t
      ON CONFLICT (storage, message_id) DO UPDATE SET segment = EXCLUDED.segment, position = EXCLUDED.position;
    INSERT INTO contextd_stored_calls AS s (storage, call_id, position, name)
      SELECT v_own, c.id, v_first[2] + v_shared[2] + c.at, c.name FROM unnest(p_call_ids, p_call_names, p_call_at) AS c(id, name, at)
      ON CONFLICT (storage, call_id, position) DO UPDATE SET name = EXCLUDED.name;
  END IF;
  UPDATE contextd_conversations c SET segment_length = ARRAY(SELECT v_shared[g] + v_tails[g] FROM generate_series(1, 4) AS g ORDER BY g)
    WHERE c.id = p_target;
  RETURN 'ok';
END
$$;
`,
};
