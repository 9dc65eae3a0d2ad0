import type pg from "pg";
import { removalMigration } from "./postgres-removal-schema.js";
import { forkIndexMigration } from "./postgres-fork-index-schema.js";
import { sharedIndexMigration } from "./postgres-shared-index-schema.js";
import { sharedRowsMigration } from "./postgres-shared-rows-schema.js";
import { sealedLinksMigration } from "./postgres-sealed-links-schema.js";
import { forkTailsMigration } from "./postgres-fork-tails-schema.js";
import { joinedIdsMigration } from "./postgres-joined-ids-schema.js";
import { usageLedgerMigration } from "./postgres-usage-ledger-schema.js";

/**
 * The Postgres store's schema, as numbered migrations the sidecar applies at start (see
 * `migratePostgres`). A migration is never edited once released: a change is a new one.
 *
 * Layout (ids and keys are `bytea`, the UTF-8 of the string: any character including NUL is
 * storable, and `bytea` orders bytewise, as Redis orders the listing index):
 *
 * - `contextd_conversations`: one row per conversation, the header. `version`; `created` (a random
 *   id its first commit wrote, so a cached copy of a conversation deleted and written anew is not
 *   taken for current); `rest` (the state without segments and version, protobuf binary) and
 *   `rest_at` (the version that wrote it); per segment, in the order system, history, memory, tools
 *   (1-based arrays of four): `segment_first` (the position of its first message), `segment_length`,
 *   `segment_at` (the last version that did anything to it other than append).
 * - `contextd_messages`: one row per message, `(conversation_id, segment, position)`, positions
 *   `segment_first .. segment_first + segment_length - 1` of its segment (0 = system ... 3 = tools).
 *   An append inserts rows after the last; an edit that keeps the tail (a compaction) inserts
 *   before the kept rows, at lower positions (they may go negative), so nothing kept is rewritten.
 * - `contextd_changes`: one row per version, the protobuf binary `Change` that Watch serves; the
 *   newest `max_changes` per conversation are kept.
 * - `contextd_idempotency`: per `(conversation_id, key)` the batch's fingerprint, the version it
 *   produced and when the record expires (Unix ms, the sidecar's clock).
 * - `contextd_calibration` (migration 2): per `(tenant, field)` — the tenant's UTF-8, and
 *   `calibrationField` (provider:estimator:model) — one token calibration correction: `factor`,
 *   `reports`, `mean_error` and `reported_at_ms` (the last report, Unix ms, the sidecar's clock).
 *   `contextd_report_usage` applies one report in one statement (see `CalibrationStore`).
 * - Migration 5 adds to `contextd_conversations` what listings read: `created_at_ms` and
 *   `updated_at_ms` (commit times of the first and the current version, Unix ms, the sidecar's
 *   clock; 0 for rows written before), `title` and `labels` (jsonb; copies of the state's), and
 *   the index `((-updated_at_ms), id)` a listing by update pages through.
 * - Migration 8 adds `expires_at_ms` (when the conversation expires, Unix ms, the sidecar's clock;
 *   0 = never) with a partial index for the sweep, and the retention functions: reads and commits
 *   that treat an expired conversation as never written, a delete, a batched delete of the expired.
 * - Migration 10: the usage ledger's tables and `contextd_record_usage` (postgres-usage-ledger-schema.ts).
 * - Migration 11: the id index a commit planned on the stored tail needs (tail-commit.ts):
 *   `contextd_message_ids` (every message id per conversation) and `contextd_tool_calls` (per call
 *   id of history's ASSISTANT messages, the latest call's name), current at the header's `ids_at`;
 *   `contextd_commit_indexed`, the commit that keeps them, and `contextd_commit_tail`, the tail read.
 * - Migration 12: `contextd_commit_listened`, the commit this build calls: 11's with cheaper
 *   statements, notifying only while some sidecar listens (`listenersLockKey`).
 * - Migration 13: a removed conversation's idempotency records and usage ledger go with it, in
 *   `contextd_delete_rows` (postgres-removal-schema.ts).
 * - Migration 14: a fork shares its source's message rows (postgres-shared-rows-schema.ts): the
 *   header's `storage` (where it writes its rows; NULL = its id) and `links` (other storages'
 *   position ranges it reads), `contextd_storage_references`, and the load, tail read, commit,
 *   delete and fork replaced in place to honour them.
 * - Migration 15: `contextd_fork_indexed`, the fork this build calls: 14's, and a fork of the
 *   current version gets the source's current id index (postgres-fork-index-schema.ts).
 * - Migration 16: the id index kept per storage (`contextd_stored_ids`, `contextd_stored_calls`,
 *   replacing 11's tables), so a fork shares it as it shares the rows (postgres-shared-index-schema.ts);
 *   `contextd_commit_shared`, the commit this build calls, and `contextd_fork_shared` again the fork.
 * - Migration 17: forks share rows under encryption at rest too (postgres-sealed-links-schema.ts):
 *   a shared row stays sealed for the conversation that wrote it, so the reads this build calls
 *   (`contextd_load_linked`, `contextd_commit_tail_linked`, the window read through
 *   `contextd_linked_rows`) say per row which link it came from and per link its storage's owner;
 *   `contextd_fork_linked` refuses to copy sealed rows past 64 links.
 * - Migration 18: `contextd_fork_tailed`, the fork this build calls (postgres-fork-tails-schema.ts):
 *   17's fork sharing per segment the longest prefix of the source's current rows, then the rest
 *   of a past version's segments written as the fork's own rows, indexed when the index is shared.
 *
 * Every write of a commit happens in one function call (`contextd_commit_listened` since migration
 * 12, `contextd_commit_indexed` since 11, `contextd_commit` before), one statement (so one transaction and one
 * round trip): it locks the header row, compares versions, writes, and notifies when asked to
 * (`p_notify`, the channel). A transaction that notifies holds a database-wide lock through its
 * commit, WAL flush included, so such commits cannot share a flush (measured: 32 concurrent bare
 * INSERT transactions did 6,581-7,171/s, 2,218-3,827/s with a pg_notify in each); so a sidecar
 * with other commits in flight notifies after them instead, one statement per event-loop
 * iteration (see `PostgresChangeFeed.notifyCommitted`). `contextd_load`
 * reads a state, or what a cached copy lacks, from one snapshot (it is STABLE).
 */

export interface PostgresMigration {
  version: number;
  name: string;
  sql: string;
}

/** The LISTEN/NOTIFY channel a commit notifies; the payload is md5 of the conversation id's UTF-8, in hex. */
export const changesChannel = "contextd_changes";

/**
 * The advisory lock a sidecar's LISTEN connection holds shared while it lives, so that commits
 * notify only while some sidecar listens (migration 12; PostgresChangeFeed). Never changed:
 * migration 12's function holds it as a literal. Its bytes spell "ctxdlstn".
 */
export const listenersLockKey = "7166485279764870254";

/** The key of the advisory lock migrations hold (any constant; this one spells "ctxdmigr"). */
const migrationLockKey = "7234243234373039";

