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
  /** A message row's link (NULL: the conversation's own storage; n: the n-th of `owners`). */
  link: number | null;
  /** The header's: per link of the conversation, the conversation that wrote (and sealed) its rows. */
  owners: Buffer[] | null;
}

/**
 * `readWindow` in one statement (one snapshot): the header row, then the window's rows (a range
 * of the primary key) and, with the rest, the other segments' rows. $1 id, $2 segment (0-3), $3
 * end (null = the length), $4 count, $5 with the rest, $6 and $7 the cached copy's version and
 * created (null = none; when they are the stored ones no row but the header is sent), $8 the
 * other segments (empty without the rest). Rows say their kind: 0 the header, 1 the window, 2 the
 * other segments, 3 the segment's first message when the window starts after it. $9 is now (Unix
 * ms): an expired conversation reads as never written. Rows come from the conversation's own
 * storage and its links (migration 17's `contextd_linked_rows`, postgres-sealed-links-schema.ts),
 * each naming its link, and the header names each link's owner (whose id opens a sealed row).
 */
export const windowQuery = `
WITH h AS (
  SELECT c.version, c.created, c.rest, c.segment_first, c.segment_length, c.segment_at, COALESCE(c.storage, c.id) AS own, c.links,
    LEAST(COALESCE($3::integer, c.segment_length[$2::smallint + 1]), c.segment_length[$2::smallint + 1]) AS stop
  FROM contextd_conversations c WHERE c.id = $1 AND (c.expires_at_ms = 0 OR c.expires_at_ms > $9::bigint)
), w AS (
  SELECT h.*, GREATEST(0, h.stop - $4::integer) AS start, COALESCE(h.version = $6::bigint AND h.created = $7::text, false) AS current FROM h
)
SELECT 0 AS kind, -1::smallint AS segment, CASE WHEN $5::boolean AND NOT w.current THEN w.rest END AS message, w.version, w.created, w.current, w.start,
  w.segment_length[$2::smallint + 1] AS length, w.segment_at[$2::smallint + 1] AS at, NULL::bigint AS position, NULL::smallint AS link,
  CASE WHEN NOT w.current THEN contextd_link_owners(w.links) END AS owners FROM w
UNION ALL
SELECT 1, $2::smallint, r.message, NULL, NULL, NULL, NULL, NULL, NULL, r.at_position, r.link, NULL
  FROM w, contextd_linked_rows(w.own, $2::smallint, w.segment_first[$2::smallint + 1] + w.start, w.segment_first[$2::smallint + 1] + w.stop, w.links) r
  WHERE NOT w.current
UNION ALL
SELECT 2, s.segment, r.message, NULL, NULL, NULL, NULL, NULL, NULL, r.at_position, r.link, NULL
  FROM w, unnest($8::smallint[]) AS s(segment),
    contextd_linked_rows(w.own, s.segment, w.segment_first[s.segment + 1], w.segment_first[s.segment + 1] + w.segment_length[s.segment + 1], w.links) r
  WHERE NOT w.current
UNION ALL
SELECT 3, $2::smallint, r.message, NULL, NULL, NULL, NULL, NULL, NULL, r.at_position, r.link, NULL
  FROM w, contextd_linked_rows(w.own, $2::smallint, w.segment_first[$2::smallint + 1], w.segment_first[$2::smallint + 1] + 1, w.links) r
  WHERE NOT w.current AND w.start > 0
ORDER BY kind, segment, position`;
