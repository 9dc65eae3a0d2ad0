/**
 * Migration 14 of the Postgres store: a fork shares its source's message rows instead of copying
 * them. Why: migration 7's `contextd_fork` copied every message row (`INSERT … SELECT`), so a fork
 * of a 100,000-message conversation wrote 100,000 rows (0.2-0.5 s, docs/history.md "Measured");
 * here it writes the new header, one reference row per storage it reads and the change row,
 * whatever the message count (test/store/postgres-shared-segments.test.ts counts them).
 *
 * Kept beside the store's other schema files (as migration 13 is); postgres-schema.ts's list names it.
 *
 * - A *storage* is the set of message rows under one `contextd_messages.conversation_id`. A
 *   conversation writes its rows in its own storage: the header's `storage`, NULL = its own id
 *   (so every row written before this migration stays where it is, nothing is rewritten). A
 *   fresh storage is the conversation's id, 0xff and 16 random bytes: 0xff is in no UTF-8 id, so
 *   no conversation id is ever a fresh storage, and the bytes before the first 0xff name the
 *   conversation whose sidecar sealed its rows (its *owner*).
 * - The header's `links` say which other storages it reads: per link a segment and a position
 *   range `[lo, hi)`. A segment's rows are its own storage's rows in its live range and each
 *   link's rows in the link's range; positions are the same in every storage (a fork keeps the
 *   source's `segment_first`), and the storages one conversation reads never hold rows at the
 *   same live position (a storage holds rows only where its writer's own part was when it was
 *   shared), so a read is a union, ordered by position.
 * - `contextd_storage_references` has one row per (storage, conversation reading it by a link).
 *   A storage's rows are deleted only when no reference is left and its owner no longer writes
 *   in it (`contextd_release_storages`), under an advisory lock per storage (`contextd_lock_storage`),
 *   so two readers removed at once cannot both leave the rows, nor both keep them.
 * - A commit that deletes rows (a cut, an edit, a rewind, a prune, a clear) in a storage someone
 *   references first moves the writer to a fresh storage: it links its old one for its live rows
 *   (O(segments)) and writes from then on in the new one, so rows another conversation reads are
 *   never deleted or overwritten. Appends are not moves: they write past every range another
 *   reads. Cuts clip the writer's own links to what stays live; links left empty go, with their
 *   references.
 * - At most `maxLinks` (64) links per conversation, so a read stays bounded: a fork that would
 *   need more copies the rows as migration 7 did (and starts with none), and a move that would
 *   copies the writer's own live rows into the new storage instead of linking the old one.
 *
 * Rolling upgrade: the functions a sidecar of the previous release calls (`contextd_load`,
 * `contextd_commit_tail`, `contextd_commit_listened`, `contextd_delete_rows`, `contextd_fork`)
 * are replaced in place with the same arguments and answers, so its loads, commits, deletes and
 * forks honour the links too; its window read is a statement of its own (`windowQuery`) that
 * reads only the conversation's own rows, so on a fork it answers DATA_LOSS when the window's
 * rows are shared (the segment has fewer rows than the header says) and a window with the rest
 * misses the other segments' shared rows, until it is replaced. docs/stores.md says so.
 */
export const maxLinks = 64;

/**
 * postgres-schema.ts's listenersLockKey, as a literal: that module lists this migration, so it
 * cannot be imported here, and the key never changes (migration 12 holds it as a literal too).
 */
const listenersLock = "7166485279764870254";

