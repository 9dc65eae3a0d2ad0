// The Redis side of the store: one Lua script per operation, each atomic on the server. The
// `#!lua` shebang (Redis ≥ 7) makes Redis refuse a write script up front when it is over
// `maxmemory`, instead of failing between two writes and leaving a half-applied commit.

/**
 * The keys of one conversation: `<prefix>:{<id>}:version|state|changes|idempotency:<key>`, with
 * the id and the idempotency key escaped by `escapeKeyPart`. The `{id}` hash tag puts them in one
 * Redis Cluster slot; an escaped id holds no `{` or `}`, so no id can end the tag early or open
 * another one, and none holds `:`, so no id can reach another's keys (`a}:x` used to share keys
 * with `a`'s hash tag and name parts).
 */
export interface ConversationKeys {
  version: string;
  state: string;
  changes: string;
  /** The record of one idempotency key. */
  idempotency(key: string): string;
}

export function conversationKeys(keyPrefix: string, conversationId: string): ConversationKeys {
  const base = `${keyPrefix}:{${escapeKeyPart(conversationId)}}`;
  const idempotencyPrefix = `${base}:idempotency:`;
  return {
    version: `${base}:version`,
    state: `${base}:state`,
    changes: `${base}:changes`,
    idempotency: (key) => idempotencyPrefix + escapeKeyPart(key),
  };
}

/** The characters `escapeKeyPart` replaces: its own escape character and the key syntax. */
const keySyntax = /[%{}:]/g;

/**
 * `%`, `{`, `}` and `:` as `%25`, `%7B`, `%7D`, `%3A`; everything else unchanged, so the common
 * id (`tenant/conv-42`) reads the same in Redis as in the API. Injective: `%` only ever starts an
 * escape. Ids with lone surrogates never get here (`requireStorableText`): they would all encode
 * to the same UTF-8 replacement character.
 */