/**
 * Append only: a migration is never edited once a sidecar may have applied it (the table records
 * versions, not text), and one that changes a function states the whole new function. So
 * migrations 3 and 4 repeat most of the function bodies of 1 and 2 on purpose; generating both
 * from one template would let an edit meant for the new function rewrite what old databases ran.
 */
export const postgresMigrations: readonly PostgresMigration[] = [
  {
    version: 1,
    name: "conversations, messages, changes, idempotency records; commit and load functions",
    sql: `
CREATE TABLE contextd_conversations (
  id bytea PRIMARY KEY,
  version bigint NOT NULL CHECK (version > 0),
  created text NOT NULL,
  rest bytea NOT NULL,
  rest_at bigint NOT NULL,
  segment_first bigint[] NOT NULL CHECK (cardinality(segment_first) = 4),
  segment_length integer[] NOT NULL CHECK (cardinality(segment_length) = 4),
  segment_at bigint[] NOT NULL CHECK (cardinality(segment_at) = 4)
);

CREATE TABLE contextd_messages (
  conversation_id bytea NOT NULL,
  segment smallint NOT NULL,
  position bigint NOT NULL,
  message bytea NOT NULL,
  PRIMARY KEY (conversation_id, segment, position)
);

CREATE TABLE contextd_changes (
  conversation_id bytea NOT NULL,
  version bigint NOT NULL,
  change bytea NOT NULL,
  PRIMARY KEY (conversation_id, version)
);

CREATE TABLE contextd_idempotency (
  conversation_id bytea NOT NULL,
  key bytea NOT NULL,
  fingerprint text NOT NULL,
  version bigint NOT NULL,
  expires_at_ms bigint NOT NULL,
  PRIMARY KEY (conversation_id, key)
);
CREATE INDEX contextd_idempotency_expiry ON contextd_idempotency (expires_at_ms);

-- One commit: the outcome is 'ok' (version = the new version), 'replay' (the key's record:
-- fingerprint, recorded; version = the current one), 'conflict' (version = the current one) or
-- 'stale' (the segment lengths the caller's base has are not the stored ones). Messages arrive as
-- one bytea with each message's start (1-based) and length, so they travel in binary.
CREATE FUNCTION contextd_commit(
  p_id bytea, p_base_version bigint, p_change bytea, p_key bytea, p_fingerprint text,
  p_now_ms bigint, p_ttl_ms bigint, p_max_changes bigint, p_notify text,
  p_created text, p_rest bytea,
  p_base_length integer[], p_mode text[], p_keep integer[], p_count integer[],
  p_blob bytea, p_starts integer[], p_lengths integer[]
) RETURNS TABLE (outcome text, version bigint, fingerprint text, recorded bigint)
LANGUAGE plpgsql AS $$
DECLARE
  h contextd_conversations%ROWTYPE;
  v_current bigint;
  v_version bigint;
  v_first bigint[];
  v_length integer[];
  v_at bigint[];
  v_fingerprint text;
  v_recorded bigint;
  v_offset integer := 0;
  v_start bigint;
  i integer;
BEGIN
  SELECT * INTO h FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  v_current := COALESCE(h.version, 0);
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
    IF FOUND THEN
      RETURN QUERY SELECT 'replay'::text, v_current, v_fingerprint, v_recorded;
      RETURN;
    END IF;
  END IF;
  IF p_base_version <> v_current THEN
    RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  v_version := v_current + 1;
  IF h.id IS NULL THEN
    -- A first commit: another writer may be inserting the same conversation. The primary key
    -- lets one in; the other waits for it, finds the row and answers 'conflict'.
    INSERT INTO contextd_conversations AS c (id, version, created, rest, rest_at, segment_first, segment_length, segment_at)
      VALUES (p_id, v_version, p_created, COALESCE(p_rest, ''::bytea), v_version, '{0,0,0,0}', '{0,0,0,0}', ARRAY[v_version, v_version, v_version, v_version])
      ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
      SELECT c.version INTO v_current FROM contextd_conversations c WHERE c.id = p_id;
      RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint;
      RETURN;
    END IF;
    v_first := '{0,0,0,0}';
    v_length := '{0,0,0,0}';
    v_at := ARRAY[v_version, v_version, v_version, v_version];
  ELSE
    IF h.segment_length <> p_base_length THEN
      RETURN QUERY SELECT 'stale'::text, v_current, NULL::text, NULL::bigint;
      RETURN;
    END IF;
    v_first := h.segment_first;
    v_length := h.segment_length;
    v_at := h.segment_at;
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
        v_start := v_first[i] + p_keep[i];
        IF p_keep[i] <> v_length[i] THEN v_at[i] := v_version; END IF;
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      INSERT INTO contextd_messages (conversation_id, segment, position, message)
        SELECT p_id, i - 1, v_start + n - 1, substring(p_blob FROM p_starts[v_offset + n] FOR p_lengths[v_offset + n])
        FROM generate_series(1, p_count[i]) AS n;
      v_length[i] := p_keep[i] + p_count[i];
      v_offset := v_offset + p_count[i];
    END IF;
  END LOOP;
  UPDATE contextd_conversations c SET
    version = v_version,
    rest = COALESCE(p_rest, c.rest),
    rest_at = CASE WHEN p_rest IS NULL THEN c.rest_at ELSE v_version END,
    segment_first = v_first, segment_length = v_length, segment_at = v_at
  WHERE c.id = p_id;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_id, v_version, p_change);
  IF v_version > p_max_changes THEN
    DELETE FROM contextd_changes ch WHERE ch.conversation_id = p_id AND ch.version <= v_version - p_max_changes;
  END IF;
  IF p_key <> ''::bytea THEN
    INSERT INTO contextd_idempotency AS k (conversation_id, key, fingerprint, version, expires_at_ms)
      VALUES (p_id, p_key, p_fingerprint, v_version, p_now_ms + p_ttl_ms)
      ON CONFLICT (conversation_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, version = EXCLUDED.version, expires_at_ms = EXCLUDED.expires_at_ms;
    -- Each keyed commit removes up to 8 expired records (of any conversation), so expired records
    -- go eight times as fast as new ones come; SKIP LOCKED keeps concurrent commits off each other's.
    DELETE FROM contextd_idempotency k WHERE k.ctid IN (
      SELECT e.ctid FROM contextd_idempotency e WHERE e.expires_at_ms <= p_now_ms ORDER BY e.expires_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  END IF;
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  RETURN QUERY SELECT 'ok'::text, v_version, NULL::text, NULL::bigint;
END
$$;

-- A state, or what a cached copy (its version, created, rest_at, and per segment _at and length)
-- lacks. The first row is the header: segment NULL, message = rest (NULL when the copy's is
-- current), current = true when the copy is the stored version (then nothing else follows), and
-- per segment from (where the rows sent start: the copy's length when the segment only grew
-- since, else 0). Message rows follow in segment and position order. version 0 = never written.
CREATE FUNCTION contextd_load(
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
      RETURN QUERY SELECT m.segment, m.message, NULL::bigint, NULL::boolean, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint
        FROM contextd_messages m
        WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= h.segment_first[i] + v_from[i] AND m.position < h.segment_first[i] + h.segment_length[i]
        ORDER BY m.position;
    END IF;
  END LOOP;
END
$$;
`,
  },
  {
    version: 2,
    name: "token calibration records and the report function",
    sql: `
CREATE TABLE contextd_calibration (
  tenant bytea NOT NULL,
  field bytea NOT NULL,
  factor double precision NOT NULL,
  reports bigint NOT NULL,
  mean_error double precision NOT NULL,
  reported_at_ms bigint NOT NULL,
  PRIMARY KEY (tenant, field)
);
CREATE INDEX contextd_calibration_reported ON contextd_calibration (reported_at_ms);

-- One usage report: learnCorrection's arithmetic (the same double operations in the same order)
-- on the key's row, locked; a row not reported for p_ttl_ms counts as none. A report that adds a
-- key then removes the tenant's least recently reported keys past p_max_keys, and every report
-- removes up to 8 expired rows of any tenant; both skip rows other reports hold, so concurrent
-- reports never wait on each other's keys (a tenant may be over its bound by the reports in flight
-- until the next report that adds a key).
CREATE FUNCTION contextd_report_usage(
  p_tenant bytea, p_field bytea, p_estimated double precision, p_actual double precision,
  p_now_ms bigint, p_ttl_ms bigint, p_max_keys integer,
  p_min double precision, p_max double precision, p_window double precision
) RETURNS TABLE (factor double precision, reports bigint, mean_error double precision, relative_error double precision)
LANGUAGE plpgsql AS $$
DECLARE
  r contextd_calibration%ROWTYPE;
  v_added boolean;
  v_factor double precision := 1;
  v_reports bigint := 0;
  v_error double precision := 0;
  v_ratio double precision;
  v_relative double precision;
  v_weight double precision;
  v_learnt double precision;
BEGIN
  -- A new key's row first, so two first reports of a key serialize on it like later ones.
  INSERT INTO contextd_calibration AS c (tenant, field, factor, reports, mean_error, reported_at_ms)
    VALUES (p_tenant, p_field, 1, 0, 0, p_now_ms) ON CONFLICT (tenant, field) DO NOTHING;
  v_added := FOUND;
  SELECT * INTO r FROM contextd_calibration c WHERE c.tenant = p_tenant AND c.field = p_field FOR UPDATE;
  IF r.reported_at_ms > p_now_ms - p_ttl_ms THEN
    v_factor := r.factor;
    v_reports := r.reports;
    v_error := r.mean_error;
  END IF;
  v_ratio := LEAST(p_max, GREATEST(p_min, p_actual / p_estimated));
  v_relative := abs(p_estimated * v_factor - p_actual) / p_actual;
  v_reports := v_reports + 1;
  v_weight := 1 / LEAST(v_reports::double precision, p_window);
  v_learnt := v_factor + v_weight * (v_ratio - v_factor);
  v_error := v_error + v_weight * (v_relative - v_error);
  v_learnt := LEAST(p_max, GREATEST(p_min, v_learnt));
  UPDATE contextd_calibration c SET factor = v_learnt, reports = v_reports, mean_error = v_error, reported_at_ms = p_now_ms
    WHERE c.tenant = p_tenant AND c.field = p_field;
  IF v_added THEN
    DELETE FROM contextd_calibration c WHERE c.ctid IN (
      SELECT o.ctid FROM contextd_calibration o WHERE o.tenant = p_tenant
        ORDER BY o.field = p_field DESC, o.reported_at_ms DESC, o.field OFFSET p_max_keys FOR UPDATE SKIP LOCKED);
  END IF;
  DELETE FROM contextd_calibration c WHERE c.ctid IN (
    SELECT e.ctid FROM contextd_calibration e WHERE e.reported_at_ms <= p_now_ms - p_ttl_ms ORDER BY e.reported_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  RETURN QUERY SELECT v_learnt, v_reports, v_error, v_relative;
END
$$;
`,
  },
  {
    version: 3,
    name: "contextd_commit reads only the header columns it uses and skips the no-op delete of an append",
    // Measured (bench/fleet/postgres-commit.ts and a direct call of the function beside variants,
    // node pg, fsync off): the commit's server time is its statements; an append ran a DELETE that
    // found nothing, and SELECT * read the header's rest (the state's artifacts, tools, ...; any
    // size) into a row variable that never used it.
    sql: `
CREATE OR REPLACE FUNCTION contextd_commit(
  p_id bytea, p_base_version bigint, p_change bytea, p_key bytea, p_fingerprint text,
  p_now_ms bigint, p_ttl_ms bigint, p_max_changes bigint, p_notify text,
  p_created text, p_rest bytea,
  p_base_length integer[], p_mode text[], p_keep integer[], p_count integer[],
  p_blob bytea, p_starts integer[], p_lengths integer[]
) RETURNS TABLE (outcome text, version bigint, fingerprint text, recorded bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_exists boolean;
  v_current bigint;
  v_version bigint;
  v_first bigint[];
  v_length integer[];
  v_at bigint[];
  v_fingerprint text;
  v_recorded bigint;
  v_offset integer := 0;
  v_start bigint;
  i integer;
BEGIN
  SELECT c.version, c.segment_first, c.segment_length, c.segment_at INTO v_current, v_first, v_length, v_at
    FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  v_exists := FOUND;
  v_current := COALESCE(v_current, 0);
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
    IF FOUND THEN
      RETURN QUERY SELECT 'replay'::text, v_current, v_fingerprint, v_recorded;
      RETURN;
    END IF;
  END IF;
  IF p_base_version <> v_current THEN
    RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  v_version := v_current + 1;
  IF NOT v_exists THEN
    -- A first commit: another writer may be inserting the same conversation. The primary key
    -- lets one in; the other waits for it, finds the row and answers 'conflict'.
    INSERT INTO contextd_conversations AS c (id, version, created, rest, rest_at, segment_first, segment_length, segment_at)
      VALUES (p_id, v_version, p_created, COALESCE(p_rest, ''::bytea), v_version, '{0,0,0,0}', '{0,0,0,0}', ARRAY[v_version, v_version, v_version, v_version])
      ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
      SELECT c.version INTO v_current FROM contextd_conversations c WHERE c.id = p_id;
      RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint;
      RETURN;
    END IF;
    v_first := '{0,0,0,0}';
    v_length := '{0,0,0,0}';
    v_at := ARRAY[v_version, v_version, v_version, v_version];
  ELSIF v_length <> p_base_length THEN
    RETURN QUERY SELECT 'stale'::text, v_current, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        -- An append (keeping every row) deletes nothing: no statement for it.
        IF p_keep[i] <> v_length[i] THEN
          DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
          v_at[i] := v_version;
        END IF;
        v_start := v_first[i] + p_keep[i];
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      INSERT INTO contextd_messages (conversation_id, segment, position, message)
        SELECT p_id, i - 1, v_start + n - 1, substring(p_blob FROM p_starts[v_offset + n] FOR p_lengths[v_offset + n])
        FROM generate_series(1, p_count[i]) AS n;
      v_length[i] := p_keep[i] + p_count[i];
      v_offset := v_offset + p_count[i];
    END IF;
  END LOOP;
  UPDATE contextd_conversations c SET
    version = v_version,
    rest = COALESCE(p_rest, c.rest),
    rest_at = CASE WHEN p_rest IS NULL THEN c.rest_at ELSE v_version END,
    segment_first = v_first, segment_length = v_length, segment_at = v_at
  WHERE c.id = p_id;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_id, v_version, p_change);
  IF v_version > p_max_changes THEN
    DELETE FROM contextd_changes ch WHERE ch.conversation_id = p_id AND ch.version <= v_version - p_max_changes;
  END IF;
  IF p_key <> ''::bytea THEN
    INSERT INTO contextd_idempotency AS k (conversation_id, key, fingerprint, version, expires_at_ms)
      VALUES (p_id, p_key, p_fingerprint, v_version, p_now_ms + p_ttl_ms)
      ON CONFLICT (conversation_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, version = EXCLUDED.version, expires_at_ms = EXCLUDED.expires_at_ms;
    -- Each keyed commit removes up to 8 expired records (of any conversation), so expired records
    -- go eight times as fast as new ones come; SKIP LOCKED keeps concurrent commits off each other's.
    DELETE FROM contextd_idempotency k WHERE k.ctid IN (
      SELECT e.ctid FROM contextd_idempotency e WHERE e.expires_at_ms <= p_now_ms ORDER BY e.expires_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  END IF;
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  RETURN QUERY SELECT 'ok'::text, v_version, NULL::text, NULL::bigint;
END
$$;
`,
  },
  {
    version: 4,
    name: "token calibration moves by bounded steps",
    sql: `
-- contextd_report_usage with p_step: one report moves a correction to at most p_step times, and
-- at least 1 / p_step of, the one before (learnCorrection's maxCorrectionStep), so one report of
-- 4000:1 no longer moves it to p_max. A new overload beside migration 2's: sidecars of the
-- previous release, still running during an upgrade, call the old one and keep working.
CREATE FUNCTION contextd_report_usage(
  p_tenant bytea, p_field bytea, p_estimated double precision, p_actual double precision,
  p_now_ms bigint, p_ttl_ms bigint, p_max_keys integer,
  p_min double precision, p_max double precision, p_window double precision, p_step double precision
) RETURNS TABLE (factor double precision, reports bigint, mean_error double precision, relative_error double precision)
LANGUAGE plpgsql AS $$
DECLARE
  r contextd_calibration%ROWTYPE;
  v_added boolean;
  v_factor double precision := 1;
  v_reports bigint := 0;
  v_error double precision := 0;
  v_ratio double precision;
  v_relative double precision;
  v_weight double precision;
  v_learnt double precision;
BEGIN
  -- A new key's row first, so two first reports of a key serialize on it like later ones.
  INSERT INTO contextd_calibration AS c (tenant, field, factor, reports, mean_error, reported_at_ms)
    VALUES (p_tenant, p_field, 1, 0, 0, p_now_ms) ON CONFLICT (tenant, field) DO NOTHING;
  v_added := FOUND;
  SELECT * INTO r FROM contextd_calibration c WHERE c.tenant = p_tenant AND c.field = p_field FOR UPDATE;
  IF r.reported_at_ms > p_now_ms - p_ttl_ms THEN
    v_factor := r.factor;
    v_reports := r.reports;
    v_error := r.mean_error;
  END IF;
  v_ratio := LEAST(p_max, GREATEST(p_min, p_actual / p_estimated));
  v_relative := abs(p_estimated * v_factor - p_actual) / p_actual;
  v_reports := v_reports + 1;
  v_weight := 1 / LEAST(v_reports::double precision, p_window);
  v_learnt := v_factor + v_weight * (v_ratio - v_factor);
  v_error := v_error + v_weight * (v_relative - v_error);
  v_learnt := LEAST(v_factor * p_step, GREATEST(v_factor / p_step, v_learnt));
  v_learnt := LEAST(p_max, GREATEST(p_min, v_learnt));
  UPDATE contextd_calibration c SET factor = v_learnt, reports = v_reports, mean_error = v_error, reported_at_ms = p_now_ms
    WHERE c.tenant = p_tenant AND c.field = p_field;
  IF v_added THEN
    DELETE FROM contextd_calibration c WHERE c.ctid IN (
      SELECT o.ctid FROM contextd_calibration o WHERE o.tenant = p_tenant
        ORDER BY o.field = p_field DESC, o.reported_at_ms DESC, o.field OFFSET p_max_keys FOR UPDATE SKIP LOCKED);
  END IF;
  DELETE FROM contextd_calibration c WHERE c.ctid IN (
    SELECT e.ctid FROM contextd_calibration e WHERE e.reported_at_ms <= p_now_ms - p_ttl_ms ORDER BY e.reported_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  RETURN QUERY SELECT v_learnt, v_reports, v_error, v_relative;
END
$$;
`,
  },
  {
    version: 5,
    name: "conversation metadata for listings: created and updated times, title, labels; an index by update",
    // Rows written before keep 0 for both times (unknown); a listing by update puts them last.
    // contextd_commit gets a new overload that sets them, beside migration 3's, which sidecars of
    // the previous release keep calling during a rolling upgrade (their commits leave the times
    // as they were). The title and labels are copies of the state's (in rest), which a listing
    // does not decode; NULL leaves them unchanged.
    sql: `
ALTER TABLE contextd_conversations
  ADD COLUMN created_at_ms bigint NOT NULL DEFAULT 0,
  ADD COLUMN updated_at_ms bigint NOT NULL DEFAULT 0,
  ADD COLUMN title text NOT NULL DEFAULT '',
  ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
-- Newest first, ties by id: what a listing by update reads in order from its page token.
CREATE INDEX contextd_conversations_updated ON contextd_conversations ((-updated_at_ms), id);
CREATE FUNCTION contextd_commit(
  p_id bytea, p_base_version bigint, p_change bytea, p_key bytea, p_fingerprint text,
  p_now_ms bigint, p_ttl_ms bigint, p_max_changes bigint, p_notify text,
  p_created text, p_rest bytea,
  p_base_length integer[], p_mode text[], p_keep integer[], p_count integer[],
  p_blob bytea, p_starts integer[], p_lengths integer[],
  p_updated_ms bigint, p_title text, p_labels jsonb
) RETURNS TABLE (outcome text, version bigint, fingerprint text, recorded bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_exists boolean;
  v_current bigint;
  v_version bigint;
  v_first bigint[];
  v_length integer[];
  v_at bigint[];
  v_fingerprint text;
  v_recorded bigint;
  v_offset integer := 0;
  v_start bigint;
  i integer;
BEGIN
  SELECT c.version, c.segment_first, c.segment_length, c.segment_at INTO v_current, v_first, v_length, v_at
    FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  v_exists := FOUND;
  v_current := COALESCE(v_current, 0);
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
    IF FOUND THEN
      RETURN QUERY SELECT 'replay'::text, v_current, v_fingerprint, v_recorded;
      RETURN;
    END IF;
  END IF;
  IF p_base_version <> v_current THEN
    RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  v_version := v_current + 1;
  IF NOT v_exists THEN
    -- A first commit: another writer may be inserting the same conversation. The primary key
    -- lets one in; the other waits for it, finds the row and answers 'conflict'.
    INSERT INTO contextd_conversations AS c (id, version, created, rest, rest_at, segment_first, segment_length, segment_at, created_at_ms, updated_at_ms)
      VALUES (p_id, v_version, p_created, COALESCE(p_rest, ''::bytea), v_version, '{0,0,0,0}', '{0,0,0,0}', ARRAY[v_version, v_version, v_version, v_version], p_updated_ms, p_updated_ms)
      ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
      SELECT c.version INTO v_current FROM contextd_conversations c WHERE c.id = p_id;
      RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint;
      RETURN;
    END IF;
    v_first := '{0,0,0,0}';
    v_length := '{0,0,0,0}';
    v_at := ARRAY[v_version, v_version, v_version, v_version];
  ELSIF v_length <> p_base_length THEN
    RETURN QUERY SELECT 'stale'::text, v_current, NULL::text, NULL::bigint;
    RETURN;
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        -- An append (keeping every row) deletes nothing: no statement for it.
        IF p_keep[i] <> v_length[i] THEN
          DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
          v_at[i] := v_version;
        END IF;
        v_start := v_first[i] + p_keep[i];
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      INSERT INTO contextd_messages (conversation_id, segment, position, message)
        SELECT p_id, i - 1, v_start + n - 1, substring(p_blob FROM p_starts[v_offset + n] FOR p_lengths[v_offset + n])
        FROM generate_series(1, p_count[i]) AS n;
      v_length[i] := p_keep[i] + p_count[i];
      v_offset := v_offset + p_count[i];
    END IF;
  END LOOP;
  UPDATE contextd_conversations c SET
    version = v_version,
    rest = COALESCE(p_rest, c.rest),
    rest_at = CASE WHEN p_rest IS NULL THEN c.rest_at ELSE v_version END,
    segment_first = v_first, segment_length = v_length, segment_at = v_at,
    updated_at_ms = p_updated_ms,
    title = COALESCE(p_title, c.title),
    labels = COALESCE(p_labels, c.labels)
  WHERE c.id = p_id;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_id, v_version, p_change);
  IF v_version > p_max_changes THEN
    DELETE FROM contextd_changes ch WHERE ch.conversation_id = p_id AND ch.version <= v_version - p_max_changes;
  END IF;
  IF p_key <> ''::bytea THEN
    INSERT INTO contextd_idempotency AS k (conversation_id, key, fingerprint, version, expires_at_ms)
      VALUES (p_id, p_key, p_fingerprint, v_version, p_now_ms + p_ttl_ms)
      ON CONFLICT (conversation_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, version = EXCLUDED.version, expires_at_ms = EXCLUDED.expires_at_ms;
    -- Each keyed commit removes up to 8 expired records (of any conversation), so expired records
    -- go eight times as fast as new ones come; SKIP LOCKED keeps concurrent commits off each other's.
    DELETE FROM contextd_idempotency k WHERE k.ctid IN (
      SELECT e.ctid FROM contextd_idempotency e WHERE e.expires_at_ms <= p_now_ms ORDER BY e.expires_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  END IF;
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  RETURN QUERY SELECT 'ok'::text, v_version, NULL::text, NULL::bigint;
END
$$;

`,
  },
  {
    version: 7,
    name: "contextd_fork: a conversation's current version copied into a new one, rows by INSERT ... SELECT",
    // Why: a fork through contextd_commit sends every message of the source back to the database;
    // here the rows are copied inside it, and the sidecar sends the new header's few columns and
    // the change row. The source header is locked FOR SHARE, so a commit to the source waits for
    // the copy instead of changing the rows under it. The new rest is the source's with the new id
    // and forked_from appended (protobuf keeps the last of a repeated singular field). Each _at is
    // 1, the new conversation's first version, as a first commit's. 'moved' = the source is not
    // at p_version or expires; 'exists' = the new id has a header row.
    sql: `
CREATE FUNCTION contextd_fork(
  p_source bytea, p_version bigint, p_target bytea, p_created text, p_rest_suffix bytea,
  p_change bytea, p_now_ms bigint, p_notify text
) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_source contextd_conversations%ROWTYPE;
BEGIN
  SELECT * INTO v_source FROM contextd_conversations c WHERE c.id = p_source FOR SHARE;
  IF NOT FOUND OR v_source.version <> p_version THEN RETURN 'moved'; END IF;
  -- A source that expires (migration 8's column; this function runs only once every migration is
  -- applied) is forked through contextd_commit, which gives the fork its own expiry.
  IF v_source.expires_at_ms <> 0 THEN RETURN 'moved'; END IF;
  INSERT INTO contextd_conversations AS t (id, version, created, rest, rest_at, segment_first, segment_length, segment_at, created_at_ms, updated_at_ms, title, labels)
    VALUES (p_target, 1, p_created, v_source.rest || p_rest_suffix, 1, v_source.segment_first, v_source.segment_length, '{1,1,1,1}', p_now_ms, p_now_ms, v_source.title, v_source.labels)
    ON CONFLICT (id) DO NOTHING;
  IF NOT FOUND THEN RETURN 'exists'; END IF;
  INSERT INTO contextd_messages (conversation_id, segment, position, message)
    SELECT p_target, m.segment, m.position, m.message FROM contextd_messages m
    WHERE m.conversation_id = p_source
      AND m.position >= v_source.segment_first[m.segment + 1]
      AND m.position < v_source.segment_first[m.segment + 1] + v_source.segment_length[m.segment + 1];
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_target, 1, p_change)
    ON CONFLICT (conversation_id, version) DO UPDATE SET change = EXCLUDED.change;
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_target)); END IF;
  RETURN 'ok';
END
$$;
`,
  },
  {
    version: 8,
    name: "retention: conversation expiry (column, index, commit and load that honour it, a batched delete of the expired) and deletes",
    // Additive: new functions beside the old ones, which sidecars of the previous release keep
    // calling during a rolling upgrade (their commits leave expires_at_ms as it was). Every row
    // keyed by a conversation id goes in contextd_delete_rows, the one place a new such table must
    // be added to; idempotency records are left to their own expiry, as on every store.
    sql: `
ALTER TABLE contextd_conversations ADD COLUMN expires_at_ms bigint NOT NULL DEFAULT 0;
-- Only conversations that expire: the sweep reads them soonest first.
CREATE INDEX contextd_conversations_expiry ON contextd_conversations (expires_at_ms) WHERE expires_at_ms > 0;

CREATE FUNCTION contextd_delete_rows(p_ids bytea[]) RETURNS void LANGUAGE sql AS $$
  DELETE FROM contextd_messages m WHERE m.conversation_id = ANY(p_ids);
  DELETE FROM contextd_changes ch WHERE ch.conversation_id = ANY(p_ids);
  DELETE FROM contextd_conversations c WHERE c.id = ANY(p_ids);
$$;

-- One delete after the expected-version check (p_expected -1 = any; an expired conversation is at
-- version 0): 'ok' with the version deleted (0 = nothing stored), or 'conflict' with the current one.
CREATE FUNCTION contextd_delete(p_id bytea, p_expected bigint, p_now_ms bigint, p_notify text)
RETURNS TABLE (outcome text, version bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_current bigint;
  v_expires bigint;
BEGIN
  SELECT c.version, c.expires_at_ms INTO v_current, v_expires FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  IF NOT FOUND OR (v_expires > 0 AND v_expires <= p_now_ms) THEN v_current := 0; END IF;
  IF p_expected >= 0 AND p_expected <> v_current THEN
    RETURN QUERY SELECT 'conflict'::text, v_current;
    RETURN;
  END IF;
  PERFORM contextd_delete_rows(ARRAY[p_id]);
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  RETURN QUERY SELECT 'ok'::text, v_current;
END
$$;

-- One batch of the expiry sweep: up to p_limit expired conversations, soonest first, skipping rows
-- a commit holds. Returns how many went.
CREATE FUNCTION contextd_delete_expired(p_now_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_ids bytea[];
BEGIN
  SELECT array_agg(e.id) INTO v_ids FROM (
    SELECT c.id FROM contextd_conversations c WHERE c.expires_at_ms > 0 AND c.expires_at_ms <= p_now_ms
    ORDER BY c.expires_at_ms LIMIT p_limit FOR UPDATE SKIP LOCKED) e;
  IF v_ids IS NULL THEN RETURN 0; END IF;
  PERFORM contextd_delete_rows(v_ids);
  RETURN cardinality(v_ids);
END
$$;

-- contextd_load for a conversation that has not expired; an expired one loads as never written
-- (0xff is in no UTF-8 id, so no row has it), whether or not a sweep removed it yet.
CREATE FUNCTION contextd_load_unexpired(
  p_id bytea, p_key bytea, p_now_ms bigint,
  p_cached_version bigint, p_created text, p_rest_at bigint, p_at bigint[], p_length integer[]
) RETURNS TABLE (segment smallint, message bytea, version bigint, current boolean, created text, rest_at bigint,
  segment_at bigint[], segment_from integer[], segment_length integer[], fingerprint text, recorded bigint)
LANGUAGE sql STABLE AS $$
  SELECT * FROM contextd_load(
    CASE WHEN EXISTS (SELECT 1 FROM contextd_conversations c WHERE c.id = p_id AND c.expires_at_ms > 0 AND c.expires_at_ms <= p_now_ms)
      THEN '\\xff'::bytea ELSE p_id END,
    p_key, p_now_ms, p_cached_version, p_created, p_rest_at, p_at, p_length)
$$;

-- Migration 5's commit, with the expiry: an expired conversation no sweep removed yet is removed
-- first (the reader saw it as never written, so the commit starts it anew), and an applied commit
-- sets when the conversation expires (0 = never).
CREATE FUNCTION contextd_commit_expiring(
  p_expires_at_ms bigint,
  p_id bytea, p_base_version bigint, p_change bytea, p_key bytea, p_fingerprint text,
  p_now_ms bigint, p_ttl_ms bigint, p_max_changes bigint, p_notify text,
  p_created text, p_rest bytea,
  p_base_length integer[], p_mode text[], p_keep integer[], p_count integer[],
  p_blob bytea, p_starts integer[], p_lengths integer[],
  p_updated_ms bigint, p_title text, p_labels jsonb
) RETURNS TABLE (outcome text, version bigint, fingerprint text, recorded bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v_expires bigint;
  r record;
BEGIN
  SELECT c.expires_at_ms INTO v_expires FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  IF FOUND AND v_expires > 0 AND v_expires <= p_now_ms THEN PERFORM contextd_delete_rows(ARRAY[p_id]); END IF;
  SELECT * INTO r FROM contextd_commit(p_id, p_base_version, p_change, p_key, p_fingerprint, p_now_ms, p_ttl_ms, p_max_changes, p_notify,
    p_created, p_rest, p_base_length, p_mode, p_keep, p_count, p_blob, p_starts, p_lengths, p_updated_ms, p_title, p_labels);
  -- Only when the expiry is or was set: a deployment without TTLs pays no second row update.
  IF r.outcome = 'ok' AND (p_expires_at_ms <> 0 OR COALESCE(v_expires, 0) <> 0) THEN
    UPDATE contextd_conversations c SET expires_at_ms = p_expires_at_ms WHERE c.id = p_id;
  END IF;
  RETURN QUERY SELECT r.outcome, r.version, r.fingerprint, r.recorded;
END
$$;
`,
  },
  usageLedgerMigration,
  {
    version: 11,
    name: "the id index (message ids and history's tool calls per conversation), a commit that keeps it with one row update, and the tail read",
    // Additive, like 5 and 8: contextd_commit_expiring stays for sidecars of the previous release
    // during a rolling upgrade. Their commits leave ids_at behind the version, which marks the
    // index stale: the next commit of this release that finds it so plans on the whole state and
    // writes the index whole (mode 'b'), once. Rows written before this migration have ids_at 0,
    // stale the same way. contextd_delete_rows is restated with the index's tables.
    sql: `
ALTER TABLE contextd_conversations ADD COLUMN ids_at bigint NOT NULL DEFAULT 0;

-- Every message id of every segment (UTF-8), current at the header's ids_at.
CREATE TABLE contextd_message_ids (
  conversation_id bytea NOT NULL,
  message_id bytea NOT NULL,
  PRIMARY KEY (conversation_id, message_id)
);

-- Per tool-call id made by an ASSISTANT message of history, the name of the latest such call.
CREATE TABLE contextd_tool_calls (
  conversation_id bytea NOT NULL,
  call_id bytea NOT NULL,
  name bytea NOT NULL,
  PRIMARY KEY (conversation_id, call_id)
);

CREATE OR REPLACE FUNCTION contextd_delete_rows(p_ids bytea[]) RETURNS void LANGUAGE sql AS $$
  DELETE FROM contextd_messages m WHERE m.conversation_id = ANY(p_ids);
  DELETE FROM contextd_changes ch WHERE ch.conversation_id = ANY(p_ids);
  DELETE FROM contextd_message_ids x WHERE x.conversation_id = ANY(p_ids);
  DELETE FROM contextd_tool_calls t WHERE t.conversation_id = ANY(p_ids);
  DELETE FROM contextd_conversations c WHERE c.id = ANY(p_ids);
$$;

-- Migration 8's contextd_commit_expiring in one body (no nested call, one UPDATE of the header row
-- for version, segments, times, expiry and ids_at), with the id index's changes: p_index_mode 'a'
-- applies them to a current index (and leaves a stale one stale), 'b' replaces the index with
-- them (a clear, a rebuild), 't' (a commit planned on the stored tail) answers 'unindexed' when the
-- index is not current and 'taken' when one of p_added is in it, writing nothing. The index is
-- current when ids_at is the version (or nothing is stored). Outcomes as contextd_commit's, and
-- indexed = whether the index is current at the new version ('ok').
CREATE FUNCTION contextd_commit_indexed(
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
  v_fingerprint text;
  v_recorded bigint;
  v_offset integer := 0;
  v_start bigint;
  v_rebuild boolean;
  v_indexed boolean;
  i integer;
BEGIN
  SELECT c.version, c.segment_first, c.segment_length, c.segment_at, c.expires_at_ms, c.ids_at
    INTO v_current, v_first, v_length, v_at, v_expires, v_ids_at
    FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  v_exists := FOUND;
  -- An expired conversation no sweep removed yet: the reader saw it as never written.
  IF v_exists AND v_expires > 0 AND v_expires <= p_now_ms THEN
    PERFORM contextd_delete_rows(ARRAY[p_id]);
    v_exists := false;
    v_current := NULL;
  END IF;
  v_current := COALESCE(v_current, 0);
  IF p_key <> ''::bytea THEN
    SELECT k.fingerprint, k.version INTO v_fingerprint, v_recorded FROM contextd_idempotency k
      WHERE k.conversation_id = p_id AND k.key = p_key AND k.expires_at_ms > p_now_ms;
    IF FOUND THEN
      RETURN QUERY SELECT 'replay'::text, v_current, v_fingerprint, v_recorded, NULL::boolean;
      RETURN;
    END IF;
  END IF;
  IF p_base_version <> v_current THEN
    RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint, NULL::boolean;
    RETURN;
  END IF;
  IF v_exists AND v_length <> p_base_length THEN
    RETURN QUERY SELECT 'stale'::text, v_current, NULL::text, NULL::bigint, NULL::boolean;
    RETURN;
  END IF;
  v_indexed := NOT v_exists OR v_ids_at = v_current;
  v_rebuild := p_index_mode = 'b' OR NOT v_exists;
  IF p_index_mode = 't' THEN
    IF NOT v_indexed THEN
      RETURN QUERY SELECT 'unindexed'::text, v_current, NULL::text, NULL::bigint, false;
      RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM contextd_message_ids x WHERE x.conversation_id = p_id AND x.message_id = ANY(p_added)) THEN
      RETURN QUERY SELECT 'taken'::text, v_current, NULL::text, NULL::bigint, true;
      RETURN;
    END IF;
  END IF;
  v_version := v_current + 1;
  IF NOT v_exists THEN
    -- A first commit: another writer may be inserting the same conversation. The primary key
    -- lets one in; the other waits for it, finds the row and answers 'conflict'.
    INSERT INTO contextd_conversations AS c (id, version, created, rest, rest_at, segment_first, segment_length, segment_at, created_at_ms, updated_at_ms)
      VALUES (p_id, v_version, p_created, COALESCE(p_rest, ''::bytea), v_version, '{0,0,0,0}', '{0,0,0,0}', ARRAY[v_version, v_version, v_version, v_version], p_updated_ms, p_updated_ms)
      ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
      SELECT c.version INTO v_current FROM contextd_conversations c WHERE c.id = p_id;
      RETURN QUERY SELECT 'conflict'::text, v_current, NULL::text, NULL::bigint, NULL::boolean;
      RETURN;
    END IF;
    v_first := '{0,0,0,0}';
    v_length := '{0,0,0,0}';
    v_at := ARRAY[v_version, v_version, v_version, v_version];
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        -- An append (keeping every row) deletes nothing: no statement for it.
        IF p_keep[i] <> v_length[i] THEN
          DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
          v_at[i] := v_version;
        END IF;
        v_start := v_first[i] + p_keep[i];
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      INSERT INTO contextd_messages (conversation_id, segment, position, message)
        SELECT p_id, i - 1, v_start + n - 1, substring(p_blob FROM p_starts[v_offset + n] FOR p_lengths[v_offset + n])
        FROM generate_series(1, p_count[i]) AS n;
      v_length[i] := p_keep[i] + p_count[i];
      v_offset := v_offset + p_count[i];
    END IF;
  END LOOP;
  IF v_rebuild OR v_indexed THEN
    IF v_rebuild THEN
      DELETE FROM contextd_message_ids x WHERE x.conversation_id = p_id;
      DELETE FROM contextd_tool_calls t WHERE t.conversation_id = p_id;
    END IF;
    -- Removed before added: an edit that replaces a message by one with its id keeps the id.
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
    ids_at = CASE WHEN v_rebuild OR v_indexed THEN v_version ELSE c.ids_at END
  WHERE c.id = p_id;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_id, v_version, p_change);
  IF v_version > p_max_changes THEN
    DELETE FROM contextd_changes ch WHERE ch.conversation_id = p_id AND ch.version <= v_version - p_max_changes;
  END IF;
  IF p_key <> ''::bytea THEN
    INSERT INTO contextd_idempotency AS k (conversation_id, key, fingerprint, version, expires_at_ms)
      VALUES (p_id, p_key, p_fingerprint, v_version, p_now_ms + p_ttl_ms)
      ON CONFLICT (conversation_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, version = EXCLUDED.version, expires_at_ms = EXCLUDED.expires_at_ms;
    -- Each keyed commit removes up to 8 expired records (of any conversation), so expired records
    -- go eight times as fast as new ones come; SKIP LOCKED keeps concurrent commits off each other's.
    DELETE FROM contextd_idempotency k WHERE k.ctid IN (
      SELECT e.ctid FROM contextd_idempotency e WHERE e.expires_at_ms <= p_now_ms ORDER BY e.expires_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  END IF;
  IF p_notify <> '' THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  RETURN QUERY SELECT 'ok'::text, v_version, NULL::text, NULL::bigint, v_rebuild OR v_indexed;
END
$$;

-- What a commit planned on the stored tail reads, from one snapshot: the first row is the header
-- (segment NULL, message = rest, version 0 = never written or expired, then nothing else
-- follows; indexed = whether the id index is current, when not nothing else follows either;
-- names = per p_call_ids the latest call's name, NULL for none), then the rows of the last
-- p_count messages of history and of the other three segments whole, in segment and position order.
CREATE FUNCTION contextd_commit_tail(p_id bytea, p_key bytea, p_now_ms bigint, p_count integer, p_call_ids bytea[])
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
    -- As contextd_load_unexpired: an expired conversation's records are not looked at either.
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
      RETURN QUERY SELECT m.segment, m.message, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::integer[], NULL::integer[], NULL::text, NULL::bigint, NULL::boolean, NULL::bytea[]
        FROM contextd_messages m
        WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= h.segment_first[i] + v_from[i] AND m.position < h.segment_first[i] + h.segment_length[i]
        ORDER BY m.position;
    END IF;
  END LOOP;
END
$$;
`,
  },
  {
    version: 12,
    name: "a commit whose statements cost less: messages inserted from unnest, the answer by RETURN NEXT, a notification only while some sidecar listens",
    // Additive, like 5, 8 and 11: contextd_commit_indexed stays for sidecars of the previous
    // release during a rolling upgrade (they keep notifying on every commit, so every listener
    // hears them). Their listeners do not hold the listeners' lock, so commits of this release do
    // not wake their watches: those see such changes at their next poll (every second), and lose
    // none, until they too are replaced.
    //
    // Its body repeats most of migration 11's on purpose: a migration's SQL is what databases
    // already ran, so no migration's text is built from text another shares (an edit to shared text
    // would make new databases differ from migrated ones, with nothing to tell).
    //
    // Measured with pg_stat_statements and perf on the test cluster (bench/fleet-postgres-commit-parts.ts):
    // migration 11's function spent a quarter of its server time planning its message INSERT
    // again on every call (generate_series(1, p_count[i]) is estimated at 1,000 rows in a generic
    // plan, so the plan cache never settles on one; unnest of the parameters is estimated at 10
    // and does), and its pg_notify ran whether anyone listened or not.
    sql: `
-- migration 11's contextd_commit_indexed with three changes, outcomes and arguments the same:
-- the message rows are inserted from unnest of the starts and lengths (a generic plan, kept);
-- each outcome is one RETURN NEXT of the OUT columns (no query per answer); and p_notify is
-- honoured only while some sidecar listens, which a listening sidecar says by holding the
-- advisory lock ${listenersLockKey} shared for as long as its LISTEN connection lives (see
-- PostgresChangeFeed). A commit that takes that lock exclusively (pg_try_advisory_xact_lock, held
-- to its end, so a listener's lock waits for it) has no one to tell: a listener that joins later
-- reads the changes table after its lock, and finds this commit there.
CREATE FUNCTION contextd_commit_listened(
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
  v_offset integer := 0;
  v_start bigint;
  v_rebuild boolean;
  v_indexed boolean;
  i integer;
BEGIN
  SELECT c.version, c.segment_first, c.segment_length, c.segment_at, c.expires_at_ms, c.ids_at
    INTO v_current, v_first, v_length, v_at, v_expires, v_ids_at
    FROM contextd_conversations c WHERE c.id = p_id FOR UPDATE;
  v_exists := FOUND;
  -- An expired conversation no sweep removed yet: the reader saw it as never written.
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
    -- A first commit: another writer may be inserting the same conversation. The primary key
    -- lets one in; the other waits for it, finds the row and answers 'conflict'.
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
  END IF;
  FOR i IN 1..4 LOOP
    IF p_mode[i] <> '=' THEN
      IF p_mode[i] = 'p' THEN
        -- An append (keeping every row) deletes nothing: no statement for it.
        IF p_keep[i] <> v_length[i] THEN
          DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position >= v_first[i] + p_keep[i];
          v_at[i] := v_version;
        END IF;
        v_start := v_first[i] + p_keep[i];
      ELSE
        DELETE FROM contextd_messages m WHERE m.conversation_id = p_id AND m.segment = i - 1 AND m.position < v_first[i] + v_length[i] - p_keep[i];
        v_first[i] := v_first[i] + v_length[i] - p_keep[i] - p_count[i];
        v_start := v_first[i];
        v_at[i] := v_version;
      END IF;
      IF p_count[i] > 0 THEN
        INSERT INTO contextd_messages (conversation_id, segment, position, message)
          SELECT p_id, i - 1, v_start + u.n - 1, substring(p_blob FROM u.start FOR u.length)
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
    -- Removed before added: an edit that replaces a message by one with its id keeps the id.
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
    ids_at = CASE WHEN v_rebuild OR v_indexed THEN v_version ELSE c.ids_at END
  WHERE c.id = p_id;
  INSERT INTO contextd_changes (conversation_id, version, change) VALUES (p_id, v_version, p_change);
  IF v_version > p_max_changes THEN
    DELETE FROM contextd_changes ch WHERE ch.conversation_id = p_id AND ch.version <= v_version - p_max_changes;
  END IF;
  IF p_key <> ''::bytea THEN
    INSERT INTO contextd_idempotency AS k (conversation_id, key, fingerprint, version, expires_at_ms)
      VALUES (p_id, p_key, p_fingerprint, v_version, p_now_ms + p_ttl_ms)
      ON CONFLICT (conversation_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, version = EXCLUDED.version, expires_at_ms = EXCLUDED.expires_at_ms;
    -- Each keyed commit removes up to 8 expired records (of any conversation), so expired records
    -- go eight times as fast as new ones come; SKIP LOCKED keeps concurrent commits off each other's.
    DELETE FROM contextd_idempotency k WHERE k.ctid IN (
      SELECT e.ctid FROM contextd_idempotency e WHERE e.expires_at_ms <= p_now_ms ORDER BY e.expires_at_ms LIMIT 8 FOR UPDATE SKIP LOCKED);
  END IF;
  IF p_notify <> '' AND NOT pg_try_advisory_xact_lock(${listenersLockKey}) THEN PERFORM pg_notify(p_notify, md5(p_id)); END IF;
  outcome := 'ok';
  version := v_version;
  fingerprint := NULL;
  recorded := NULL;
  indexed := v_rebuild OR v_indexed;
  RETURN NEXT;
END
$$;
`,
  },
  removalMigration,
  sharedRowsMigration,
  forkIndexMigration,
  sharedIndexMigration,
  sealedLinksMigration,
  forkTailsMigration,
  joinedIdsMigration,
];

