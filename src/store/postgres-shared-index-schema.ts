import { maxLinks } from "./postgres-shared-rows-schema.js";

/**
 * Migration 16 of the Postgres store: the id index is kept per storage, as the rows are, so a fork
 * shares it as it shares the rows and writes no index row. Why: migration 15 copied the source's
 * index rows (`contextd_message_ids`, `contextd_tool_calls`: one per message id, per call) as the
 * fork's with `INSERT … SELECT`, so a fork of 100,000 messages cost 211 ms against ~1 ms before
 * (bench/fork.ts, docs/history.md "Migration 15"), whether or not it was ever committed to.
 *
 * - `contextd_stored_ids`: per (storage, message id) the segment and position of the row holding it.
 *   A storage's rows have distinct ids (they were all live in one conversation at once: a writer
 *   deletes rows only in a storage no one else reads, and moves off one that is read before it
 *   cuts it), so the key is (storage, message id). Index rows mirror message rows: written with
 *   them, deleted with them (a commit's removed ids in its own storage, a whole storage when its
 *   rows go).
 * - `contextd_stored_calls`: per (storage, call id, position) the name, one row per history
 *   ASSISTANT message making the call; a conversation's latest call of an id is the one at the
 *   highest position it reads.
 * - A conversation holds an id when its own storage has it in the segment's live range, or a link
 *   has it in the link's range: one primary-key lookup per storage it reads (at most 1 + 64).
 * - `ids_at` keeps its meaning (the version at which every row the conversation reads is
 *   indexed); a fork's is 1 when its source's is current and it shares the rows (at the latest
 *   version or a prefix of it), so its first commits plan on the stored tail with no whole read.
 *
 * The commit this build calls is `contextd_commit_shared`: `contextd_commit_listened`'s arguments
 * and answers plus `p_call_at`, per call the (1-based) position in `p_added` of the message making
 * it, so the index knows where each call is. Positions of ids come from `p_added` itself: in modes
 * 'a' and 't' it lists the written messages' ids in the order of `p_starts` (stored-id-index.ts),
 * in mode 'b' every id of the new state in segment order.
 *
 * Existing data: the old tables have no positions (and a message row's id is inside its protobuf
 * bytes, sealed under encryption at rest), so they cannot become storage rows here; they are
 * dropped and every conversation's `ids_at` set to 0: the first commit of each (from a process
 * without its copy: a whole read; from a warm one: its next commit writes the index whole) builds
 * the new index, once, as after migration 11.
 *
 * Rolling upgrade: a sidecar of the previous release calls `contextd_commit_listened`,
 * `contextd_commit_tail`, `contextd_fork_indexed` and `contextd_delete_rows`, replaced here in
 * place with the same arguments and answers. Its commits keep the ids; a commit of it that names
 * calls (it sends no `p_call_at`) leaves the index stale (`ids_at` behind), for a commit of this
 * release to write whole.
 */
/** postgres-schema.ts's listenersLockKey, as a literal (that module lists this migration; the key never changes). */
const listenersLock = "7166485279764870254";

