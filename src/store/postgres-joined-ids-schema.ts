import { maxLinks } from "./postgres-shared-rows-schema.js";

/**
 * Migration 19 of the Postgres store: `contextd_commit_shared` (migration 16's) with its id-index
 * lookups by id as joins with the arrays, not `message_id = ANY(array)`. Why: the array is a
 * parameter of the function, so Postgres neither hashes it nor probes the primary key with each
 * element: its plan read every index row of the storage and searched the array for each
 * (EXPLAIN: a bitmap scan on `storage`, then `Filter: message_id = ANY(...)`). A removal near
 * the head of 100,000 messages, 11 ids, read 100,000 index rows; one in the middle, 50,000 ids,
 * compared them with every row and outlasted the 30 s statement timeout, and one in the middle
 * of 10,000 took 644-812 ms. Joined with `unnest`, each id is one primary-key probe: 854 and
 * 142 ms (bench/removal.ts, docs/stores.md "A removal by id").
 *
 * The body is migration 16's but for the three lookups (the removed ids' delete, and the two
 * "is an added id held" checks of a commit planned on the stored tail); arguments and answers are
 * the same. It repeats migration 16's text on purpose: Postgres replaces a function body whole,
 * and a migration's SQL is what databases already ran, so none is built from another's text (an
 * edit to shared text would make new databases differ from migrated ones, with nothing to tell). Rolling upgrade: a sidecar of the previous release calls the same function with the
 * same arguments and gets the same answers, sooner.
 */
/** postgres-schema.ts's listenersLockKey, as a literal (that module lists this migration; the key never changes). */
const listenersLock = "7166485279764870254";

export const joinedIdsMigration = {
  version: 19,
  name: "the commit's id-index lookups by id join the arrays (one primary-key probe each), not ANY(array)",
  sql: `
CREATE OR REPLACE FUNCTION contextd_commit_shared(
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
      EXISTS (SELECT 1 FROM unnest(p_added) AS a(id) JOIN contextd_stored_ids x ON x.storage = COALESCE(v_storage, p_id) AND x.message_id = a.id
        WHERE x.position >= v_first[x.segment + 1] AND x.position < v_first[x.segment + 1] + v_length[x.segment + 1])
      OR EXISTS (SELECT 1 FROM unnest(v_links) AS l JOIN contextd_stored_ids x ON x.storage = l.storage JOIN unnest(p_added) AS a(id) ON x.message_id = a.id
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
    DELETE FROM contextd_stored_ids x USING unnest(p_removed) AS r(id) WHERE x.storage = v_own AND x.message_id = r.id;
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
`,
};
