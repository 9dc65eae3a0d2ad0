import { maxLinks } from "./postgres-shared-rows-schema.js";

/**
 * Migration 17 of the Postgres store: a fork shares its source's rows under encryption at rest
 * too. Why: every sealed value binds its conversation's id (at-rest-encryption.ts), so a shared
 * row did not open under the fork's id, and an encrypted store forked through the engine:
 * every message opened and sealed again, one row written per message, 4.7-5.9 s at 100,000
 * messages; 2.5-2.8 ms shared (bench/fork.ts, docs/history.md "Migration 17").
 *
 * A message row stays sealed for the conversation that wrote it, the owner of its storage (the
 * bytes before the first 0xff of the storage id, migration 14's `contextd_storage_owner`; every
 * row in a storage was sealed by its owner's sidecar: a conversation writes only in storages of
 * its own id, and the only statement that copied rows into another conversation's storage, the
 * fork past `maxLinks` links, is refused here when the caller says it shares sealed rows). So
 * the reads say, per row, where it was read from, and the header which conversation owns each
 * link: the sidecar opens a linked row with its owner's id, its own rows with its own.
 *
 * - `contextd_linked_rows`: migration 14's `contextd_rows`, each row with `link`, NULL for the
 *   reader's own storage, n for the n-th of its links (1-based, at most 64).
 * - `contextd_link_owners`: per link, in order, the owner of its storage.
 * - `contextd_load_linked` and `contextd_commit_tail_linked`: the load (with
 *   `contextd_load_unexpired`'s expiry) and the tail read this build calls, their rows with
 *   `link` and their header row with `owners`; the window read (postgres-window-query.ts) reads
 *   through `contextd_linked_rows` the same way.
 * - `contextd_fork_linked`: migration 16's `contextd_fork_shared` with `p_copies`: false (a
 *   sidecar with encryption) answers 'links' where the fork would copy the rows past 64 links,
 *   and the sidecar writes the fork through the engine, sealed under the fork's id. The fork's
 *   rest, title, labels and change row are the sidecar's, sealed for the fork.
 *   `contextd_fork_shared` stays, calling it with copies allowed.
 *
 * Rolling upgrade: nothing of a previous release changes (its functions stay as they were). A
 * sidecar of the previous release with encryption never shares a fork's rows, but one that reads
 * a fork made by this release under encryption opens the linked rows with the fork's id and
 * answers DATA_LOSS for them until it is replaced (docs/encryption-at-rest.md says so).
 */