export const sharedIndexMigration = {
  version: 16,
  name: "the id index kept per storage, shared by forks as the rows are",
  sql: `
CREATE TABLE contextd_stored_ids (
  storage bytea NOT NULL,
  message_id bytea NOT NULL,
  segment smallint NOT NULL,
  position bigint NOT NULL,
  PRIMARY KEY (storage, message_id)
);

CREATE TABLE contextd_stored_calls (
  storage bytea NOT NULL,
  call_id bytea NOT NULL,
  position bigint NOT NULL,
  name bytea NOT NULL,
  PRIMARY KEY (storage, call_id, position)
);
-- What a cut of history deletes: the calls of a position range of one storage.
CREATE INDEX contextd_stored_calls_position ON contextd_stored_calls (storage, position);

DROP TABLE contextd_message_ids;
DROP TABLE contextd_tool_calls;
UPDATE contextd_conversations SET ids_at = 0 WHERE ids_at <> 0;

-- The storage holding the row at (p_segment, p_position) of a conversation writing in p_own and
-- reading p_links: its own where it has the row, else the link covering the position.
CREATE FUNCTION contextd_row_storage(p_own bytea, p_segment smallint, p_position bigint, p_links contextd_link[]) RETURNS bytea LANGUAGE sql STABLE AS $$
  SELECT COALESCE(
    (SELECT p_own WHERE EXISTS (SELECT 1 FROM contextd_messages m WHERE m.conversation_id = p_own AND m.segment = p_segment AND m.position = p_position)),
    (SELECT l.storage FROM unnest(p_links) AS l WHERE l.segment = p_segment AND p_position >= l.lo AND p_position < l.hi LIMIT 1),
    p_own)
$$;

-- Every id of a state in segment order (p_ids), with its segment and position under p_first and
-- p_length; n is its 1-based place in p_ids.
CREATE FUNCTION contextd_state_positions(p_ids bytea[], p_first bigint[], p_length integer[])
RETURNS TABLE (n integer, message_id bytea, segment smallint, at_position bigint) LANGUAGE sql IMMUTABLE AS $$
  SELECT a.n::integer, a.id, s.segment::smallint, p_first[s.segment + 1] + a.n - 1 - s.before
  FROM unnest(p_ids) WITH ORDINALITY AS a(id, n)
  JOIN (SELECT g.segment, COALESCE((SELECT sum(p_length[k]) FROM generate_series(1, g.segment) AS k), 0)::bigint AS before
        FROM generate_series(0, 3) AS g(segment)) s
    ON a.n > s.before AND a.n <= s.before + p_length[s.segment + 1]
$$;

-- The ids a conversation's index holds (its own storage's in the live ranges, each link's in its
-- range): what a test or an operator compares with the state.
CREATE FUNCTION contextd_indexed_ids(p_id bytea) RETURNS TABLE (message_id bytea) LANGUAGE sql STABLE AS $$
  SELECT x.message_id FROM contextd_conversations c JOIN contextd_stored_ids x ON x.storage = COALESCE(c.storage, c.id)
    WHERE c.id = p_id AND x.position >= c.segment_first[x.segment + 1] AND x.position < c.segment_first[x.segment + 1] + c.segment_length[x.segment + 1]
  UNION ALL
  SELECT x.message_id FROM contextd_conversations c CROSS JOIN LATERAL unnest(c.links) AS l JOIN contextd_stored_ids x ON x.storage = l.storage
    WHERE c.id = p_id AND x.segment = l.segment AND x.position >= l.lo AND x.position < l.hi
$$;

-- The name of the latest call of p_call_id in the history a conversation writing in p_own reads
-- (live range [p_lo, p_hi) of its own storage, and p_links); NULL when none.
CREATE FUNCTION contextd_latest_call(p_own bytea, p_lo bigint, p_hi bigint, p_links contextd_link[], p_call_id bytea) RETURNS bytea LANGUAGE sql STABLE AS $$
  SELECT c.name FROM (
    SELECT t.position, t.name FROM contextd_stored_calls t WHERE t.storage = p_own AND t.call_id = p_call_id AND t.position >= p_lo AND t.position < p_hi
    UNION ALL
    SELECT t.position, t.name FROM unnest(p_links) AS l JOIN contextd_stored_calls t ON t.storage = l.storage AND t.call_id = p_call_id AND t.position >= l.lo AND t.position < l.hi
      WHERE l.segment = 1
  ) c ORDER BY c.position DESC LIMIT 1
$$;

-- Per call id a conversation's history makes, its latest call's name (as contextd_indexed_ids).
CREATE FUNCTION contextd_indexed_calls(p_id bytea) RETURNS TABLE (call_id bytea, name bytea) LANGUAGE sql STABLE AS $$
  SELECT d.call_id, contextd_latest_call(COALESCE(c.storage, c.id), c.segment_first[2], c.segment_first[2] + c.segment_length[2], c.links, d.call_id)
  FROM contextd_conversations c CROSS JOIN LATERAL (
    SELECT t.call_id FROM contextd_stored_calls t WHERE t.storage = COALESCE(c.storage, c.id)
    UNION SELECT t.call_id FROM unnest(c.links) AS l JOIN contextd_stored_calls t ON t.storage = l.storage WHERE l.segment = 1) d
  WHERE c.id = p_id AND contextd_latest_call(COALESCE(c.storage, c.id), c.segment_first[2], c.segment_first[2] + c.segment_length[2], c.links, d.call_id) IS NOT NULL
$$;

-- Migration 14's, a released storage's index rows going with its rows.
CREATE OR REPLACE FUNCTION contextd_release_storages(p_storages bytea[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_storage bytea;
BEGIN
  FOR v_storage IN SELECT DISTINCT s FROM unnest(p_storages) AS s ORDER BY 1 LOOP
    PERFORM contextd_lock_storage(v_storage);
    IF NOT EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = v_storage)
      AND NOT EXISTS (SELECT 1 FROM contextd_conversations c WHERE c.id = contextd_storage_owner(v_storage) AND COALESCE(c.storage, c.id) = v_storage) THEN
      DELETE FROM contextd_messages m WHERE m.conversation_id = v_storage;
      DELETE FROM contextd_stored_ids x WHERE x.storage = v_storage;
      DELETE FROM contextd_stored_calls t WHERE t.storage = v_storage;
    END IF;
  END LOOP;
END
$$;

-- Migration 14's, the own storage's index rows going with its rows.
CREATE OR REPLACE FUNCTION contextd_delete_rows(p_ids bytea[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_own bytea;
  v_released bytea[];
BEGIN
  FOR v_own IN SELECT COALESCE(c.storage, c.id) FROM contextd_conversations c WHERE c.id = ANY(p_ids) ORDER BY 1 LOOP
    PERFORM contextd_lock_storage(v_own);
    IF NOT EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = v_own) THEN
      DELETE FROM contextd_messages m WHERE m.conversation_id = v_own;
      DELETE FROM contextd_stored_ids x WHERE x.storage = v_own;
      DELETE FROM contextd_stored_calls t WHERE t.storage = v_own;
    END IF;
  END LOOP;
  WITH gone AS (DELETE FROM contextd_storage_references r WHERE r.reader = ANY(p_ids) RETURNING r.storage)
    SELECT array_agg(gone.storage) INTO v_released FROM gone;
  DELETE FROM contextd_changes ch WHERE ch.conversation_id = ANY(p_ids);
  DELETE FROM contextd_idempotency k WHERE k.conversation_id = ANY(p_ids);
  DELETE FROM contextd_usage_entries e USING unnest(p_ids) AS d(id) WHERE e.tenant = contextd_tenant_of(d.id) AND e.conversation_id = d.id;
  DELETE FROM contextd_usage_conversations u USING unnest(p_ids) AS d(id) WHERE u.tenant = contextd_tenant_of(d.id) AND u.conversation_id = d.id;
  DELETE FROM contextd_conversations c WHERE c.id = ANY(p_ids);
  IF v_released IS NOT NULL THEN PERFORM contextd_release_storages(v_released); END IF;
END
$$;

-- Migration 14's contextd_fork_shared, arguments and outcomes the same: a fork that shares the
-- rows shares their index too (ids_at 1 when the source's is current); one that copies the rows
-- (past ${maxLinks} links) starts with a stale index, rebuilt by its first commit.
CREATE OR REPLACE FUNCTION contextd_fork_shared(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest bytea, p_rest_suffix bytea,
  p_lengths integer[], p_title text, p_labels jsonb, p_change bytea, p_now_ms bigint, p_notify text
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_source contextd_conversations%ROWTYPE;
  v_own bytea;
  v_lengths integer[];
  v_links contextd_link[];
  v_storage bytea;
  v_copy boolean;
  v_read bytea;
  i integer;
BEGIN
  SELECT * INTO v_source FROM contextd_conversations c WHERE c.id = p_source FOR SHARE;
  IF NOT FOUND OR v_source.version <> p_version THEN RETURN 'moved'; END IF;
  IF v_source.expires_at_ms <> 0 THEN RETURN 'moved'; END IF;
  v_lengths := COALESCE(p_lengths, v_source.segment_length);
  v_own := COALESCE(v_source.storage, v_source.id);
  v_links := v_source.links;
  FOR i IN 1..4 LOOP
    IF v_lengths[i] < 0 OR v_lengths[i] > v_source.segment_length[i] THEN RETURN 'moved'; END IF;
    IF v_lengths[i] < v_source.segment_length[i] THEN
      v_links := contextd_clipped_links(v_links, (i - 1)::smallint, NULL, v_source.segment_first[i] + v_lengths[i]);
    END IF;
  END LOOP;
  FOR i IN 1..4 LOOP
    IF EXISTS (SELECT 1 FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1
        AND m.position >= v_source.segment_first[i] AND m.position < v_source.segment_first[i] + v_lengths[i]) THEN
      v_links := v_links || ROW(v_own, (i - 1)::smallint, v_source.segment_first[i], v_source.segment_first[i] + v_lengths[i])::contextd_link;
    END IF;
  END LOOP;
  v_copy := cardinality(v_links) > ${maxLinks};
  IF EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = p_target) THEN v_storage := contextd_fresh_storage(p_target); END IF;
  INSERT INTO contextd_conversations AS t (id, version, created, rest, rest_at, segment_first, segment_length, segment_at, created_at_ms, updated_at_ms, title, labels, storage, links, ids_at)
    VALUES (p_target, 1, p_created, COALESCE(p_rest, v_source.rest || p_rest_suffix), 1, v_source.segment_first, v_lengths, '{1,1,1,1}', p_now_ms, p_now_ms,
      COALESCE(p_title, v_source.title), COALESCE(p_labels, v_source.labels), v_storage, CASE WHEN v_copy THEN '{}' ELSE v_links END,
      CASE WHEN NOT v_copy AND v_source.ids_at = v_source.version THEN 1 ELSE 0 END)
    ON CONFLICT (id) DO NOTHING;
  IF NOT FOUND THEN RETURN 'exists'; END IF;
  IF v_copy THEN
    INSERT INTO contextd_messages (conversation_id, segment, position, message)
      SELECT COALESCE(v_storage, p_target), s.segment, r.at_position, r.message FROM generate_series(0, 3) AS s(segment),
        contextd_rows(v_own, s.segment::smallint, v_source.segment_first[s.segment + 1], v_source.segment_first[s.segment + 1] + v_lengths[s.segment + 1], v_source.links) r;
  ELSE
    FOR v_read IN SELECT DISTINCT l.storage FROM unnest(v_links) AS l ORDER BY 1 LOOP
      PERFORM contextd_lock_storage(v_read);
      INSERT INTO contextd_storage_references (storage, reader) VALUES (v_read, p_target) ON CONFLICT DO NOTHING;
    END LOOP;
  END IF;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_target, 1, p_change)
    ON CONFLICT (conversation_id, version) DO UPDATE SET change = EXCLUDED.change;
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_target)); END IF;
  RETURN 'ok';
END
$$;

-- Migration 15's, what a sidecar of the previous release calls: the fork above (it no longer
-- copies any index row).
CREATE OR REPLACE FUNCTION contextd_fork_indexed(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest bytea, p_rest_suffix bytea,
  p_lengths integer[], p_title text, p_labels jsonb, p_change bytea, p_now_ms bigint, p_notify text
) RETURNS text
LANGUAGE sql AS $$
  SELECT contextd_fork_shared(p_source, p_version, p_target, p_created, p_rest, p_rest_suffix, p_lengths, p_title, p_labels, p_change, p_now_ms, p_notify)
$$;

-- Migration 14's contextd_commit_tail, arguments and answers the same, naming calls from the
-- storages the conversation reads.
CREATE OR REPLACE FUNCTION contextd_commit_tail(p_id bytea, p_key bytea, p_now_ms bigint, p_count integer, p_call_ids bytea[])
RETURNS TABLE (segment smallint, message bytea, version bigint, created text, rest_at bigint,
  segment_at bigint[], segment_from integer[], segment_length integer[], fingerprint text, recorded bigint, indexed boolean, names bytea[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
  h contextd_conversations%ROWTYPE;
  v_fingerprint text;
  v_recorded bigint;
  v_from integer[];
  v_names bytea[];
  i integer;
BEGIN
  SELECT * INTO h FROM contextd_conversations c WHERE c.id = p_id;
  IF h.id IS NULL OR (h.expires_at_ms > 0 AND h.expires_at_ms <= p_now_ms) THEN
    IF h.id IS NULL AND p_key <> ''::bytea THEN
      SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
        WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
    END IF;
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, 0::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], v_fingerprint, v_recorded, NULL::boolean, NULL::bytea[];
    RETURN;
  END IF;
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
  END IF;
  IF h.ids_at <> h.version THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, h.version, h.created, h.rest_at, h.segment_at, NULL::integer[], h.segment_length, v_fingerprint, v_recorded, false, NULL::bytea[];
    RETURN;
  END IF;
  v_from := ARRAY[0, GREATEST(h.segment_length[2] - p_count, 0), 0, 0];
  IF cardinality(p_call_ids) > 0 THEN
    SELECT array_agg(contextd_latest_call(COALESCE(h.storage, h.id), h.segment_first[2], h.segment_first[2] + h.segment_length[2], h.links, o.id) ORDER BY o.n) INTO v_names
      FROM unnest(p_call_ids) WITH ORDINALITY AS o(id, n);
  END IF;
  RETURN QUERY SELECT NULL::smallint, h.rest, h.version, h.created, h.rest_at, h.segment_at, v_from, h.segment_length, v_fingerprint, v_recorded, true, v_names;
  FOR i IN 1..4 LOOP
    IF h.segment_length[i] > v_from[i] THEN
      IF cardinality(h.links) = 0 THEN
        RETURN QUERY SELECT m.segment, m.message, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::boolean, NULL::bytea[]
          FROM contextd_messages m
          WHERE m.conversation_id = COALESCE(h.storage, h.id) AND m.segment = i - 1 AND m.position >= h.segment_first[i] + v_from[i] AND m.position < h.segment_first[i] + h.segment_length[i]
          ORDER BY m.position;
      ELSE
        RETURN QUERY SELECT (i - 1)::smallint, r.message, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::boolean, NULL::bytea[]
          FROM contextd_rows(COALESCE(h.storage, h.id), (i - 1)::smallint, h.segment_first[i] + v_from[i], h.segment_first[i] + h.segment_length[i], h.links) r
          ORDER BY r.at_position;
      END IF;
    END IF;
  END LOOP;
END
$$;

-- Migration 14's contextd_commit_listened with the index kept per storage, and p_call_at: per
-- p_call_ids (every call the added messages of history make, p_call_names its name) the 1-based
-- place in p_added of the message making it; NULL from a sidecar of the previous release, whose
-- p_call_ids are latest names without positions (and p_unnamed, ids no call makes any more:
-- the calls' rows go with their positions here, so it is not needed).
CREATE FUNCTION contextd_commit_shared(
  p_expires_at_ms bigint,
  p_id bytea, p_base_version bigint, p_change bytea, p_key bytea, p_fingerprint text,
  p_now_ms bigint, p_ttl_ms bigint, p_max_changes bigint, p_notify text,
  p_created text, p_rest bytea,
  p_base_length integer[], p_mode text[], p_keep integer[], p_count integer[],
  p_blob bytea, p_starts integer[], p_lengths integer[],
  p_updated_ms bigint, p_title text, p_labels jsonb,
  p_index_mode text, p_added bytea[], p_removed bytea[], p_call_ids bytea[], p_call_names bytea[], p_unnamed bytea[],
  p_call_at integer[]
) RETURNS TABLE (outcome text, version bigint, fingerprint text, recorded bigint, indexed boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_exists boolean;
  v_current bigint;
  v_version bigint;
  v_first bigint[];
  v_length integer[];
  v_at bigint[];
  v_expires bigint;
  v_ids_at bigint;
  v_storage bytea;
  v_links contextd_link[];
  v_linked boolean;
  v_own bytea;
  v_fresh bytea;
  v_dropped bytea[];
  v_offset integer := 0;
  v_start bigint;
  v_rebuild boolean;
  v_indexed boolean;
  v_aligned boolean;
  v_whole boolean;
  v_calls boolean;
  i integer;
BEGIN
  SELECT c.version, c.segment_first, c.segment_length, c.segment_at, c.expires_at_ms, c.ids_at, c.storage, c.links
    INTO v_current, v_first, v_length, v_at, v_expires, v_ids_at, v_storage, v_links
    FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  v_exists := FOUND;
  IF v_exists AND v_expires > 0 AND v_expires <= p_now_ms THEN
    PERFORM contextd_delete_rows(ARRAY[p_id]);
    v_exists := false;
    v_current := NULL;
  END IF;
  v_current := COALESCE(v_current, 0);
  version := v_current;
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO fingerprint, recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
    IF FOUND THEN
      outcome := 'replay';
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  IF p_base_version <> v_current THEN
    outcome := 'conflict';
    RETURN NEXT;
    RETURN;
  END IF;
  IF v_exists AND v_length <> p_base_length THEN
    outcome := 'stale';
    RETURN NEXT;
    RETURN;
  END IF;
  v_indexed := NOT v_exists OR v_ids_at = v_current;
  v_rebuild := p_index_mode = 'b' OR NOT v_exists;
  IF p_index_mode = 't' THEN
    IF NOT v_indexed THEN
      outcome := 'unindexed';
      indexed := false;
      RETURN NEXT;
      RETURN;
    END IF;
    -- Held when its own storage has it in the live range, or a link in the link's range.
    IF v_exists AND cardinality(p_added) > 0 AND (
      EXISTS (SELECT 1 FROM contextd_stored_ids x WHERE x.storage = COALESCE(v_storage, p_id) AND x.message_id = ANY(p_added)
        AND x.position >= v_first[x.segment + 1] AND x.position < v_first[x.segment + 1] + v_length[x.segment + 1])
      OR EXISTS (SELECT 1 FROM unnest(v_links) AS l JOIN contextd_stored_ids x ON x.storage = l.storage AND x.message_id = ANY(p_added)
        WHERE x.segment = l.segment AND x.position >= l.lo AND x.position < l.hi)) THEN
      outcome := 'taken';
      indexed := true;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  v_version := v_current + 1;
  IF NOT v_exists THEN
    INSERT INTO contextd_conversations AS c (id, version, created, rest, rest_at, segment_first, segment_length, segment_at, created_at_ms, updated_at_ms)
      VALUES (p_id, v_version, p_created, COALESCE(p_rest, ''::bytea), v_version, '{0,0,0,0}', '{0,0,0,0}', ARRAY[v_version, v_version, v_version, v_version], p_updated_ms, p_updated_ms)
      ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
      SELECT c.version INTO version FROM contextd_conversations c WHERE c.id = p_id;
      outcome := 'conflict';
      RETURN NEXT;
      RETURN;
    END IF;
    v_first := '{0,0,0,0}';
    v_length := '{0,0,0,0}';
    v_at := ARRAY[v_version, v_version, v_version, v_version];
    v_links := '{}';
    v_storage := CASE WHEN EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = p_id) THEN contextd_fresh_storage(p_id) END;
  END IF;
  v_linked := cardinality(v_links) > 0;
  v_own := COALESCE(v_storage, p_id);
  IF v_exists AND EXISTS (SELECT 1 FROM generate_series(1, 4) AS s(i) WHERE p_mode[s.i] <> '=' AND p_keep[s.i] <> v_length[s.i]) THEN
    PERFORM contextd_lock_storage(v_own);
    IF EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = v_own) THEN
      v_fresh := contextd_fresh_storage(p_id);
      IF cardinality(v_links) + 4 <= ${maxLinks} THEN
        FOR i IN 1..4 LOOP
          IF EXISTS (SELECT 1 FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1 AND m.position >= v_first[i] AND m.position < v_first[i] + v_length[i]) THEN
            v_links := v_links || ROW(v_own, (i - 1)::smallint, v_first[i], v_first[i] + v_length[i])::contextd_link;
          END IF;
        END LOOP;
        INSERT INTO contextd_storage_references (storage, reader) VALUES (v_own, p_id) ON CONFLICT DO NOTHING;
      ELSE
        -- Past the bound the live rows are copied, and their index rows with them (every row of
        -- the own storage is live).
        INSERT INTO contextd_messages (conversation_id, segment, position, message)
          SELECT v_fresh, m.segment, m.position, m.message FROM contextd_messages m
          WHERE m.conversation_id = v_own AND m.position >= v_first[m.segment + 1] AND m.position < v_first[m.segment + 1] + v_length[m.segment + 1];
        INSERT INTO contextd_stored_ids (storage, message_id, segment, position)
          SELECT v_fresh, x.message_id, x.segment, x.position FROM contextd_stored_ids x
          WHERE x.storage = v_own AND x.position >= v_first[x.segment + 1] AND x.position < v_first[x.segment + 1] + v_length[x.segment + 1];
        INSERT INTO contextd_stored_calls (storage, call_id, position, name)
          SELECT v_fresh, t.call_id, t.position, t.name FROM contextd_stored_calls t
          WHERE t.storage = v_own AND t.position >= v_first[2] AND t.position < v_first[2] + v_length[2];
      END IF;
      v_storage := v_fresh;
      v_own := v_fresh;
      v_linked := true;
    END IF;
  END IF;
  -- Index rows follow the message rows whatever ids_at says, so a storage's index is right for
  -- every reader: in modes 'a' and 't' p_added is the written messages' ids in p_starts' order.
  v_aligned := p_index_mode <> 'b' AND cardinality(p_added) = (SELECT COALESCE(sum(c), 0) FROM unnest(p_count) AS c);
  v_calls := p_call_at IS NOT NULL OR cardinality(p_call_ids) = 0;
  IF v_aligned AND cardinality(p_removed) > 0 THEN
    DELETE FROM contextd_stored_ids x WHERE x.storage = v_own AND x.message_id = ANY(p_removed);
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        IF p_keep[i] <> v_length[i] THEN
          DELETE FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
          IF i = 2 THEN DELETE FROM contextd_stored_calls t WHERE t.storage = v_own AND t.position >= v_first[i] + p_keep[i]; END IF;
          IF v_linked THEN v_links := contextd_clipped_links(v_links, (i - 1)::smallint, NULL, v_first[i] + p_keep[i]); END IF;
          v_at[i] := v_version;
        END IF;
        v_start := v_first[i] + p_keep[i];
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        IF i = 2 THEN DELETE FROM contextd_stored_calls t WHERE t.storage = v_own AND t.position < v_first[i] + v_length[i] - p_keep[i]; END IF;
        IF v_linked THEN v_links := contextd_clipped_links(v_links, (i - 1)::smallint, v_first[i] + v_length[i] - p_keep[i], NULL); END IF;
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      IF p_count[i] > 0 THEN
        INSERT INTO contextd_messages (conversation_id, segment, position, message)
          SELECT v_own, i - 1, v_start + u.n - 1, substring(p_blob FROM u.start FOR u.length)
          FROM unnest(p_starts[v_offset + 1 : v_offset + p_count[i]], p_lengths[v_offset + 1 : v_offset + p_count[i]]) WITH ORDINALITY AS u(start, length, n);
        IF v_aligned THEN
          INSERT INTO contextd_stored_ids AS x (storage, message_id, segment, position)
            SELECT v_own, u.id, i - 1, v_start + u.n - 1 FROM unnest(p_added[v_offset + 1 : v_offset + p_count[i]]) WITH ORDINALITY AS u(id, n)
            ON CONFLICT (storage, message_id) DO UPDATE SET segment = EXCLUDED.segment, position = EXCLUDED.position;
          IF i = 2 AND p_call_at IS NOT NULL AND cardinality(p_call_ids) > 0 THEN
            INSERT INTO contextd_stored_calls AS t (storage, call_id, position, name)
              SELECT v_own, u.id, v_start + u.at - v_offset - 1, u.name FROM unnest(p_call_ids, p_call_names, p_call_at) AS u(id, name, at)
              WHERE u.at > v_offset AND u.at <= v_offset + p_count[i]
              ON CONFLICT (storage, call_id, position) DO UPDATE SET name = EXCLUDED.name;
          END IF;
        END IF;
      END IF;
      v_length[i] := p_keep[i] + p_count[i];
      v_offset := v_offset + p_count[i];
    END IF;
  END LOOP;
  -- Mode 'b' (a clear, a rebuild): p_added is every id of the new state; each goes to the storage
  -- holding its row (a linked storage's rows are the same for every reader, so writing their
  -- index rows there is right for all of them).
  v_whole := p_index_mode = 'b' AND cardinality(p_added) = (SELECT COALESCE(sum(c), 0) FROM unnest(v_length) AS c);
  IF v_whole THEN
    DELETE FROM contextd_stored_ids x WHERE x.storage = v_own;
    DELETE FROM contextd_stored_calls t WHERE t.storage = v_own;
    INSERT INTO contextd_stored_ids AS x (storage, message_id, segment, position)
      SELECT contextd_row_storage(v_own, p.segment, p.at_position, v_links), p.message_id, p.segment, p.at_position
      FROM contextd_state_positions(p_added, v_first, v_length) p
      ON CONFLICT (storage, message_id) DO UPDATE SET segment = EXCLUDED.segment, position = EXCLUDED.position;
    IF p_call_at IS NOT NULL AND cardinality(p_call_ids) > 0 THEN
      INSERT INTO contextd_stored_calls AS t (storage, call_id, position, name)
        SELECT contextd_row_storage(v_own, 1::smallint, p.at_position, v_links), u.id, p.at_position, u.name
        FROM unnest(p_call_ids, p_call_names, p_call_at) AS u(id, name, at)
        JOIN contextd_state_positions(p_added, v_first, v_length) p ON p.n = u.at AND p.segment = 1
        ON CONFLICT (storage, call_id, position) DO UPDATE SET name = EXCLUDED.name;
    END IF;
  END IF;
  indexed := (v_rebuild OR v_indexed) AND (v_whole OR v_aligned) AND v_calls;
  UPDATE contextd_conversations c SET
    version = v_version,
    rest = COALESCE(p_rest, c.rest),
    rest_at = CASE WHEN p_rest IS NULL THEN c.rest_at ELSE v_version END,
    segment_first = v_first, segment_length = v_length, segment_at = v_at,
    updated_at_ms = p_updated_ms,
    title = COALESCE(p_title, c.title),
    labels = COALESCE(p_labels, c.labels),
    expires_at_ms = p_expires_at_ms,
    ids_at = CASE WHEN indexed THEN v_version ELSE c.ids_at END,
    storage = v_storage,
    links = v_links
  WHERE c.id = p_id;
  IF v_linked THEN
    WITH gone AS (DELETE FROM contextd_storage_references r
      WHERE r.reader = p_id AND NOT EXISTS (SELECT 1 FROM unnest(v_links) AS l WHERE l.storage = r.storage) RETURNING r.storage)
      SELECT array_agg(gone.storage) INTO v_dropped FROM gone;
    IF v_dropped IS NOT NULL THEN PERFORM contextd_release_storages(v_dropped); END IF;
  END IF;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_id, v_version, p_change);
  IF v_version > p_max_changes THEN
    DELETE FROM contextd_changes ch WHERE ch.conversation_id = p_id AND ch.version <= v_version - p_max_changes;
  END IF;
  IF p_key <> ''::bytea THEN
    INSERT INTO contextd_idempotency AS k (conversation_id, key, fingerprint, version, expires_at_ms)
      VALUES (p_id, p_key, p_fingerprint, v_version, p_now_ms + p_ttl_ms)
      ON CONFLICT (conversation_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, version = EXCLUDED.version, expires_at_ms = EXCLUDED.expires_at_ms;
    DELETE FROM contextd_idempotency k WHERE k.ctid IN (
      SELECT e.ctid FROM contextd_idempotency e WHERE e.expires_at_ms <= p_now_ms ORDER BY e.expires_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  END IF;
  IF p_notify <> '' AND NOT pg_try_advisory_xact_lock(${listenersLock}) THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  outcome := 'ok';
  version := v_version;
  fingerprint := NULL;
  recorded := NULL;
  RETURN NEXT;
END
$$;

-- What a sidecar of the previous release calls: the commit above, without call positions.
CREATE OR REPLACE FUNCTION contextd_commit_listened(
  p_expires_at_ms bigint,
  p_id bytea, p_base_version bigint, p_change bytea, p_key bytea, p_fingerprint text,
  p_now_ms bigint, p_ttl_ms bigint, p_max_changes bigint, p_notify text,
  p_created text, p_rest bytea,
  p_base_length integer[], p_mode text[], p_keep integer[], p_count integer[],
  p_blob bytea, p_starts integer[], p_lengths integer[],
  p_updated_ms bigint, p_title text, p_labels jsonb,
  p_index_mode text, p_added bytea[], p_removed bytea[], p_call_ids bytea[], p_call_names bytea[], p_unnamed bytea[]
) RETURNS TABLE (outcome text, version bigint, fingerprint text, recorded bigint, indexed boolean)
LANGUAGE sql AS $$
  SELECT * FROM contextd_commit_shared(p_expires_at_ms, p_id, p_base_version, p_change, p_key, p_fingerprint, p_now_ms, p_ttl_ms, p_max_changes, p_notify,
    p_created, p_rest, p_base_length, p_mode, p_keep, p_count, p_blob, p_starts, p_lengths, p_updated_ms, p_title, p_labels,
    p_index_mode, p_added, p_removed, p_call_ids, p_call_names, p_unnamed, NULL)
$$;
`,
};