export const sharedRowsMigration = {
  version: 14,
  name: "forks share their source's message rows: storages, links, references",
  sql: `
CREATE TYPE contextd_link AS (storage bytea, segment smallint, lo bigint, hi bigint);

ALTER TABLE contextd_conversations ADD COLUMN storage bytea, ADD COLUMN links contextd_link[] NOT NULL DEFAULT '{}';

CREATE TABLE contextd_storage_references (
  storage bytea NOT NULL,
  reader bytea NOT NULL,
  PRIMARY KEY (storage, reader)
);
CREATE INDEX contextd_storage_references_reader ON contextd_storage_references (reader);

-- The conversation whose rows a storage holds: the bytes before its first 0xff.
CREATE FUNCTION contextd_storage_owner(p_storage bytea) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN position('\\xff'::bytea IN p_storage) = 0 THEN p_storage ELSE substring(p_storage FROM 1 FOR position('\\xff'::bytea IN p_storage) - 1) END
$$;

-- A fresh storage of the conversation p_id.
CREATE FUNCTION contextd_fresh_storage(p_id bytea) RETURNS bytea LANGUAGE sql VOLATILE AS $$
  SELECT p_id || '\\xff'::bytea || uuid_send(gen_random_uuid())
$$;

-- Held to the transaction's end by whoever adds, removes or counts a storage's references.
CREATE FUNCTION contextd_lock_storage(p_storage bytea) RETURNS void LANGUAGE sql AS $$
  SELECT pg_advisory_xact_lock(('x' || substr(md5(p_storage), 1, 16))::bit(64)::bigint)
$$;

-- The rows at positions [p_lo, p_hi) of a segment of a conversation writing in p_own and reading
-- p_links; unordered.
CREATE FUNCTION contextd_rows(p_own bytea, p_segment smallint, p_lo bigint, p_hi bigint, p_links contextd_link[])
RETURNS TABLE (at_position bigint, message bytea) LANGUAGE sql STABLE AS $$
  SELECT m.position, m.message FROM contextd_messages m
    WHERE m.conversation_id = p_own AND m.segment = p_segment AND m.position >= p_lo AND m.position < p_hi
  UNION ALL
  SELECT n.position, n.message FROM unnest(p_links) AS l
    CROSS JOIN LATERAL (SELECT m.position, m.message FROM contextd_messages m
      WHERE m.conversation_id = l.storage AND m.segment = p_segment AND m.position >= GREATEST(l.lo, p_lo) AND m.position < LEAST(l.hi, p_hi)) n
    WHERE l.segment = p_segment
$$;

-- p_links with those of p_segment narrowed to [p_lo, p_hi) (NULL = unbounded); empty ones dropped.
CREATE FUNCTION contextd_clipped_links(p_links contextd_link[], p_segment smallint, p_lo bigint, p_hi bigint) RETURNS contextd_link[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT COALESCE(array_agg(k.link ORDER BY k.n), '{}') FROM (
    SELECT CASE WHEN l.segment = p_segment
      THEN ROW(l.storage, l.segment, GREATEST(l.lo, COALESCE(p_lo, l.lo)), LEAST(l.hi, COALESCE(p_hi, l.hi)))::contextd_link
      ELSE ROW(l.storage, l.segment, l.lo, l.hi)::contextd_link END AS link, l.n
    FROM unnest(p_links) WITH ORDINALITY AS l(storage, segment, lo, hi, n)) k
  WHERE (k.link).lo < (k.link).hi
$$;

-- Deletes the rows of each of p_storages that no one references and no one writes in any more
-- (the caller removed its references first). Storages in order, each locked, so concurrent
-- releases cannot deadlock and the last one to go sees the others' removals.
CREATE FUNCTION contextd_release_storages(p_storages bytea[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_storage bytea;
BEGIN
  FOR v_storage IN SELECT DISTINCT s FROM unnest(p_storages) AS s ORDER BY 1 LOOP
    PERFORM contextd_lock_storage(v_storage);
    IF NOT EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = v_storage)
      AND NOT EXISTS (SELECT 1 FROM contextd_conversations c WHERE c.id = contextd_storage_owner(v_storage) AND COALESCE(c.storage, c.id) = v_storage) THEN
      DELETE FROM contextd_messages m WHERE m.conversation_id = v_storage;
    END IF;
  END LOOP;
END
$$;

-- Migration 13's contextd_delete_rows, each conversation's own storage deleted only when no one
-- references it, and its links' references released.
CREATE OR REPLACE FUNCTION contextd_delete_rows(p_ids bytea[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_own bytea;
  v_released bytea[];
BEGIN
  FOR v_own IN SELECT COALESCE(c.storage, c.id) FROM contextd_conversations c WHERE c.id = ANY(p_ids) ORDER BY 1 LOOP
    PERFORM contextd_lock_storage(v_own);
    IF NOT EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = v_own) THEN
      DELETE FROM contextd_messages m WHERE m.conversation_id = v_own;
    END IF;
  END LOOP;
  WITH gone AS (DELETE FROM contextd_storage_references r WHERE r.reader = ANY(p_ids) RETURNING r.storage)
    SELECT array_agg(gone.storage) INTO v_released FROM gone;
  DELETE FROM contextd_changes ch WHERE ch.conversation_id = ANY(p_ids);
  DELETE FROM contextd_message_ids x WHERE x.conversation_id = ANY(p_ids);
  DELETE FROM contextd_tool_calls t WHERE t.conversation_id = ANY(p_ids);
  DELETE FROM contextd_idempotency k WHERE k.conversation_id = ANY(p_ids);
  DELETE FROM contextd_usage_entries e USING unnest(p_ids) AS d(id) WHERE e.tenant = contextd_tenant_of(d.id) AND e.conversation_id = d.id;
  DELETE FROM contextd_usage_conversations u USING unnest(p_ids) AS d(id) WHERE u.tenant = contextd_tenant_of(d.id) AND u.conversation_id = d.id;
  DELETE FROM contextd_conversations c WHERE c.id = ANY(p_ids);
  IF v_released IS NOT NULL THEN PERFORM contextd_release_storages(v_released); END IF;
END
$$;

-- A fork that shares rows, in one call: the new conversation p_target gets, per segment, the
-- first p_lengths[i] messages of the source at p_version (NULL = all of them), linking the
-- source's own storage where it holds rows in those ranges and the source's links narrowed to
-- them, and references each storage it reads. Its rest is p_rest (NULL = the source's with
-- p_rest_suffix appended), its title and labels p_title and p_labels (NULL = the source's).
-- Past maxLinks links it copies the rows, as migration 7 did. 'moved' = the source is not at
-- p_version, expires, or has fewer messages than asked; 'exists' = p_target has a header row.
CREATE FUNCTION contextd_fork_shared(
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
  -- A source that expires is forked through the engine, which gives the fork its own expiry.
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
    -- Only a range the source's own storage holds rows in (not one its links cover whole).
    IF EXISTS (SELECT 1 FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1
        AND m.position >= v_source.segment_first[i] AND m.position < v_source.segment_first[i] + v_lengths[i]) THEN
      v_links := v_links || ROW(v_own, (i - 1)::smallint, v_source.segment_first[i], v_source.segment_first[i] + v_lengths[i])::contextd_link;
    END IF;
  END LOOP;
  v_copy := cardinality(v_links) > ${maxLinks};
  -- Rows under the new id that a deleted conversation of that id left to its forks stay theirs.
  IF EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = p_target) THEN v_storage := contextd_fresh_storage(p_target); END IF;
  INSERT INTO contextd_conversations AS t (id, version, created, rest, rest_at, segment_first, segment_length, segment_at, created_at_ms, updated_at_ms, title, labels, storage, links)
    VALUES (p_target, 1, p_created, COALESCE(p_rest, v_source.rest || p_rest_suffix), 1, v_source.segment_first, v_lengths, '{1,1,1,1}', p_now_ms, p_now_ms,
      COALESCE(p_title, v_source.title), COALESCE(p_labels, v_source.labels), v_storage, CASE WHEN v_copy THEN '{}' ELSE v_links END)
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

-- Migration 7's contextd_fork (the source's current version, whole), arguments and outcomes the
-- same, sharing the rows: what a sidecar of the previous release calls.
CREATE OR REPLACE FUNCTION contextd_fork(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest_suffix bytea,
  p_change bytea, p_now_ms bigint, p_notify text
) RETURNS text
LANGUAGE sql AS $$
  SELECT contextd_fork_shared(p_source, p_version, p_target, p_created, NULL, p_rest_suffix, NULL, NULL, NULL, p_change, p_now_ms, p_notify)
$$;

-- Migration 1's contextd_load, reading the conversation's own storage and its links.
CREATE OR REPLACE FUNCTION contextd_load(
  p_id bytea, p_key bytea, p_now_ms bigint,
  p_cached_version bigint, p_created text, p_rest_at bigint, p_at bigint[], p_length integer[]
) RETURNS TABLE (segment smallint, message bytea, version bigint, current boolean, created text, rest_at bigint,
  segment_at bigint[], segment_from integer[], segment_length integer[], fingerprint text, recorded bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  h contextd_conversations%ROWTYPE;
  v_fingerprint text;
  v_recorded bigint;
  v_from integer[] := '{0,0,0,0}';
  v_same boolean;
  i integer;
BEGIN
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
  END IF;
  SELECT * INTO h FROM contextd_conversations c WHERE c.id = p_id;
  IF h.id IS NULL THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, 0::bigint, false, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], v_fingerprint, v_recorded;
    RETURN;
  END IF;
  v_same := p_created IS NOT NULL AND h.created = p_created;
  IF v_same AND h.version = p_cached_version AND h.segment_length = p_length THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, h.version, true, h.created, h.rest_at, h.segment_at, p_length, h.segment_length, v_fingerprint, v_recorded;
    RETURN;
  END IF;
  FOR i IN 1..4 LOOP
    IF v_same AND h.segment_at[i] = p_at[i] AND h.segment_length[i] >= p_length[i] THEN v_from[i] := p_length[i]; END IF;
  END LOOP;
  RETURN QUERY SELECT NULL::smallint, CASE WHEN v_same AND h.rest_at = p_rest_at THEN NULL ELSE h.rest END, h.version, false, h.created, h.rest_at,
    h.segment_at, v_from, h.segment_length, v_fingerprint, v_recorded;
  FOR i IN 1..4 LOOP
    IF h.segment_length[i] > v_from[i] THEN
      -- Without links (every conversation never forked) the rows come in index order, unsorted.
      IF cardinality(h.links) = 0 THEN
        RETURN QUERY SELECT m.segment, m.message, NULL::bigint, NULL::boolean, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint
          FROM contextd_messages m
          WHERE m.conversation_id = COALESCE(h.storage, h.id) AND m.segment = i - 1 AND m.position >= h.segment_first[i] + v_from[i] AND m.position < h.segment_first[i] + h.segment_length[i]
          ORDER BY m.position;
      ELSE
        RETURN QUERY SELECT (i - 1)::smallint, r.message, NULL::bigint, NULL::boolean, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint
          FROM contextd_rows(COALESCE(h.storage, h.id), (i - 1)::smallint, h.segment_first[i] + v_from[i], h.segment_first[i] + h.segment_length[i], h.links) r
          ORDER BY r.at_position;
      END IF;
    END IF;
  END LOOP;
END
$$;

-- Migration 11's contextd_commit_tail, reading the conversation's own storage and its links.
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
    SELECT array_agg(t.name ORDER BY o.n) INTO v_names FROM unnest(p_call_ids) WITH ORDINALITY AS o(id, n)
      LEFT JOIN contextd_tool_calls t ON t.conversation_id = p_id AND t.call_id = o.id;
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

-- Migration 12's contextd_commit_listened, arguments and outcomes the same, writing in the
-- conversation's own storage: a commit that deletes rows someone else references moves to a
-- fresh storage first, cuts clip the links, and links left empty release their references.
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
    IF EXISTS (SELECT 1 FROM contextd_message_ids x WHERE x.conversation_id = p_id AND x.message_id = ANY(p_added)) THEN
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
    -- Rows a deleted conversation of this id left to its forks stay theirs.
    v_storage := CASE WHEN EXISTS (SELECT 1 FROM contextd_storage_references r WHERE r.storage = p_id) THEN contextd_fresh_storage(p_id) END;
  END IF;
  v_linked := cardinality(v_links) > 0;
  v_own := COALESCE(v_storage, p_id);
  -- A commit that deletes rows (keeps fewer than a segment has) in a storage someone references
  -- moves to a fresh one first; appends write past every range others read.
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
        INSERT INTO contextd_messages (conversation_id, segment, position, message)
          SELECT v_fresh, m.segment, m.position, m.message FROM contextd_messages m
          WHERE m.conversation_id = v_own AND m.position >= v_first[m.segment + 1] AND m.position < v_first[m.segment + 1] + v_length[m.segment + 1];
      END IF;
      v_storage := v_fresh;
      v_own := v_fresh;
      v_linked := true;
    END IF;
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        IF p_keep[i] <> v_length[i] THEN
          DELETE FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
          IF v_linked THEN v_links := contextd_clipped_links(v_links, (i - 1)::smallint, NULL, v_first[i] + p_keep[i]); END IF;
          v_at[i] := v_version;
        END IF;
        v_start := v_first[i] + p_keep[i];
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = v_own AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        IF v_linked THEN v_links := contextd_clipped_links(v_links, (i - 1)::smallint, v_first[i] + v_length[i] - p_keep[i], NULL); END IF;
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      IF p_count[i] > 0 THEN
        INSERT INTO contextd_messages (conversation_id, segment, position, message)
          SELECT v_own, i - 1, v_start + u.n - 1, substring(p_blob FROM u.start FOR u.length)
          FROM unnest(p_starts[v_offset + 1 : v_offset + p_count[i]], p_lengths[v_offset + 1 : v_offset + p_count[i]]) WITH ORDINALITY AS u(start, length, n);
      END IF;
      v_length[i] := p_keep[i] + p_count[i];
      v_offset := v_offset + p_count[i];
    END IF;
  END LOOP;
  IF v_rebuild OR v_indexed THEN
    IF v_rebuild THEN
      DELETE FROM contextd_message_ids x WHERE x.conversation_id = p_id;
      DELETE FROM contextd_tool_calls t WHERE t.conversation_id = p_id;
    END IF;
    IF cardinality(p_removed) > 0 THEN
      DELETE FROM contextd_message_ids x WHERE x.conversation_id = p_id AND x.message_id = ANY(p_removed);
    END IF;
    IF cardinality(p_added) > 0 THEN
      INSERT INTO contextd_message_ids (conversation_id, message_id) SELECT p_id, a FROM unnest(p_added) AS a ON CONFLICT DO NOTHING;
    END IF;
    IF cardinality(p_unnamed) > 0 THEN
      DELETE FROM contextd_tool_calls t WHERE t.conversation_id = p_id AND t.call_id = ANY(p_unnamed);
    END IF;
    IF cardinality(p_call_ids) > 0 THEN
      INSERT INTO contextd_tool_calls AS t (conversation_id, call_id, name) SELECT p_id, n.id, n.name FROM unnest(p_call_ids, p_call_names) AS n(id, name)
        ON CONFLICT (conversation_id, call_id) DO UPDATE SET name = EXCLUDED.name;
    END IF;
  END IF;
  UPDATE contextd_conversations c SET
    version = v_version,
    rest = COALESCE(p_rest, c.rest),
    rest_at = CASE WHEN p_rest IS NULL THEN c.rest_at ELSE v_version END,
    segment_first = v_first, segment_length = v_length, segment_at = v_at,
    updated_at_ms = p_updated_ms,
    title = COALESCE(p_title, c.title),
    labels = COALESCE(p_labels, c.labels),
    expires_at_ms = p_expires_at_ms,
    ids_at = CASE WHEN v_rebuild OR v_indexed THEN v_version ELSE c.ids_at END,
    storage = v_storage,
    links = v_links
  WHERE c.id = p_id;
  -- After the header names the new storage: a storage this conversation no longer links (or no
  -- longer writes in) loses its rows once no one else reads it.
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
  indexed := v_rebuild OR v_indexed;
  RETURN NEXT;
END
$$;
`,
};