export const sealedLinksMigration = {
  version: 17,
  name: "forks share rows under encryption at rest: reads name each linked row's owner",
  sql: `
-- Migration 14's contextd_rows, each row with the link it is read through (NULL: the own storage).
CREATE FUNCTION contextd_linked_rows(p_own bytea, p_segment smallint, p_lo bigint, p_hi bigint, p_links contextd_link[])
RETURNS TABLE (at_position bigint, message bytea, link smallint) LANGUAGE sql STABLE AS $$
  SELECT m.position, m.message, NULL::smallint FROM contextd_messages m
    WHERE m.conversation_id = p_own AND m.segment = p_segment AND m.position >= p_lo AND m.position < p_hi
  UNION ALL
  SELECT n.position, n.message, l.n::smallint FROM unnest(p_links) WITH ORDINALITY AS l(storage, segment, lo, hi, n)
    CROSS JOIN LATERAL (SELECT m.position, m.message FROM contextd_messages m
      WHERE m.conversation_id = l.storage AND m.segment = p_segment AND m.position >= GREATEST(l.lo, p_lo) AND m.position < LEAST(l.hi, p_hi)) n
    WHERE l.segment = p_segment
$$;

-- Per link, in order, the conversation that wrote its storage's rows (and sealed them).
CREATE FUNCTION contextd_link_owners(p_links contextd_link[]) RETURNS bytea[] LANGUAGE sql IMMUTABLE AS $$
  SELECT COALESCE(array_agg(contextd_storage_owner(l.storage) ORDER BY l.n), '{}') FROM unnest(p_links) WITH ORDINALITY AS l(storage, segment, lo, hi, n)
$$;

-- contextd_load_unexpired (migration 14's contextd_load under migration 8's expiry), its message
-- rows with their link and its header row with the links' owners.
CREATE FUNCTION contextd_load_linked(
  p_id bytea, p_key bytea, p_now_ms bigint,
  p_cached_version bigint, p_created text, p_rest_at bigint, p_at bigint[], p_length integer[]
) RETURNS TABLE (segment smallint, message bytea, link smallint, version bigint, current boolean, created text, rest_at bigint,
  segment_at bigint[], segment_from integer[], segment_length integer[], fingerprint text, recorded bigint, owners bytea[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
  h contextd_conversations%ROWTYPE;
  v_fingerprint text;
  v_recorded bigint;
  v_from integer[] := '{0,0,0,0}';
  v_same boolean;
  i integer;
BEGIN
  SELECT * INTO h FROM contextd_conversations c WHERE c.id = p_id;
  -- Expired: as never written, its records not looked at either (as contextd_load_unexpired).
  IF h.id IS NOT NULL AND h.expires_at_ms > 0 AND h.expires_at_ms <= p_now_ms THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, NULL::smallint, 0::bigint, false, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::bytea[];
    RETURN;
  END IF;
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
  END IF;
  IF h.id IS NULL THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, NULL::smallint, 0::bigint, false, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], v_fingerprint, v_recorded, NULL::bytea[];
    RETURN;
  END IF;
  v_same := p_created IS NOT NULL AND h.created = p_created;
  IF v_same AND h.version = p_cached_version AND h.segment_length = p_length THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, NULL::smallint, h.version, true, h.created, h.rest_at, h.segment_at, p_length, h.segment_length, v_fingerprint, v_recorded, NULL::bytea[];
    RETURN;
  END IF;
  FOR i IN 1..4 LOOP
    IF v_same AND h.segment_at[i] = p_at[i] AND h.segment_length[i] >= p_length[i] THEN v_from[i] := p_length[i]; END IF;
  END LOOP;
  RETURN QUERY SELECT NULL::smallint, CASE WHEN v_same AND h.rest_at = p_rest_at THEN NULL ELSE h.rest END, NULL::smallint, h.version, false, h.created, h.rest_at,
    h.segment_at, v_from, h.segment_length, v_fingerprint, v_recorded, contextd_link_owners(h.links);
  FOR i IN 1..4 LOOP
    IF h.segment_length[i] > v_from[i] THEN
      -- Without links (every conversation never forked) the rows come in index order, unsorted.
      IF cardinality(h.links) = 0 THEN
        RETURN QUERY SELECT m.segment, m.message, NULL::smallint, NULL::bigint, NULL::boolean, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::bytea[]
          FROM contextd_messages m
          WHERE m.conversation_id = COALESCE(h.storage, h.id) AND m.segment = i - 1 AND m.position >= h.segment_first[i] + v_from[i] AND m.position < h.segment_first[i] + h.segment_length[i]
          ORDER BY m.position;
      ELSE
        RETURN QUERY SELECT (i - 1)::smallint, r.message, r.link, NULL::bigint, NULL::boolean, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::bytea[]
          FROM contextd_linked_rows(COALESCE(h.storage, h.id), (i - 1)::smallint, h.segment_first[i] + v_from[i], h.segment_first[i] + h.segment_length[i], h.links) r
          ORDER BY r.at_position;
      END IF;
    END IF;
  END LOOP;
END
$$;

-- Migration 16's contextd_commit_tail, its message rows with their link and its header row with
-- the links' owners.
CREATE FUNCTION contextd_commit_tail_linked(p_id bytea, p_key bytea, p_now_ms bigint, p_count integer, p_call_ids bytea[])
RETURNS TABLE (segment smallint, message bytea, link smallint, version bigint, created text, rest_at bigint,
  segment_at bigint[], segment_from integer[], segment_length integer[], fingerprint text, recorded bigint, indexed boolean, names bytea[], owners bytea[])
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
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, NULL::smallint, 0::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], v_fingerprint, v_recorded, NULL::boolean, NULL::bytea[], NULL::bytea[];
    RETURN;
  END IF;
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
  END IF;
  IF h.ids_at <> h.version THEN
    RETURN QUERY SELECT NULL::smallint, NULL::bytea, NULL::smallint, h.version, h.created, h.rest_at, h.segment_at, NULL::integer[], h.segment_length, v_fingerprint, v_recorded, false, NULL::bytea[], NULL::bytea[];
    RETURN;
  END IF;
  v_from := ARRAY[0, GREATEST(h.segment_length[2] - p_count, 0), 0, 0];
  IF cardinality(p_call_ids) > 0 THEN
    SELECT array_agg(contextd_latest_call(COALESCE(h.storage, h.id), h.segment_first[2], h.segment_first[2] + h.segment_length[2], h.links, o.id) ORDER BY o.n) INTO v_names
      FROM unnest(p_call_ids) WITH ORDINALITY AS o(id, n);
  END IF;
  RETURN QUERY SELECT NULL::smallint, h.rest, NULL::smallint, h.version, h.created, h.rest_at, h.segment_at, v_from, h.segment_length, v_fingerprint, v_recorded, true, v_names,
    contextd_link_owners(h.links);
  FOR i IN 1..4 LOOP
    IF h.segment_length[i] > v_from[i] THEN
      IF cardinality(h.links) = 0 THEN
        RETURN QUERY SELECT m.segment, m.message, NULL::smallint, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::boolean, NULL::bytea[], NULL::bytea[]
          FROM contextd_messages m
          WHERE m.conversation_id = COALESCE(h.storage, h.id) AND m.segment = i - 1 AND m.position >= h.segment_first[i] + v_from[i] AND m.position < h.segment_first[i] + h.segment_length[i]
          ORDER BY m.position;
      ELSE
        RETURN QUERY SELECT (i - 1)::smallint, r.message, r.link, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::boolean, NULL::bytea[], NULL::bytea[]
          FROM contextd_linked_rows(COALESCE(h.storage, h.id), (i - 1)::smallint, h.segment_first[i] + v_from[i], h.segment_first[i] + h.segment_length[i], h.links) r
          ORDER BY r.at_position;
      END IF;
    END IF;
  END LOOP;
END
$$;

-- Migration 16's contextd_fork_shared with p_copies: false answers 'links' where the fork would
-- copy the rows into its own storage (past ${maxLinks} links), rows sealed for the conversations
-- that wrote them (a sidecar with encryption at rest then writes the fork itself).
CREATE FUNCTION contextd_fork_linked(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest bytea, p_rest_suffix bytea,
  p_lengths integer[], p_title text, p_labels jsonb, p_change bytea, p_now_ms bigint, p_notify text, p_copies boolean
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
  IF v_copy AND NOT p_copies THEN RETURN 'links'; END IF;
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

-- Migration 16's, arguments and outcomes the same: the fork above, copying past ${maxLinks} links.
CREATE OR REPLACE FUNCTION contextd_fork_shared(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest bytea, p_rest_suffix bytea,
  p_lengths integer[], p_title text, p_labels jsonb, p_change bytea, p_now_ms bigint, p_notify text
) RETURNS text
LANGUAGE sql AS $$
  SELECT contextd_fork_linked(p_source, p_version, p_target, p_created, p_rest, p_rest_suffix, p_lengths, p_title, p_labels, p_change, p_now_ms, p_notify, true)
$$;
`,
};
