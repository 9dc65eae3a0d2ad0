// The Redis side of the store: one Lua script per operation, each atomic on the server. The
// `#!lua` shebang (Redis ≥ 7) makes Redis refuse a write script up front when it is over
// `maxmemory`, instead of failing between two writes and leaving a half-applied commit.

/** The keys of one conversation. The `{id}` hash tag puts them in one Redis Cluster slot. */
export interface ConversationKeys {
  version: string;
  state: string;
  changes: string;
  idempotencyPrefix: string;
}

export function conversationKeys(keyPrefix: string, conversationId: string): ConversationKeys {
  const base = `${keyPrefix}:{${conversationId}}`;
  return {
    version: `${base}:version`,
    state: `${base}:state`,
    changes: `${base}:changes`,
    idempotencyPrefix: `${base}:idempotency:`,
  };
}

/** The lexicographic index of conversation ids (a sorted set, all scores 0) for listing. */
export function conversationIndexKey(keyPrefix: string): string {
  return `${keyPrefix}:conversations`;
}

/**
 * Reads a conversation, skipping the payload when the caller's cached copy is current.
 * KEYS: version, state, idempotency record. ARGV: cached version ("" = none), "1" to also read the
 * idempotency record.
 * Returns {version, state or false, fingerprint or false, response or false, state exists}.
 */
export const loadScript = `#!lua flags=no-writes
local version = redis.call('GET', KEYS[1])
local fingerprint, response = false, false
if ARGV[2] == '1' then
  local record = redis.call('HMGET', KEYS[3], 'fingerprint', 'response')
  fingerprint, response = record[1], record[2]
end
local exists = redis.call('EXISTS', KEYS[2])
if not version then
  return {'0', false, fingerprint, response, exists}
end
if version == ARGV[1] then
  return {version, false, fingerprint, response, exists}
end
return {version, redis.call('GET', KEYS[2]), fingerprint, response, exists}
`;

/**
 * Commits one batch computed by the client from the state at the expected version.
 * KEYS: version, state, changes stream, idempotency record.
 * ARGV: expected version, new state, change record, idempotency fingerprint ("" = no key),
 * commit response (for replays), idempotency TTL seconds, change stream MAXLEN (approximate).
 * Returns {'ok', version} | {'conflict', current version} | {'replay', fingerprint, response} |
 * {'corrupt', version}.
 * The idempotency record is checked first, so a retry of a commit that already applied is answered
 * from the record even though the version has since moved.
 */
export const commitScript = `#!lua
if ARGV[4] ~= '' then
  local record = redis.call('HMGET', KEYS[4], 'fingerprint', 'response')
  if record[1] then return {'replay', record[1], record[2]} end
end
local current = redis.call('GET', KEYS[1]) or '0'
if current ~= ARGV[1] then return {'conflict', current} end
if current ~= '0' and redis.call('EXISTS', KEYS[2]) == 0 then return {'corrupt', current} end
local version = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], version .. '-0', 'change', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[4], 'fingerprint', ARGV[4], 'response', ARGV[5])
  redis.call('EXPIRE', KEYS[4], ARGV[6])
end
return {'ok', tostring(version)}
`;