/** The table recording which migrations were applied. */
const migrationsTable = "contextd_schema_migrations";

/**
 * Applies every migration the database lacks, in order, in one transaction holding an advisory
 * lock: two sidecars starting at once apply each migration once (the second waits, then finds
 * them applied), and a failed migration leaves the schema as it was. A database already migrated
 * past what this build knows is refused (an older sidecar must not write a newer layout). Returns
 * the versions it applied.
 */
export async function migratePostgres(client: pg.ClientBase, migrations: readonly PostgresMigration[] = postgresMigrations): Promise<number[]> {
  await client.query("BEGIN");
  try {
    await client.query(`SELECT pg_advisory_xact_lock(${migrationLockKey})`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${migrationsTable} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ version: number }>(`SELECT version FROM ${migrationsTable} ORDER BY version`);
    const applied = new Set(rows.map((row) => row.version));
    const known = Math.max(0, ...migrations.map((migration) => migration.version));
    const newest = Math.max(0, ...applied);
    if (newest > known) {
      throw new Error(`the database's contextd schema is at version ${newest}, newer than this build knows (${known}); run a newer contextd`);
    }
    const done: number[] = [];
    for (const migration of migrations) {
      if (applied.has(migration.version)) continue;
      await client.query(migration.sql);
      await client.query(`INSERT INTO ${migrationsTable} (version, name) VALUES ($1, $2)`, [migration.version, migration.name]);
      done.push(migration.version);
    }
    await client.query("COMMIT");
    return done;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  }
}