export function escapeKeyPart(text: string): string {
  keySyntax.lastIndex = 0;
  if (!keySyntax.test(text)) return text;
  return text.replace(keySyntax, (character) => "%" + character.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0"));
}

/** The lexicographic index of conversation ids (a sorted set, all scores 0) for listing. */
export function conversationIndexKey(keyPrefix: string): string {
  return `${keyPrefix}:conversations`;
}

/**
 * Shared by the scripts: the type of a key (`none` when absent), and a reply naming what is
 * corrupt. A key of the wrong type (or holding a non-version) is answered as corrupt before the
 * first write, never as a Redis error between two writes.
 */
const scriptPrelude = `
local function corrupt(detail) return {'corrupt', detail} end
-- The key's type, 'none' when absent; or, as the second result, the reply for a wrong one.
local function typed(what, key, expected)
  local actual = redis.call('TYPE', key)['ok']
  if actual ~= 'none' and actual ~= expected then return actual, corrupt(what .. ' key ' .. key .. ' is a ' .. actual .. ', not a ' .. expected) end
  return actual, false
end
`;

/**
 * Reads a conversation, skipping the payload when the caller's cached copy is current.
 * KEYS: version, state, idempotency record. ARGV: cached version ("" = none), "1" to also read the
 * idempotency record.
 * Returns {'ok', version or false, state or false, record fingerprint or false, record version or
 * false, state exists} | {'corrupt', detail}. Versions are returned as stored; the caller checks
 * they are versions.
 */
export const loadScript = `#!lua flags=no-writes
${scriptPrelude}
local _, bad = typed('the version', KEYS[1], 'string')
if bad then return bad end
local stateType, bad = typed('the state', KEYS[2], 'string')
if bad then return bad end
if ARGV[2] == '1' then
  _, bad = typed('the idempotency record', KEYS[3], 'hash')
  if bad then return bad end
end
local fingerprint, recorded = false, false
if ARGV[2] == '1' then
  local record = redis.call('HMGET', KEYS[3], 'fingerprint', 'version')
  fingerprint, recorded = record[1], record[2]
  if (fingerprint and not recorded) or (recorded and not fingerprint) then
    return corrupt('the idempotency record ' .. KEYS[3] .. ' lacks its fingerprint or its version')
  end
end
local version = redis.call('GET', KEYS[1])
local exists = stateType == 'none' and 0 or 1
if not version or version == ARGV[1] then
  return {'ok', version, false, fingerprint, recorded, exists}
end
return {'ok', version, redis.call('GET', KEYS[2]), fingerprint, recorded, exists}
`;

/**
 * Commits one batch computed by the client from the state at the expected version.
 * KEYS: version, state, changes stream, idempotency record.
 * ARGV: expected version, new state, change record, idempotency fingerprint ("" = no key),
 * idempotency TTL seconds, change stream MAXLEN (approximate).
 * Returns {'ok', version} | {'conflict', current version} | {'replay', fingerprint, recorded
 * version, state or false} | {'corrupt', detail} | {'invalid', detail}.
 *
 * Everything that could fail is checked before the first write (arguments, the type of every key,
 * the stored version, a state beside every version), and the first write is the XADD, the one
 * command a consistent-looking stream can still refuse (its last id at or past the new version);
 * it runs under pcall and writes nothing when it fails. What follows (SET, SET, HSET, EXPIRE on
 * keys of checked types) cannot fail, so a commit applies whole or not at all. Redis does not roll
 * a script back: before, a wrong-type change stream failed the XADD after version and state were
 * written.
 *
 * The idempotency record (fingerprint and the version the commit produced: the response without
 * a copy of the state) is checked before the version, so a retry of a commit that already applied
 * is answered from it even though the version has since moved; the replay carries the state only
 * while the conversation is still at that version.
 */
export const commitScript = `#!lua
${scriptPrelude}
-- Versions stay below 2^53 (15 digits), so Lua's numbers (doubles) add 1 to them exactly.
local function isVersion(text) return text == '0' or (string.match(text, '^[1-9]%d*$') ~= nil and #text <= 15) end
local function isCount(text) return string.match(text, '^[1-9]%d*$') ~= nil and #text <= 15 end
if #KEYS ~= 4 or #ARGV ~= 6 then return {'invalid', 'the commit script takes 4 keys and 6 arguments'} end
if not isVersion(ARGV[1]) then return {'invalid', 'expected version "' .. ARGV[1] .. '" is not a version'} end
if ARGV[3] == '' then return {'invalid', 'the change record is empty'} end
if not isCount(ARGV[5]) then return {'invalid', 'idempotency TTL "' .. ARGV[5] .. '" is not a positive number of seconds'} end
if not isCount(ARGV[6]) then return {'invalid', 'change stream MAXLEN "' .. ARGV[6] .. '" is not a positive count'} end
local keyed = ARGV[4] ~= ''
local _, bad = typed('the version', KEYS[1], 'string')
if bad then return bad end
local stateType, bad = typed('the state', KEYS[2], 'string')
if bad then return bad end
_, bad = typed('the change stream', KEYS[3], 'stream')
if bad then return bad end
if keyed then
  _, bad = typed('the idempotency record', KEYS[4], 'hash')
  if bad then return bad end
end
local current = redis.call('GET', KEYS[1]) or '0'
if not isVersion(current) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(current, 1, 40) .. '", not a version') end
local stateExists = stateType ~= 'none'
if current ~= '0' and not stateExists then return corrupt('version ' .. current .. ' is stored without its state') end
if current == '0' and stateExists then return corrupt('a state is stored without its version') end
if keyed then
  local record = redis.call('HMGET', KEYS[4], 'fingerprint', 'version')
  if record[1] or record[2] then
    if not (record[1] and record[2] and isVersion(record[2])) then
      return corrupt('the idempotency record ' .. KEYS[4] .. ' lacks its fingerprint or its version')
    end
    local state = false
    if record[2] == current then state = redis.call('GET', KEYS[2]) end
    return {'replay', record[1], record[2], state}
  end
end
if current ~= ARGV[1] then return {'conflict', current} end
local version = string.format('%d', tonumber(current) + 1)
local added = redis.pcall('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], version .. '-0', 'change', ARGV[3])
if type(added) == 'table' and added.err then
  return corrupt('the change stream ' .. KEYS[3] .. ' does not take version ' .. version .. ' (' .. added.err .. ')')
end
redis.call('SET', KEYS[1], version)
redis.call('SET', KEYS[2], ARGV[2])
if keyed then
  redis.call('HSET', KEYS[4], 'fingerprint', ARGV[4], 'version', version)
  redis.call('EXPIRE', KEYS[4], ARGV[5])
end
return {'ok', version}
`;

/**
 * Writes nothing, but is a write script (no `no-writes` flag): Redis refuses it exactly when it
 * would refuse a commit for memory (over `maxmemory` with `noeviction`) or because it is a
 * read-only replica, which a PING does not show. `ping` runs it, so health reports a Redis that
 * answers but refuses every commit.
 */
export const writeProbeScript = `#!lua
return 1
`;
