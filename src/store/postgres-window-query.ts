/**
 * The Postgres store's window read as SQL: apart from the store because it is one long statement
 * that reads as SQL, not as the store's code.
 */

/** A row of `windowQuery`: the header first (segment -1), then message rows in segment and position order. */
export interface WindowRow {
  kind: number;
  segment: number;
  at: string | null;
  message: Buffer | null;
  version: string | null;
  created: string | null;
  current: boolean | null;
  start: number | null;
  length: number | null;
}

/**
 * `readWindow` in one statement (one snapshot): the header row, then the window's rows (a range
 * of the primary key) and, with the rest, the other segments' rows. $1 id, $2 segment (0-3), $3
 * end (null = the length), $4 count, $5 with the rest, $6 and $7 the cached copy's version and
 * created (null = none; when they are the stored ones no row but the header is sent), $8 the
 * other segments (empty without the rest). Rows say their kind: 0 the header, 1 the window, 2 the
 * other segments, 3 the segment's first message when the window starts after it. $9 is now (Unix
 * ms): an expired conversation reads as never written.
 */
export const windowQuery = `
WITH h AS (
  SELECT c.version, c.created, c.rest, c.segment_first, c.segment_length, c.segment_at,
    LEAST(COALESCE($3::integer, c.segment_length[$2::smallint + 1]), c.segment_length[$2::smallint + 1]) AS stop
  FROM contextd_conversations c WHERE c.id = $1 AND (c.expires_at_ms = 0 OR c.expires_at_ms > $9::bigint)
), w AS (
  SELECT h.*, GREATEST(0, h.stop - $4::integer) AS start, COALESCE(h.version = $6::bigint AND h.created = $7::text, false) AS current FROM h
)
SELECT 0 AS kind, -1::smallint AS segment, CASE WHEN $5::boolean AND NOT w.current THEN w.rest END AS message, w.version, w.created, w.current, w.start,
  w.segment_length[$2::smallint + 1] AS length, w.segment_at[$2::smallint + 1] AS at, NULL::integer AS position FROM w
UNION ALL
SELECT 1, m.segment, m.message, NULL, NULL, NULL, NULL, NULL, NULL, m.position FROM contextd_messages m, w
  WHERE NOT w.current AND m.conversation_id = $1 AND m.segment = $2::smallint
    AND m.position >= w.segment_first[$2::smallint + 1] + w.start AND m.position < w.segment_first[$2::smallint + 1] + w.stop
UNION ALL
SELECT 2, m.segment, m.message, NULL, NULL, NULL, NULL, NULL, NULL, m.position FROM contextd_messages m, w
  WHERE NOT w.current AND m.conversation_id = $1 AND m.segment = ANY($8::smallint[])
    AND m.position >= w.segment_first[m.segment + 1] AND m.position < w.segment_first[m.segment + 1] + w.segment_length[m.segment + 1]
UNION ALL
SELECT 3, m.segment, m.message, NULL, NULL, NULL, NULL, NULL, NULL, m.position FROM contextd_messages m, w
  WHERE NOT w.current AND w.start > 0 AND m.conversation_id = $1 AND m.segment = $2::smallint AND m.position = w.segment_first[$2::smallint + 1]
ORDER BY kind, segment, position`;

