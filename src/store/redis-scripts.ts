import { storedSegments } from "./segment-edits.js";
import type { SegmentWrite } from "./stored-copies.js";

// The Redis side of the store: one Lua script per operation, each atomic on the server. The
// `#!lua` shebang (Redis ≥ 7) makes Redis refuse a write script up front when it is over
// `maxmemory`, instead of failing between two writes and leaving a half-applied commit.

/**
 * The keys of one conversation: `<prefix>:{<id>}:version|header|segment:<name>|changes|idempotency:<key>`,
 * with the id and the idempotency key escaped by `escapeKeyPart`. The `{id}` hash tag puts them in
 * one Redis Cluster slot; an escaped id holds no `{` or `}`, so no id can end the tag early or open
 * another one, and none holds `:`, so no id can reach another's keys (`a}:x` used to share keys
 * with `a`'s hash tag and name parts).
 */
export interface ConversationKeys {
  version: string;
  /** A hash: the state's parts other than its segments, and each segment list's length and last rewrite. */
  header: string;
  /** One list of encoded messages per segment, in `storedSegments` order. */
  segments: readonly string[];
  changes: string;
  /**
   * The id index (stored-id-index.ts) per segment list, `segmentIdIndexKeys` of each of `segments`:
   * its message ids to their positions, its history calls to theirs and their names.
   */
  segmentIds: readonly string[];
  segmentCalls: readonly string[];
  /**
   * The id index as the previous release kept it (a set of every message id, a hash of each call
   * id's latest name): this release writes none, removes it when it rebuilds the index and with
   * the conversation (docs/stores.md, "The id index kept per list").
   */
  previousIds: string;
  previousCalls: string;
  /** The record of one idempotency key. */
  idempotency(key: string): string;
  /**
   * A sorted set of the names of the conversation's idempotency records (scored by their commit
   * time), so a delete, the expiry sweep and a new conversation under the id remove them all:
   * a record must never answer for a conversation that is gone.
   */
  idempotencyRecords: string;
  /**
   * The conversation's home pointer (a string: the id of the conversation whose hash tag its keys
   * are under, `conversationKeys`), checked first by every script given these keys: under the
   * conversation's own tag the real one, under a home's a key that is never written.
   */
  home: string;
  /** The id of the conversation whose hash tag these keys are under when it is not this one's own. */
  homeId: string | undefined;
}


/**
 * Why homes exist: a script runs in one Redis Cluster slot, and a fork's own hash tag is in
 * another slot than its source's, so on a cluster a fork could not read its source's lists and
 * sent every message again (0.96-1.7 s at 100,000 messages, ~17 µs per message). So on a cluster
 * a fork lives under its source's home (its fork tree's first conversation): its keys are
 * `<prefix>:{<home>}:fork:<id>:...` (`homeId` here), beside its source's, and
 * the fork script shares lists there as on one Redis. The conversation's own tag keeps a pointer,
 * `<prefix>:{<id>}:home`, holding the home's id. The rules that keep every conversation in exactly
 * one place (docs/stores.md, "Forks on Redis Cluster"):
 * - Only a fork writes a pointer (`claimHomeScript`), and only while the conversation has no
 *   version under its own tag and no pointer; every script run under the own tag answers
 *   {'home', id} while a pointer exists (`homeCheck`), so a process that does not know the home
 *   (another sidecar, a restart) is sent there before it reads or writes anything.
 * - Nothing but the fork script creates a conversation under a home: a commit there to a
 *   conversation without a version answers {'unhomed'}, and the process removes the pointer
 *   (`unhomeScript`, only while it still names that home) and commits under the own tag. So a
 *   pointer outliving its conversation (deleted, expired) never holds a conversation's id away
 *   from its own tag, and a process's remembered home that no longer holds the conversation is
 *   found out (a read there that finds nothing is asked again under the own tag).
 * - A fork checks its pointer after the fork script: removed meanwhile (a commit created the
 *   conversation under its own tag), the fork's keys under the home are deleted and the fork
 *   answers as one into an existing conversation.
 */
export function conversationKeys(keyPrefix: string, conversationId: string, homeId?: string): ConversationKeys {
  const base = homeId === undefined ? `${keyPrefix}:{${hashTagOf(conversationId)}}` : `${keyPrefix}:{${hashTagOf(homeId)}}:fork:${hashTagOf(conversationId)}`;
  const idempotencyPrefix = `${base}:idempotency:`;
  return {
    version: `${base}:version`,
    header: `${base}:header`,
    segments: storedSegments.map((segment) => `${base}:segment:${segment}`),
    changes: `${base}:changes`,
    segmentIds: storedSegments.map((segment) => segmentIdIndexKeys(`${base}:segment:${segment}`).ids),
    segmentCalls: storedSegments.map((segment) => segmentIdIndexKeys(`${base}:segment:${segment}`).calls),
    previousIds: `${base}:ids`,
    previousCalls: `${base}:calls`,
    idempotency: (key) => idempotencyPrefix + escapeKeyPart(key),
    idempotencyRecords: `${base}:idempotency-records`,
    home: `${base}:home`,
    homeId,
  };
}

/**
 * The hash tag of a conversation's keys: its escaped id. The empty id gets "%", which no escaped
 * id is: an empty tag ("{}") would not be a hash tag at all, and its keys would land in different slots.
 */
function hashTagOf(conversationId: string): string {
  return conversationId === "" ? "%" : escapeKeyPart(conversationId);
}


/**
 * The Lua that starts every script given a conversation's keys: while `KEYS[index]`, the
 * conversation's home pointer, exists, the script answers {'home', the home's id} and does nothing.
 */
export function homeCheck(index: number): string {
  return `do
  local pointer = KEYS[${index}]
  local pointerType = redis.call('TYPE', pointer)['ok']
  if pointerType == 'string' then return {'home', redis.call('GET', pointer)} end
  if pointerType ~= 'none' then return {'corrupt', 'the home pointer ' .. pointer .. ' is a ' .. pointerType .. ', not a string'} end
end`;
}

/**
 * A fork's claim of the new conversation's id for its home, under the id's own tag (KEYS: its
 * version, header, four segment lists, change stream, then its home pointer; ARGV: the home's
 * id). Returns {'ok'} when the pointer names that home (written now or before), {'exists'} when
 * the conversation has a version under its own tag, {'elsewhere', id} when the pointer names
 * another home, {'corrupt', detail} for own keys without a version.
 */
export const claimHomeScript = `#!lua
local pointerType = redis.call('TYPE', KEYS[8])['ok']
if pointerType == 'string' then
  local home = redis.call('GET', KEYS[8])
  if home == ARGV[1] then return {'ok'} end
  return {'elsewhere', home}
end
if pointerType ~= 'none' then return {'corrupt', 'the home pointer ' .. KEYS[8] .. ' is a ' .. pointerType .. ', not a string'} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
for i = 2, 7 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {'corrupt', 'the key ' .. KEYS[i] .. ' exists without its conversation version ' .. KEYS[1]} end
end
redis.call('SET', KEYS[8], ARGV[1])
return {'ok'}
`;

/** Removes a home pointer (KEYS[1]) while it names the home ARGV[1]. Returns 1 when removed. */
export const unhomeScript = `#!lua
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`;

/**
 * The id index keys of one segment list (its own, a shared one or an orphan), named after it as
 * the scripts' `idsOf` and `callsOf` name them, so they are renamed, copied and removed with it.
 */
export function segmentIdIndexKeys(list: string): { ids: string; calls: string } {
  return { ids: `${list}:ids`, calls: `${list}:calls` };
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

/**
 * The conversation id a key's hash tag names (`conversationKeys`): `escapeKeyPart` undone, "%"
 * the empty id. What the scripts name a list's sealers by (scriptPrelude's sealersOf).
 */
export function conversationIdOfTag(tag: string): string {
  if (tag === "%") return "";
  return tag.includes("%") ? tag.replace(/%([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16))) : tag;
}

/** The lexicographic index of conversation ids (a sorted set, all scores 0) for listing. */
export function conversationIndexKey(keyPrefix: string): string {
  return `${keyPrefix}:conversations`;
}

/**
 * The listing index newest update first: a sorted set of every conversation id scored by minus its
 * latest commit time (Unix ms), so ascending order is newest first and ties go by id. Like the id
 * index it is one key, in its own Cluster slot, written beside the commit script (ZADD LT: a late
 * write of an older commit never moves an entry back).
 */
export function conversationUpdateIndexKey(keyPrefix: string): string {
  return `${keyPrefix}:conversations:updated`;
}

/**
 * The conversations that expire, scored by when (Unix ms): how the store finds the listing entries
 * of conversations whose keys Redis expired, and removes them (`RedisConversationStore.sweepExpired`).
 * One key in its own Cluster slot, like the listing indexes.
 */
export function conversationExpiryIndexKey(keyPrefix: string): string {
  return `${keyPrefix}:conversations:expiry`;
}

/**
 * Shared by the scripts: the type of a key (`none` when absent), a reply naming what is corrupt,
 * and the header read and checked against the segment lists. A key of the wrong type (or holding
 * a non-version, or a header that disagrees with its lists) is answered as corrupt before the
 * first write, never as a Redis error between two writes.
 *
 * The header hash has the fields `created` (a random id written by a conversation's first commit,
 * so a cache never mixes lists of a conversation Redis lost and recreated), `rest` (the state's
 * encoding without its segments and version: artifacts, experiences, tool definitions, the
 * experience counter), `rest_at` (the version that last wrote `rest`), and per segment `<name>`
 * (the list's length) and `<name>_at` (the last version that did anything to the list but append);
 * and for listings, which never decode `rest`: `updated_at_ms` (the commit time of the current
 * version), `created_at_ms` (of the first; absent for conversations first written before it was
 * kept), `title` and `labels` (a JSON object), copies of the state's, and `expires_at_ms` (when
 * every key of the conversation expires, "0" = never; absent for conversations written before).
 */
export const scriptPrelude = `
local segmentNames = {'system', 'history', 'memory', 'tools'}
local headerFields = {'created', 'rest', 'rest_at', 'system', 'system_at', 'history', 'history_at', 'memory', 'memory_at', 'tools', 'tools_at'}
local sharedFields = {'system_list', 'system_shared', 'history_list', 'history_shared', 'memory_list', 'memory_shared', 'tools_list', 'tools_shared'}
local function corrupt(detail) return {'corrupt', detail} end
-- Versions stay below 2^53 (15 digits), so Lua's numbers (doubles) hold them exactly.
local function isVersion(text) return text == '0' or (string.match(text, '^[1-9]%d*$') ~= nil and #text <= 15) end
-- The key's type, 'none' when absent; or, as the second result, the reply for a wrong one.
local function typed(what, key, expected)
  local actual = redis.call('TYPE', key)['ok']
  if actual ~= 'none' and actual ~= expected then return actual, corrupt(what .. ' key ' .. key .. ' is a ' .. actual .. ', not a ' .. expected) end
  return actual, false
end
-- An idempotency record's fingerprint and recorded version (false, false when there is none), or
-- the error of a record that cannot be trusted.
local function readIdempotencyRecord(key)
  local _, bad = typed('the idempotency record', key, 'hash')
  if bad then return false, false, bad end
  local record = redis.call('HMGET', key, 'fingerprint', 'version')
  local fingerprint, recorded = record[1], record[2]
  if (fingerprint and not recorded) or (recorded and not fingerprint) then
    return false, false, corrupt('the idempotency record ' .. key .. ' lacks its fingerprint or its version')
  end
  return fingerprint or false, recorded or false, false
end
-- Unlinks every idempotency record the set \`records\` names, and the set: what a conversation that
-- is gone (deleted, expired, or about to start anew) leaves. Costs the records named.
local function unlinkIdempotencyRecords(records)
  local names = redis.call('ZRANGE', records, 0, -1)
  for from = 1, #names, 1000 do redis.call('UNLINK', unpack(names, from, math.min(from + 999, #names))) end
  redis.call('UNLINK', records)
end
-- The type checks of version, header and segment lists (KEYS[1], KEYS[2], KEYS[3..6]).
local function checkStateTypes()
  local _, bad = typed('the version', KEYS[1], 'string')
  if bad then return nil, bad end
  local headerType
  headerType, bad = typed('the header', KEYS[2], 'hash')
  if bad then return nil, bad end
  for i = 1, 4 do
    _, bad = typed('the ' .. segmentNames[i] .. ' list', KEYS[2 + i], 'list')
    if bad then return nil, bad end
  end
  return headerType, false
end
-- The header of a conversation at \`version\`, every field present and each list as long as it says.
-- A segment that shares a fork source's list (\`<name>_list\`, the key; \`<name>_shared\`, the
-- prefix of it read) is that prefix, then the conversation's own list (its own tail); \`header.lists\`
-- holds per segment the shared key or false.
local function readHeader(version)
  local values = redis.call('HMGET', KEYS[2], unpack(headerFields))
  local header = {}
  for i, name in ipairs(headerFields) do
    local value = values[i]
    if not value then return nil, corrupt('the header ' .. KEYS[2] .. ' lacks its field ' .. name) end
    if name ~= 'rest' and name ~= 'created' and not isVersion(value) then
      return nil, corrupt('the header ' .. KEYS[2] .. ' field ' .. name .. ' holds "' .. string.sub(value, 1, 40) .. '", not a count')
    end
    header[name] = value
  end
  if tonumber(header.rest_at) > tonumber(version) then return nil, corrupt('the header ' .. KEYS[2] .. ' says rest_at ' .. header.rest_at .. ', past version ' .. version) end
  local sharing = redis.call('HMGET', KEYS[2], unpack(sharedFields))
  header.lists, header.shared = {}, {}
  for i, name in ipairs(segmentNames) do
    local length, shared, sharedLength = tonumber(header[name]), sharing[2 * i - 1], sharing[2 * i]
    header.lists[i], header.shared[i] = false, 0
    if shared or sharedLength then
      if not (shared and sharedLength and isVersion(sharedLength) and tonumber(sharedLength) <= length) then
        return nil, corrupt('the header ' .. KEYS[2] .. ' says ' .. name .. '_list "' .. string.sub(shared or '', 1, 80) .. '" and ' .. name .. '_shared "' .. string.sub(sharedLength or '', 1, 40) .. '" for ' .. length .. ' messages')
      end
      local _, bad = typed('the shared ' .. name .. ' list', shared, 'list')
      if bad then return nil, bad end
      _, bad = typed('the sealers of the shared ' .. name .. ' list', shared .. ':sealers', 'string')
      if bad then return nil, bad end
      local held = redis.call('LLEN', shared)
      if held < tonumber(sharedLength) then
        return nil, corrupt('the shared ' .. name .. ' list ' .. shared .. ' holds ' .. held .. ' messages but the header ' .. KEYS[2] .. ' reads ' .. sharedLength .. ' of it')
      end
      header.lists[i], header.shared[i] = shared, tonumber(sharedLength)
    end
    -- The sealers (sealersOf, below) are read by every read and edited by commits: a key of the wrong type is corrupt before the first write.
    local _, bad = typed('the sealers of the ' .. name .. ' list', KEYS[2 + i] .. ':sealers', 'string')
    if bad then return nil, bad end
    local stored = redis.call('LLEN', KEYS[2 + i])
    if stored ~= length - header.shared[i] then
      return nil, corrupt('the ' .. name .. ' list ' .. KEYS[2 + i] .. ' holds ' .. stored .. ' messages but the header says ' .. (length - header.shared[i]))
    end
    if tonumber(header[name .. '_at']) > tonumber(version) then
      return nil, corrupt('the header ' .. KEYS[2] .. ' says ' .. name .. '_at ' .. header[name .. '_at'] .. ', past version ' .. version)
    end
  end
  return header, false
end
-- Messages \`from\` to \`stop\` (exclusive) of segment \`i\`: of the shared prefix, then of the own list.
local function segmentRange(header, i, from, stop)
  if stop <= from then return {} end
  local shared = header.shared[i]
  if shared == 0 then return redis.call('LRANGE', KEYS[2 + i], from, stop - 1) end
  if stop <= shared then return redis.call('LRANGE', header.lists[i], from, stop - 1) end
  local own = redis.call('LRANGE', KEYS[2 + i], math.max(from - shared, 0), stop - shared - 1)
  if from >= shared then return own end
  local messages = redis.call('LRANGE', header.lists[i], from, shared - 1)
  for _, message in ipairs(own) do messages[#messages + 1] = message end
  return messages
end
-- The id index (stored-id-index.ts) is kept per segment list, as the messages are, so a conversation
-- reading a prefix of another's list reads that list's index too and a fork writes no entry:
-- \`<list>:ids\` maps each message id of the list to its position, \`<list>:calls\` each call id its
-- ASSISTANT messages make to those calls' positions and names (callsIn). A position is the element's
-- index in the list plus the list's offset (the field \`offsetField\`, 0 while absent), which a
-- prepend lowers, so no entry moves when the list grows at either end. A conversation holds an id
-- when its own list's index has it (every entry there is live) or a shared list's has it at a
-- position inside the prefix it reads; a call is named by the call at the highest position it
-- reads. Renamed, copied and removed with the list (orphanList, keepOwnCopy, leaveShared).
-- \`offsetField\` is the byte 0xFF, which no message id (UTF-8) is.
local offsetField = '\\255'
local function idsOf(list) return list .. ':ids' end
local function callsOf(list) return list .. ':calls' end
local function offsetOf(list) return tonumber(redis.call('HGET', idsOf(list), offsetField) or '0') or 0 end
-- The entries of a string of \`<number>:<text's length>:<text>\` one after another, as {number,
-- text, number, text, ...}: the format of a call index entry and of a list's sealer runs. What does
-- not parse ends them (a key damaged behind the store's back answers less, never an error between
-- two writes).
local function numberedTexts(text)
  local entries, at = {}, 1
  if not text then return entries end
  while at <= #text do
    local _, stop, number, length = string.find(text, '^(%-?%d+):(%d+):', at)
    if not stop then break end
    entries[#entries + 1] = tonumber(number)
    entries[#entries + 1] = string.sub(text, stop + 1, stop + tonumber(length))
    at = stop + tonumber(length) + 1
  end
  return entries
end
-- One call id's calls in a list's index, {position, name, position, name, ...}: stored as
-- \`<position>:<name's length>:<name>\` one after another.
local function callsIn(text) return numberedTexts(text) end
local function callText(position, name) return string.format('%d', position) .. ':' .. #name .. ':' .. name end
-- The name of the call at the highest position in [lo, hi) of one call id's stored calls, or false.
local function latestIn(text, lo, hi)
  local entries, best, name = callsIn(text), nil, false
  for k = 1, #entries, 2 do
    if entries[k] >= lo and entries[k] < hi and (best == nil or entries[k] > best) then best, name = entries[k], entries[k + 1] end
  end
  return name
end
-- Who sealed which elements of a list, for encryption at rest (at-rest-encryption.ts binds every
-- sealed value to the conversation that sealed it): \`<list>:sealers\`, a string of runs
-- \`<upTo>:<tag's length>:<tag>\` one after another, each the list index its run ends before and the
-- hash tag (escaped id, escapeKeyPart) of the conversation that sealed it; '' the list's own
-- conversation (the tag of its key: an orphan's is its owner's), which every element past the last
-- run is too. Absent for a list of one writer (every list but one that ownWhole made of a shared
-- prefix and an own tail, and what is copied or renamed from it). Reads send a segment's runs
-- (segmentSealers) so the sidecar opens each element as its sealer's; the fork script bounds them
-- (a fork past the bound goes through the engine, sealed anew). Renamed, copied and removed with
-- the list, as its index is; a cut clips the runs, a prepend shifts them (commit script).
local function sealersOf(list) return list .. ':sealers' end
-- The hash tag of a list key (matched at the key's end: a key prefix may hold anything).
-- A fork's key under its home (conversationKeys) names it after the home's tag: "}:fork:<tag>:".
local function tagOf(list) return string.match(list, '}:fork:([^{}:]*):segment:[^{}]*$') or string.match(list, '{([^{}:]*)}:segment:[^{}]*$') or '' end
local function runsOf(list) return numberedTexts(redis.call('GET', sealersOf(list))) end
-- Stores \`runs\` ({upTo, tag, ...}, ascending) as the list's: empty runs dropped, neighbours of one
-- sealer merged, trailing runs of the list's own conversation left implicit; none left = no key.
local function writeRuns(list, runs)
  local merged = {}
  for k = 1, #runs, 2 do
    local n = #merged
    if runs[k] > (n > 0 and merged[n - 1] or 0) then
      if n > 0 and merged[n] == runs[k + 1] then merged[n - 1] = runs[k]
      else
        merged[n + 1] = runs[k]
        merged[n + 2] = runs[k + 1]
      end
    end
  end
  while #merged > 0 and merged[#merged] == '' do
    merged[#merged] = nil
    merged[#merged] = nil
  end
  if #merged == 0 then
    redis.call('UNLINK', sealersOf(list))
    return
  end
  local texts = {}
  for k = 1, #merged, 2 do texts[#texts + 1] = string.format('%d', merged[k]) .. ':' .. #merged[k + 1] .. ':' .. merged[k + 1] end
  redis.call('SET', sealersOf(list), table.concat(texts))
end
-- The runs of \`list\`'s elements [lo, hi) appended to \`out\` as {count, tag, ...}, neighbours of one
-- sealer merged, its own conversation's as \`ownTag\`.
local function runsRead(list, lo, hi, ownTag, out)
  if hi <= lo then return end
  local runs, at = runsOf(list), lo
  local function push(count, tag)
    if #out > 0 and out[#out] == tag then out[#out - 1] = out[#out - 1] + count
    else
      out[#out + 1] = count
      out[#out + 1] = tag
    end
  end
  for k = 1, #runs, 2 do
    if at >= hi then break end
    local upTo = math.min(runs[k], hi)
    if upTo > at then
      push(upTo - at, runs[k + 1] == '' and ownTag or runs[k + 1])
      at = upTo
    end
  end
  if at < hi then push(hi - at, ownTag) end
end
-- Who sealed messages \`from\` to \`stop\` (exclusive) of segment \`i\` of the conversation of KEYS[2],
-- as segmentRange reads them: {count, tag, ...} in order, '' for the conversation itself.
local function segmentSealers(header, i, from, stop)
  local out, shared = {}, header.shared[i]
  if stop <= from then return out end
  if shared > 0 then runsRead(header.lists[i], from, math.min(stop, shared), tagOf(header.lists[i]), out) end
  runsRead(KEYS[2 + i], math.max(from - shared, 0), stop - shared, '', out)
  return out
end
-- How many runs the list has (the fork script's bound).
local function runCount(list) return #runsOf(list) / 2 end
-- The keys named after a list that go with it: its id index and its sealers.
local function moveIndex(from, to)
  for _, key in ipairs({idsOf, callsOf, sealersOf}) do
    if redis.call('EXISTS', key(from)) == 1 then redis.call('RENAME', key(from), key(to)) end
  end
end
local function copyIndex(from, to)
  for _, key in ipairs({idsOf, callsOf, sealersOf}) do
    if redis.call('EXISTS', key(from)) == 1 then redis.call('COPY', key(from), key(to), 'REPLACE') else redis.call('UNLINK', key(to)) end
  end
end
-- Whether the index of the conversation of KEYS[2] (its header read, readHeader) is whole as far
-- as its keys show: each own list's index holds one entry per element, and each shared list read
-- has one (a previous release's orphanList renamed a list without it); or the reply for an index
-- key of the wrong type. O(1) per key.
local function indexSound(header)
  local sound = true
  for i = 1, 4 do
    local own, shared = KEYS[2 + i], header.lists[i]
    local lists = {own}
    if shared then lists[2] = shared end
    for _, list in ipairs(lists) do
      local _, bad = typed('the id index', idsOf(list), 'hash')
      if bad then return false, bad end
      -- Only history's lists make calls.
      if i == 2 then
        _, bad = typed('the call index', callsOf(list), 'hash')
        if bad then return false, bad end
      end
    end
    local entries = redis.call('HLEN', idsOf(own)) - redis.call('HEXISTS', idsOf(own), offsetField)
    if entries ~= tonumber(header[segmentNames[i]]) - header.shared[i] then sound = false end
    if shared and redis.call('EXISTS', idsOf(shared)) == 0 then sound = false end
  end
  return sound, false
end
-- The first of the message ids ARGV[from..to] the conversation of KEYS[2] holds, or false: one
-- HMGET per list it reads (per 1,000 ids).
local function heldId(header, from, to)
  for i = 1, 4 do
    local reads = {{KEYS[2 + i], false}}
    if header.lists[i] then reads[2] = {header.lists[i], header.shared[i]} end
    for _, read in ipairs(reads) do
      local list, prefix = read[1], read[2]
      local offset = prefix and offsetOf(list) or 0
      for start = from, to, 1000 do
        local stop = math.min(start + 999, to)
        local positions = redis.call('HMGET', idsOf(list), unpack(ARGV, start, stop))
        for k = 1, stop - start + 1 do
          local position = positions[k] and tonumber(positions[k])
          if positions[k] and (not prefix or (position and position >= offset and position < offset + prefix)) then return ARGV[start + k - 1] end
        end
      end
    end
  end
  return false
end
-- The name of the latest call of \`callId\` in the history of the conversation of KEYS[2], or false:
-- its own list's (after any shared prefix), else the shared list's inside the prefix read.
local function latestCall(header, callId)
  local name = latestIn(redis.call('HGET', callsOf(KEYS[4]), callId), -math.huge, math.huge)
  local shared = header.lists[2]
  if name or not shared then return name end
  local offset = offsetOf(shared)
  return latestIn(redis.call('HGET', callsOf(shared), callId), offset, offset + header.shared[2])
end
-- The sorted set of the conversations that read a prefix of \`list\` (their header keys, scored by
-- the prefix length): what keeps a shared list from being trimmed, rewritten or deleted under them.
local function readersOf(list) return list .. ':readers' end
-- The longest prefix of \`list\` a live reader reads (0: none). A reader whose header no longer names
-- the list (gone, or moved to its own lists) is removed on the way: each stale entry costs once.
local function longestRead(list, name)
  local readers = readersOf(list)
  while true do
    local top = redis.call('ZREVRANGE', readers, 0, 0, 'WITHSCORES')
    if #top == 0 then return 0 end
    if redis.call('HGET', top[1], name .. '_list') == list then return tonumber(top[2]) end
    redis.call('ZREM', readers, top[1])
  end
end
-- A conversation stops reading the shared \`list\`; an orphan (a list whose owner moved away from
-- it) goes with its last reader.
local function leaveShared(list, reader)
  local readers = readersOf(list)
  redis.call('ZREM', readers, reader)
  -- Matched at the key's end: a key prefix (--redis-key-prefix) may hold anything.
  if string.find(list, ':segment:%a+:orphan:[^:]*:%d+$') and redis.call('ZCARD', readers) == 0 then redis.call('UNLINK', list, idsOf(list), callsOf(list), sealersOf(list)) end
end
-- The owner's own list \`list\` (segment \`name\`) becomes an orphan that only its readers read, so
-- the owner may rewrite its own key: a RENAME (of its index too), and each live reader's header
-- re-pointed (O(readers)).
-- \`tag\` makes the orphan's name unique (the owner's \`created\` and the version).
local function orphanList(list, name, tag)
  local orphan = list .. ':orphan:' .. tag
  if redis.call('EXISTS', list) == 0 then
    redis.call('UNLINK', readersOf(list))
    return orphan
  end
  redis.call('RENAME', list, orphan)
  redis.call('RENAME', readersOf(list), readersOf(orphan))
  moveIndex(list, orphan)
  for _, reader in ipairs(redis.call('ZRANGE', readersOf(orphan), 0, -1)) do
    if redis.call('HGET', reader, name .. '_list') == list then redis.call('HSET', reader, name .. '_list', orphan)
    else redis.call('ZREM', readersOf(orphan), reader) end
  end
  if redis.call('ZCARD', readersOf(orphan)) == 0 then redis.call('UNLINK', orphan, idsOf(orphan), callsOf(orphan), sealersOf(orphan)) end
  return orphan
end
-- The index of segment list \`own\` made whole (ownWhole): the entries of the first \`prefix\`
-- elements of \`shared\`, then \`own\`'s after them, at positions from 0 (no offset).
local function indexWhole(shared, own, prefix, history)
  local sharedOffset, ownOffset = offsetOf(shared), offsetOf(own)
  local ids, calls, called = {}, {}, {}
  local function gather(list, lo, hi, shift)
    local flat = redis.call('HGETALL', idsOf(list))
    for k = 1, #flat, 2 do
      local position = tonumber(flat[k + 1])
      if flat[k] ~= offsetField and position and position >= lo and position < hi then
        ids[#ids + 1] = flat[k]
        ids[#ids + 1] = string.format('%d', position + shift)
      end
    end
    flat = history and redis.call('HGETALL', callsOf(list)) or {}
    for k = 1, #flat, 2 do
      local entries = callsIn(flat[k + 1])
      for e = 1, #entries, 2 do
        if entries[e] >= lo and entries[e] < hi then
          if not calls[flat[k]] then
            calls[flat[k]] = {}
            called[#called + 1] = flat[k]
          end
          table.insert(calls[flat[k]], callText(entries[e] + shift, entries[e + 1]))
        end
      end
    end
  end
  gather(shared, sharedOffset, sharedOffset + prefix, -sharedOffset)
  gather(own, -math.huge, math.huge, prefix - ownOffset)
  redis.call('UNLINK', idsOf(own), callsOf(own))
  for from = 1, #ids, 1000 do redis.call('HSET', idsOf(own), unpack(ids, from, math.min(from + 999, #ids))) end
  local texts = {}
  for _, id in ipairs(called) do
    texts[#texts + 1] = id
    texts[#texts + 1] = table.concat(calls[id])
  end
  for from = 1, #texts, 1000 do redis.call('HSET', callsOf(own), unpack(texts, from, math.min(from + 999, #texts))) end
end
-- Segment \`i\` of the conversation of KEYS[2] stops sharing: its own list becomes the whole segment
-- (a COPY of the shared list inside Redis, cut to the prefix, then the own tail): the copy once
-- that a prepend, an expiry or a fork of a fork costs. Its index is made whole with it when
-- \`indexed\` (the conversation's is current), else removed (it stays stale, for a rebuild); its
-- sealers record that the prefix is the shared list's sealers' (sealersOf): the one way a list
-- gets elements of two writers.
local function ownWhole(header, i, indexed)
  local shared, own, name = header.lists[i], KEYS[2 + i], segmentNames[i]
  if not shared then return end
  local whole = own .. ':whole'
  -- The whole list's sealers: the shared prefix's (its own conversation's by its tag), then the own tail's after them.
  local counts, runs, upTo = {}, {}, 0
  runsRead(shared, 0, header.shared[i], tagOf(shared), counts)
  runsRead(own, 0, redis.call('LLEN', own), '', counts)
  for k = 1, #counts, 2 do
    upTo = upTo + counts[k]
    runs[#runs + 1] = upTo
    runs[#runs + 1] = counts[k + 1]
  end
  redis.call('COPY', shared, whole, 'REPLACE')
  redis.call('LTRIM', whole, 0, header.shared[i] - 1)
  local tail = redis.call('LRANGE', own, 0, -1)
  for from = 1, #tail, 1000 do redis.call('RPUSH', whole, unpack(tail, from, math.min(from + 999, #tail))) end
  redis.call('RENAME', whole, own)
  writeRuns(own, runs)
  if indexed then indexWhole(shared, own, header.shared[i], i == 2) else redis.call('UNLINK', idsOf(own), callsOf(own)) end
  leaveShared(shared, KEYS[2])
  redis.call('HDEL', KEYS[2], name .. '_list', name .. '_shared')
  header.lists[i], header.shared[i] = false, 0
end
-- Without a version nothing of the state may exist.
local function nothingWithoutVersion(headerType)
  if headerType ~= 'none' then return corrupt('a state is stored without its version') end
  for i = 1, 4 do
    if redis.call('EXISTS', KEYS[2 + i]) == 1 then return corrupt('a state is stored without its version') end
  end
  return false
end
`;

/**
 * Reads a conversation, sending only what the caller's cached copy lacks.
 * KEYS: version, header, the four segment lists, idempotency record, home pointer (homeCheck:
 * every script given a conversation's keys takes its pointer last and answers {'home', id} while it exists).
 * ARGV: "1" to also read the idempotency record; then the cached copy's version ("" = none), its
 * `created`, its `rest_at`, and per segment its `_at` and length.
 * Returns {'ok', version or false, record fingerprint or false, record version or false} when
 * the conversation was never written or is at the cached version (header and list lengths still
 * checked); else {'ok', version,
 * fingerprint, recorded, created, rest_at, rest or false, then per segment: _at, from, the
 * encoded messages from index `from` on, and who sealed them (segmentSealers)} — `from` is the cached length when the list only grew
 * since the cached copy (same `created` and `_at`), else 0 and the whole list. {'corrupt', detail}
 * when something cannot be trusted.
 */
export const loadScript = `#!lua flags=no-writes
${scriptPrelude}
${homeCheck(8)}
local _
local headerType, bad = checkStateTypes()
if bad then return bad end
local fingerprint, recorded = false, false
if ARGV[1] == '1' then
  fingerprint, recorded, bad = readIdempotencyRecord(KEYS[7])
  if bad then return bad end
end
local version = redis.call('GET', KEYS[1])
if not version then
  bad = nothingWithoutVersion(headerType)
  if bad then return bad end
  -- A record without its conversation is a deleted or expired one's: it answers nothing.
  return {'ok', false, false, false}
end
if not isVersion(version) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(version, 1, 40) .. '", not a version') end
if version == '0' then return corrupt('the version key ' .. KEYS[1] .. ' holds "0"') end
if headerType == 'none' then return corrupt('version ' .. version .. ' is stored without its state') end
-- Checked also for a current cached copy (O(1) per key): a part lost behind the sidecar's back is
-- DATA_LOSS at the next read, not a state served from the cache forever.
local header
header, bad = readHeader(version)
if bad then return bad end
if version == ARGV[2] and header.created == ARGV[3] then return {'ok', version, fingerprint, recorded} end
local cached = ARGV[2] ~= '' and header.created == ARGV[3]
local reply = {'ok', version, fingerprint, recorded, header.created, header.rest_at, false}
if not cached or header.rest_at ~= ARGV[4] then reply[7] = header.rest end
for i, name in ipairs(segmentNames) do
  local at, length = header[name .. '_at'], tonumber(header[name])
  local cachedLength = tonumber(ARGV[4 + 2 * i])
  local from = 0
  if cached and at == ARGV[3 + 2 * i] and cachedLength and cachedLength <= length then from = cachedLength end
  reply[#reply + 1] = at
  reply[#reply + 1] = from
  reply[#reply + 1] = segmentRange(header, i, from, length)
  reply[#reply + 1] = segmentSealers(header, i, from, length)
end
return reply
`;

/**
 * What a conversation's id index holds, as the commit and tail scripts read it (scriptPrelude:
 * its own lists' entries, each shared list's inside the prefix read; per call id the latest call's
 * name): what a test or an operator compares with the state. O(the entries of the lists it reads).
 * KEYS: version, header, the four segment lists, home pointer. Returns {'ok', false} for a conversation never
 * written; else {'ok', version, '1' when the index is current else '0', the message ids, then
 * call id and name pairs}; {'corrupt', detail} as the load script.
 */
export const indexedIdsScript = `#!lua flags=no-writes
${scriptPrelude}
${homeCheck(7)}
local headerType, bad = checkStateTypes()
if bad then return bad end
local version = redis.call('GET', KEYS[1])
if not version then return {'ok', false} end
if not isVersion(version) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(version, 1, 40) .. '", not a version') end
if headerType == 'none' then return corrupt('version ' .. version .. ' is stored without its state') end
local header
header, bad = readHeader(version)
if bad then return bad end
local sound
sound, bad = indexSound(header)
if bad then return bad end
local ids, callIds, seen = {}, {}, {}
for i = 1, 4 do
  local reads = {{KEYS[2 + i], -math.huge, math.huge}}
  if header.lists[i] then
    local offset = offsetOf(header.lists[i])
    reads[2] = {header.lists[i], offset, offset + header.shared[i]}
  end
  for _, read in ipairs(reads) do
    local flat = redis.call('HGETALL', idsOf(read[1]))
    for k = 1, #flat, 2 do
      local position = tonumber(flat[k + 1])
      if flat[k] ~= offsetField and position and position >= read[2] and position < read[3] then ids[#ids + 1] = flat[k] end
    end
    if i == 2 then
      for _, callId in ipairs(redis.call('HKEYS', callsOf(read[1]))) do
        if not seen[callId] then
          seen[callId] = true
          callIds[#callIds + 1] = callId
        end
      end
    end
  end
end
local calls = {}
for _, callId in ipairs(callIds) do
  local name = latestCall(header, callId)
  if name then
    calls[#calls + 1] = callId
    calls[#calls + 1] = name
  end
end
local current = sound and redis.call('HGET', KEYS[2], 'list_ids_at') == version
return {'ok', version, current and '1' or '0', ids, calls}
`;

/**
 * Reads a window of one segment list at one version, and with it, when asked, the rest of the
 * state whole (`ConversationStore.readWindow`).
 * KEYS: version, header, the four segment lists, home pointer.
 * ARGV: the segment (1-4), the window's end ("" = the list's length; past it = the length), its
 * count, "1" to send the rest (`rest` and the other three lists), the version the caller pins the
 * read to ("" = none), the cached copy's version and `created` ("" = none).
 * Returns {'ok', false} for a conversation never written; {'moved', version} when it is not at the
 * pinned version; {'ok', version, 'cached'} when it is at the cached copy's version (header and
 * list lengths still checked); else {'ok', version, created, start, length, the window's encoded
 * messages, rest or false, then per segment the whole list when the rest was asked for and this is
 * not the window's segment, else false, then the segment's `_at`, then its first message when the
 * window starts after it, else false, then who sealed each of those (segmentSealers: the window's,
 * per segment the whole list's or false, the first message's or false)}. {'corrupt', detail} as the load script.
 */
export const windowScript = `#!lua flags=no-writes
${scriptPrelude}
${homeCheck(7)}
local headerType, bad = checkStateTypes()
if bad then return bad end
local version = redis.call('GET', KEYS[1])
if not version then
  bad = nothingWithoutVersion(headerType)
  if bad then return bad end
  if ARGV[5] ~= '' then return {'moved', '0'} end
  return {'ok', false}
end
if not isVersion(version) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(version, 1, 40) .. '", not a version') end
if version == '0' then return corrupt('the version key ' .. KEYS[1] .. ' holds "0"') end
if headerType == 'none' then return corrupt('version ' .. version .. ' is stored without its state') end
local header
header, bad = readHeader(version)
if bad then return bad end
if ARGV[5] ~= '' and ARGV[5] ~= version then return {'moved', version} end
if version == ARGV[6] and header.created == ARGV[7] then return {'ok', version, 'cached'} end
local segment = tonumber(ARGV[1])
local length = tonumber(header[segmentNames[segment]])
local stop = length
if ARGV[2] ~= '' and tonumber(ARGV[2]) < length then stop = tonumber(ARGV[2]) end
local start = stop - tonumber(ARGV[3])
if start < 0 then start = 0 end
local window = {}
if stop > start then window = segmentRange(header, segment, start, stop) end
local reply = {'ok', version, header.created, start, length, window, false}
local withRest = ARGV[4] == '1'
if withRest then reply[7] = header.rest end
for i = 1, 4 do
  if withRest and i ~= segment then reply[#reply + 1] = segmentRange(header, i, 0, tonumber(header[segmentNames[i]])) else reply[#reply + 1] = false end
end
reply[#reply + 1] = header[segmentNames[segment] .. '_at']
if start > 0 then reply[#reply + 1] = segmentRange(header, segment, 0, 1)[1] else reply[#reply + 1] = false end
-- Who sealed what was sent (segmentSealers): the window, each whole list, the first message.
reply[#reply + 1] = segmentSealers(header, segment, start, stop)
for i = 1, 4 do
  if withRest and i ~= segment then reply[#reply + 1] = segmentSealers(header, i, 0, tonumber(header[segmentNames[i]])) else reply[#reply + 1] = false end
end
if start > 0 then reply[#reply + 1] = segmentSealers(header, segment, 0, 1) else reply[#reply + 1] = false end
return reply
`;

/**
 * Commits one batch computed by the client from the state at the expected version, writing only
 * what the batch changed.
 * KEYS: version, header, the four segment lists, changes stream, idempotency record, the id
 * index as the previous release kept it (`ConversationKeys.previousIds` and `previousCalls`:
 * removed by a rebuild), the set naming the idempotency records
 * (`ConversationKeys.idempotencyRecords`: added to by a keyed commit, emptied by a first one),
 * the home pointer.
 * The id index itself is kept per segment list, under keys named after the lists (scriptPrelude).
 * ARGV: expected version, change record, idempotency fingerprint ("" = no key), idempotency TTL
 * seconds, change stream MAXLEN (approximate), `created` for a first commit, the new `rest`,
 * "1" if `rest` changed (required on a first commit) else "0", the commit time (Unix ms: the
 * header's `updated_at_ms`, and `created_at_ms` on a first commit), "1" if the title or labels
 * changed else "0", the title, the labels' JSON; then per segment: mode ("=" the
 * list is unchanged, "p" keep its first `keep` messages and append the given ones, "s" keep its
 * last `keep` and put the given ones before them), the length the client's base state has, `keep`,
 * the count of messages that follow, and those messages; then the id index's changes
 * (`idIndexArguments`: mode "a", "t" or "b", then added ids, removed ids, made calls as call id,
 * name and place among the added ids, removed call ids, each list as its count and its items;
 * each segment's share of the added and removed ids is what its edit writes and cuts, checked).
 * The index is current when the header's `list_ids_at` is the stored version and its keys are
 * sound (indexSound), or nothing is stored; "a" changes a current index (and leaves a stale one),
 * "b" replaces it (making each shared segment its own first when it was stale), "t" (a commit
 * planned on the stored tail) needs it current and none of the added ids held (heldId). Every write
 * of "a" to a current index, "b" and "t" sets `list_ids_at`.
 * Then, optionally, when the conversation expires (Unix ms, "0" = never: every key of it gets
 * that expiry, the header's `expires_at_ms`).
 * Returns {'ok', version} (with 'unindexed' third when the index was left stale) | {'conflict', current version} | {'stale', current version} (the
 * client's base is not the stored state at its version: it reads again) | {'replay', fingerprint,
 * recorded version, current version} | {'unindexed', current version} | {'taken', message id}
 * | {'unhomed'} (a first commit under a home, which only a fork writes: conversationKeys)
 * (mode "t": the client plans the commit on the whole state) | {'corrupt', detail} | {'invalid', detail}.
 *
 * Everything that could fail is checked before the first write (arguments, the type of every key,
 * the stored version, the header beside every version and each list as long as it says), and the
 * first write is the XADD, the one command a consistent-looking stream can still refuse (its last
 * id at or past the new version); it runs under pcall and writes nothing when it fails. What
 * follows (DEL, LTRIM, RPUSH, LPUSH, HSET, SET, EXPIRE on keys of checked types) cannot fail, so a
 * commit applies whole or not at all. Redis does not roll a script back.
 *
 * The idempotency record (fingerprint and the version the commit produced) is checked before the
 * version, so a retry of a commit that already applied is answered from it even though the
 * version has since moved; the client then reads the state only if it is still at that version.
 * Only while a version is stored: a record without one is a deleted or expired conversation's.
 */
export const commitScript = `#!lua
${scriptPrelude}
${homeCheck(12)}
local function isCount(text) return string.match(text, '^[1-9]%d*$') ~= nil and #text <= 15 end
local function invalid(detail) return {'invalid', detail} end
if #KEYS ~= 12 then return invalid('the commit script takes 12 keys') end
if #ARGV < 28 then return invalid('the commit script takes at least 28 arguments') end
if not isVersion(ARGV[1]) then return invalid('expected version "' .. ARGV[1] .. '" is not a version') end
if ARGV[2] == '' then return invalid('the change record is empty') end
if not isCount(ARGV[4]) then return invalid('idempotency TTL "' .. ARGV[4] .. '" is not a positive number of seconds') end
if not isCount(ARGV[5]) then return invalid('change stream MAXLEN "' .. ARGV[5] .. '" is not a positive count') end
if ARGV[8] ~= '0' and ARGV[8] ~= '1' then return invalid('the rest flag "' .. ARGV[8] .. '" is neither 0 nor 1') end
if not isVersion(ARGV[9]) then return invalid('commit time "' .. ARGV[9] .. '" is not a count of milliseconds') end
if ARGV[10] ~= '0' and ARGV[10] ~= '1' then return invalid('the metadata flag "' .. ARGV[10] .. '" is neither 0 nor 1') end
local edits = {}
local at = 13
for i, name in ipairs(segmentNames) do
  local mode, base, keep, count = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  if mode ~= '=' and mode ~= 'p' and mode ~= 's' then return invalid(name .. ': mode "' .. tostring(mode) .. '" is not =, p or s') end
  if not (base and keep and count and isVersion(base) and isVersion(keep) and isVersion(count)) then return invalid(name .. ': base length, keep and count must be counts') end
  base, keep, count = tonumber(base), tonumber(keep), tonumber(count)
  if keep > base then return invalid(name .. ': keeps ' .. keep .. ' of ' .. base .. ' messages') end
  if mode == '=' and (keep ~= base or count ~= 0) then return invalid(name .. ': an unchanged list keeps all and adds none') end
  if at + 3 + count > #ARGV then return invalid(name .. ': ' .. count .. ' messages announced, fewer given') end
  edits[i] = {mode = mode, base = base, keep = keep, count = count, first = at + 4}
  at = at + 4 + count
end
local indexMode = ARGV[at]
if indexMode ~= 'a' and indexMode ~= 't' and indexMode ~= 'b' then return invalid('the id index mode "' .. tostring(indexMode) .. '" is not a, t or b') end
at = at + 1
-- Per segment how many of the added and removed ids are its: what its list edit writes and cuts
-- (mode "b": every id of the segment after the edit).
local indexed = {}
for i = 1, 4 do
  local edit = edits[i]
  if indexMode == 'b' then indexed[i] = {added = edit.keep + edit.count, removed = 0}
  else indexed[i] = {added = edit.count, removed = edit.base - edit.keep} end
end
local index = {}
for _, list in ipairs({'added', 'removed', 'made', 'unmade'}) do
  local count = ARGV[at]
  if not (count and isVersion(count)) then return invalid('id index: the ' .. list .. ' count must be a count') end
  local width = list == 'made' and 3 or 1
  count = tonumber(count) * width
  if at + count > #ARGV then return invalid('id index: ' .. count .. ' ' .. list .. ' announced, fewer given') end
  index[list] = {first = at + 1, last = at + count}
  at = at + 1 + count
end
-- Where each segment's ids are among the added and removed ones.
local addedAt, removedAt = index.added.first, index.removed.first
for i = 1, 4 do
  indexed[i].addedFirst, indexed[i].removedFirst = addedAt, removedAt
  addedAt, removedAt = addedAt + indexed[i].added, removedAt + indexed[i].removed
  indexed[i].addedLast, indexed[i].removedLast = addedAt - 1, removedAt - 1
end
if addedAt ~= index.added.last + 1 or removedAt ~= index.removed.last + 1 then return invalid('id index: ' .. (index.added.last - index.added.first + 1) .. ' added and ' .. (index.removed.last - index.removed.first + 1) .. ' removed ids given where the edits write ' .. (addedAt - index.added.first) .. ' and cut ' .. (removedAt - index.removed.first)) end
-- A made call's place among the added ids is one of history's.
for m = index.made.first, index.made.last, 3 do
  local place = tonumber(ARGV[m + 2])
  if not (isCount(ARGV[m + 2]) and place + index.added.first - 1 >= indexed[2].addedFirst and place + index.added.first - 1 <= indexed[2].addedLast) then
    return invalid('id index: call ' .. ARGV[m] .. ' is made at "' .. ARGV[m + 2] .. '", not by an added message of history')
  end
end
-- One optional argument after the id index's: when the conversation expires (Unix ms, "0" = never).
local expireAt = '0'
if at == #ARGV then
  expireAt = ARGV[at]
  if not isVersion(expireAt) then return invalid('expiry "' .. expireAt .. '" is not a count of milliseconds') end
  at = at + 1
end
if at - 1 ~= #ARGV then return invalid((#ARGV - at + 1) .. ' arguments after the last segment') end
local keyed = ARGV[3] ~= ''
local _
local headerType, bad = checkStateTypes()
if bad then return bad end
_, bad = typed('the change stream', KEYS[7], 'stream')
if bad then return bad end
if keyed then
  _, bad = typed('the idempotency record', KEYS[8], 'hash')
  if bad then return bad end
end
_, bad = typed('the idempotency record set', KEYS[11], 'zset')
if bad then return bad end
local current = redis.call('GET', KEYS[1]) or '0'
if not isVersion(current) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(current, 1, 40) .. '", not a version') end
local header
if current == '0' then
  bad = nothingWithoutVersion(headerType)
  if bad then return bad end
  -- Under a home only the fork script creates a conversation (conversationKeys).
  if string.find(KEYS[1], '}:fork:[^{}:]*:version$') then return {'unhomed'} end
else
  if headerType == 'none' then return corrupt('version ' .. current .. ' is stored without its state') end
  header, bad = readHeader(current)
  if bad then return bad end
end
-- Without a version, a record is a deleted or expired conversation's: it answers nothing (and
-- goes below, with every other record of the old conversation).
if keyed and current ~= '0' then
  local record = redis.call('HMGET', KEYS[8], 'fingerprint', 'version')
  if record[1] or record[2] then
    if not (record[1] and record[2] and isVersion(record[2])) then
      return corrupt('the idempotency record ' .. KEYS[8] .. ' lacks its fingerprint or its version')
    end
    return {'replay', record[1], record[2], current}
  end
end
if current ~= ARGV[1] then return {'conflict', current} end
for i, name in ipairs(segmentNames) do
  local stored = header and tonumber(header[name]) or 0
  if edits[i].base ~= stored then return {'stale', current} end
end
if not header and ARGV[8] ~= '1' then return invalid('a first commit must write rest') end
local rebuild = indexMode == 'b' or current == '0'
-- The index is current when the header's \`list_ids_at\` is the stored version (the field of this
-- layout: a previous release's \`ids_at\` names its own) and its keys are sound.
local indexCurrent = current == '0'
if header then
  local sound
  sound, bad = indexSound(header)
  if bad then return bad end
  indexCurrent = sound and redis.call('HGET', KEYS[2], 'list_ids_at') == current
end
if indexMode == 't' then
  if not indexCurrent then return {'unindexed', current} end
  local held = header and heldId(header, index.added.first, index.added.last)
  if held then return {'taken', held} end
end
-- A current index is kept so by each list edit below; a rebuild writes it whole after them.
local maintain = indexCurrent and not rebuild
local version = string.format('%d', tonumber(current) + 1)
local added = redis.pcall('XADD', KEYS[7], 'MAXLEN', '~', ARGV[5], version .. '-0', 'change', ARGV[2])
if type(added) == 'table' and added.err then
  return corrupt('the change stream ' .. KEYS[7] .. ' does not take version ' .. version .. ' (' .. added.err .. ')')
end
if current == '0' then unlinkIdempotencyRecords(KEYS[11]) end
local fields = {'updated_at_ms', ARGV[9]}
if ARGV[10] == '1' then
  fields[#fields + 1] = 'title'
  fields[#fields + 1] = ARGV[11]
  fields[#fields + 1] = 'labels'
  fields[#fields + 1] = ARGV[12]
end
if not header then
  fields[#fields + 1] = 'created'
  fields[#fields + 1] = ARGV[6]
  fields[#fields + 1] = 'created_at_ms'
  fields[#fields + 1] = ARGV[9]
  for _, name in ipairs(segmentNames) do
    fields[#fields + 1] = name
    fields[#fields + 1] = '0'
    fields[#fields + 1] = name .. '_at'
    fields[#fields + 1] = version
  end
end
-- Arguments per RPUSH/LPUSH: Lua's unpack takes at most a few thousand values.
local chunk = 1000
-- The runs of the own list \`key\` (scriptPrelude's sealersOf) after a cut to its first \`keep\`
-- elements, and after \`cut\` elements go from its head and \`count\` of the writer's go before it.
local function clippedRuns(key, keep)
  local runs, out = runsOf(key), {}
  for k = 1, #runs, 2 do
    out[#out + 1] = math.min(runs[k], keep)
    out[#out + 1] = runs[k + 1]
    if runs[k] >= keep then break end
  end
  return out
end
local function shiftedRuns(key, cut, count)
  local runs = runsOf(key)
  if #runs == 0 then return runs end
  local out = {count, ''}
  for k = 1, #runs, 2 do
    if runs[k] > cut then
      out[#out + 1] = runs[k] - cut + count
      out[#out + 1] = runs[k + 1]
    end
  end
  return out
end
-- What a shared list's readers read never changes under them (readHeader says how a segment shares):
-- a conversation appends only to its own list, and cutting its shared prefix only reads less of
-- it; an owner whose edit would cut, shift or delete elements a reader still reads first leaves its
-- list to the readers (orphanList) and continues on a copy. A conversation that expires shares
-- nothing: its keys expire, a shared list must outlive it, so it first makes its segments its own.
-- \`kept\`: how many of its first messages the owner's edit leaves where they are (-1: none stay in place).
local function keepOwnCopy(key, name, kept)
  if redis.call('EXISTS', readersOf(key)) == 0 or longestRead(key, name) <= kept then return end
  local orphan = orphanList(key, name, header.created .. ':' .. version)
  if kept ~= 0 and redis.call('EXISTS', orphan) == 1 then
    redis.call('COPY', orphan, key)
    copyIndex(orphan, key)
  end
end
-- The index's part of segment \`i\`'s edit of its own list \`key\`, after it: an emptied list's index
-- goes; else the cut elements' ids (list indexes [cutFrom, cutTo) before the edit) and their
-- calls go, a prepend lowers the offset, and the written messages' ids and calls are added at
-- their positions, the first at list index \`writtenAt\`.
local function addCalls(calls, segment, skip, firstPosition)
  local texts, called = {}, {}
  for m = index.made.first, index.made.last, 3 do
    local place = tonumber(ARGV[m + 2]) + index.added.first - 1 - segment.addedFirst
    if place >= skip then
      local id = ARGV[m]
      if not texts[id] then
        texts[id] = {redis.call('HGET', calls, id) or ''}
        called[#called + 1] = id
      end
      table.insert(texts[id], callText(firstPosition + place - skip, ARGV[m + 1]))
    end
  end
  for _, id in ipairs(called) do redis.call('HSET', calls, id, table.concat(texts[id])) end
end
local function addIds(ids, segment, skip, firstPosition)
  local entries = {}
  for k = segment.addedFirst + skip, segment.addedLast do
    entries[#entries + 1] = ARGV[k]
    entries[#entries + 1] = string.format('%d', firstPosition + k - segment.addedFirst - skip)
    if #entries == chunk then
      redis.call('HSET', ids, unpack(entries))
      entries = {}
    end
  end
  if #entries > 0 then redis.call('HSET', ids, unpack(entries)) end
end
local function indexEdit(i, key, edit, cutFrom, cutTo, emptied, writtenAt)
  local ids, calls, segment = idsOf(key), callsOf(key), indexed[i]
  local offset = 0
  if emptied then
    redis.call('UNLINK', ids, calls)
  else
    offset = offsetOf(key)
    for from = segment.removedFirst, segment.removedLast, chunk do redis.call('HDEL', ids, unpack(ARGV, from, math.min(from + chunk - 1, segment.removedLast))) end
    if i == 2 and cutTo > cutFrom then
      for k = index.unmade.first, index.unmade.last do
        local entries, kept = callsIn(redis.call('HGET', calls, ARGV[k])), {}
        for e = 1, #entries, 2 do
          if entries[e] < offset + cutFrom or entries[e] >= offset + cutTo then kept[#kept + 1] = callText(entries[e], entries[e + 1]) end
        end
        if #kept == 0 then redis.call('HDEL', calls, ARGV[k]) else redis.call('HSET', calls, ARGV[k], table.concat(kept)) end
      end
    end
    if edit.mode == 's' then
      offset = offset + cutTo - edit.count
      redis.call('HSET', ids, offsetField, string.format('%d', offset))
    end
  end
  addIds(ids, segment, 0, offset + writtenAt)
  if i == 2 then addCalls(calls, segment, 0, offset + writtenAt) end
end
if header and expireAt ~= '0' then
  for i, name in ipairs(segmentNames) do
    if header.lists[i] then ownWhole(header, i, maintain) else keepOwnCopy(KEYS[2 + i], name, -1) end
  end
end
-- A stale index is rebuilt from the ids the sidecar sends: a shared list's index cannot be
-- trusted for it (nor rewritten: others read it), so each shared segment is made its own first.
if rebuild and not indexCurrent and header then
  for i = 1, 4 do ownWhole(header, i, false) end
end
for i, name in ipairs(segmentNames) do
  local edit, key = edits[i], KEYS[2 + i]
  if edit.mode ~= '=' then
    local shared = header and header.shared[i] or 0
    -- For the index (indexEdit): the own list's elements cut, whether it was emptied, where the written messages go.
    local cutFrom, cutTo, emptied, writtenAt = 0, 0, false, 0
    if shared > 0 and (edit.keep == 0 or edit.keep <= shared and edit.mode == 'p') then
      -- The kept messages are all of the shared prefix: the own tail goes, the prefix read shrinks.
      redis.call('DEL', key, sealersOf(key))
      emptied = true
      if edit.keep == 0 then
        leaveShared(header.lists[i], KEYS[2])
        redis.call('HDEL', KEYS[2], name .. '_list', name .. '_shared')
        header.lists[i], header.shared[i] = false, 0
      elseif edit.keep < shared then
        redis.call('ZADD', readersOf(header.lists[i]), 'XX', edit.keep, KEYS[2])
        fields[#fields + 1] = name .. '_shared'
        fields[#fields + 1] = string.format('%d', edit.keep)
        header.shared[i] = edit.keep
      end
    elseif shared > 0 and edit.mode == 'p' then
      if edit.keep < edit.base then
        redis.call('LTRIM', key, 0, edit.keep - shared - 1)
        writeRuns(key, clippedRuns(key, edit.keep - shared))
      end
      cutFrom, cutTo, writtenAt = edit.keep - shared, edit.base - shared, edit.keep - shared
    else
      if shared > 0 then ownWhole(header, i, maintain)
      elseif header and edit.mode == 's' then keepOwnCopy(key, name, -1)
      elseif header and edit.keep < edit.base then keepOwnCopy(key, name, edit.keep) end
      if edit.keep == 0 then
        redis.call('DEL', key, sealersOf(key))
        emptied = true
      elseif edit.keep < edit.base then
        if edit.mode == 'p' then
          redis.call('LTRIM', key, 0, edit.keep - 1)
          writeRuns(key, clippedRuns(key, edit.keep))
        else redis.call('LTRIM', key, -edit.keep, -1) end
      end
      -- A prepend's messages are the writer's, before what it keeps: the runs move behind them.
      if edit.mode == 's' and edit.keep > 0 and edit.count > 0 then writeRuns(key, shiftedRuns(key, edit.base - edit.keep, edit.count)) end
      if edit.mode == 'p' then cutFrom, cutTo, writtenAt = edit.keep, edit.base, edit.keep else cutTo = edit.base - edit.keep end
    end
    local last = edit.first + edit.count - 1
    if edit.mode == 'p' then
      for from = edit.first, last, chunk do redis.call('RPUSH', key, unpack(ARGV, from, math.min(from + chunk - 1, last))) end
    else
      -- LPUSH puts each argument at the head in turn: pushing the messages last to first keeps their order.
      for to = last, edit.first, -chunk do
        local reversed = {}
        for index = to, math.max(edit.first, to - chunk + 1), -1 do reversed[#reversed + 1] = ARGV[index] end
        redis.call('LPUSH', key, unpack(reversed))
      end
    end
    if maintain then indexEdit(i, key, edit, cutFrom, cutTo, emptied, writtenAt) end
    fields[#fields + 1] = name
    fields[#fields + 1] = string.format('%d', edit.keep + edit.count)
    if not (edit.mode == 'p' and edit.keep == edit.base) then
      fields[#fields + 1] = name .. '_at'
      fields[#fields + 1] = version
    end
  end
end
if rebuild then
  -- Every own list's index written anew (positions from 0), after what a shared prefix's holds;
  -- the previous release's index keys and field go.
  redis.call('UNLINK', KEYS[9], KEYS[10])
  if header then redis.call('HDEL', KEYS[2], 'ids_at') end
  for i = 1, 4 do
    local key, skip = KEYS[2 + i], header and header.shared[i] or 0
    redis.call('UNLINK', idsOf(key), callsOf(key))
    addIds(idsOf(key), indexed[i], skip, 0)
    if i == 2 then addCalls(callsOf(key), indexed[i], skip, 0) end
  end
end
if rebuild or indexCurrent then
  fields[#fields + 1] = 'list_ids_at'
  fields[#fields + 1] = version
end
if ARGV[8] == '1' then
  fields[#fields + 1] = 'rest'
  fields[#fields + 1] = ARGV[7]
  fields[#fields + 1] = 'rest_at'
  fields[#fields + 1] = version
end
local hadExpiry = header and (redis.call('HGET', KEYS[2], 'expires_at_ms') or '0') ~= '0'
fields[#fields + 1] = 'expires_at_ms'
fields[#fields + 1] = expireAt
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('SET', KEYS[1], version)
if keyed then
  redis.call('HSET', KEYS[8], 'fingerprint', ARGV[3], 'version', version)
  redis.call('EXPIRE', KEYS[8], ARGV[4])
  -- The set names the record until twice its TTL has passed by the sidecar's clock (a margin for
  -- the two clocks), so every record that may still live is named; it outlives them, on its own TTL.
  local ttlMs = tonumber(ARGV[4]) * 1000
  redis.call('ZADD', KEYS[11], ARGV[9], KEYS[8])
  redis.call('ZREMRANGEBYSCORE', KEYS[11], '-inf', string.format('(%d', tonumber(ARGV[9]) - 2 * ttlMs))
  redis.call('PEXPIRE', KEYS[11], 2 * ttlMs)
end
-- Every key of the conversation expires at one time (Redis freezes the clock inside a script, and
-- compares each key's expiry with it as it is accessed, so a reader sees all or none of them); a
-- conversation that no longer expires keeps them all.
if expireAt ~= '0' then
  for i = 1, 7 do redis.call('PEXPIREAT', KEYS[i], expireAt) end
  for i = 9, 10 do redis.call('PEXPIREAT', KEYS[i], expireAt) end
  for i = 3, 6 do
    redis.call('PEXPIREAT', idsOf(KEYS[i]), expireAt)
    redis.call('PEXPIREAT', callsOf(KEYS[i]), expireAt)
    redis.call('PEXPIREAT', sealersOf(KEYS[i]), expireAt)
  end
  if keyed and tonumber(expireAt) < redis.call('PEXPIRETIME', KEYS[8]) then redis.call('PEXPIREAT', KEYS[8], expireAt) end
elseif hadExpiry then
  for i = 1, 7 do redis.call('PERSIST', KEYS[i]) end
  for i = 9, 10 do redis.call('PERSIST', KEYS[i]) end
  for i = 3, 6 do
    redis.call('PERSIST', idsOf(KEYS[i]))
    redis.call('PERSIST', callsOf(KEYS[i]))
    redis.call('PERSIST', sealersOf(KEYS[i]))
  end
end
if not (rebuild or indexCurrent) then return {'ok', version, 'unindexed'} end
return {'ok', version}
`;

/**
 * What one run of `commitScript` writes, apart from where: its ARGV in named fields. The store and
 * the bare-script benchmark both build the call with `commitScriptArguments`, so a benchmark never
 * times a call the store no longer makes (it once sent 8 keys after the script took 12, and every
 * bare line failed with a Lua error).
 */
export interface CommitScriptCall {
  idempotencyKey: string;
  expectedVersion: bigint;
  /** The change record, sealed when the store encrypts. */
  change: Buffer;
  /** "" = no idempotency key. */
  fingerprint: string;
  idempotencyTtlSeconds: number;
  maxChanges: number;
  created: string;
  /** The state's encoding without segments and version; undefined when unchanged (required on a first commit). */
  rest: Buffer | undefined;
  updatedAtUnixMs: bigint;
  /** The title and the labels' JSON (each sealed when the store encrypts) when either changed. */
  metadata: { title: string | Buffer; labels: string | Buffer } | undefined;
  /** In `storedSegments` order. */
  segments: readonly SegmentWrite[];
  /** `idIndexArguments` of the commit's id index changes. */
  idIndex: readonly string[];
  /** When the conversation expires (Unix ms, 0n = never); undefined leaves the expiry as it is. */
  expiresAtUnixMs: bigint | undefined;
}

/** The keys and arguments of one `commitScript` run (`commitScriptKeys` keys first) for `keys`. */
export function commitScriptArguments(keys: ConversationKeys, call: CommitScriptCall): (string | Buffer | number | (string | Buffer)[])[] {
  const rest: (string | Buffer)[] = [
    call.created,
    call.rest ?? Buffer.alloc(0),
    call.rest ? "1" : "0",
    String(call.updatedAtUnixMs),
    call.metadata ? "1" : "0",
    call.metadata?.title ?? "",
    call.metadata?.labels ?? "",
  ];
  for (const segment of call.segments) {
    rest.push(segment.mode, String(segment.baseLength), String(segment.keep), String(segment.encodings.length));
    // One push per encoding: spread as arguments, a 100,000-message replace overflowed the stack.
    for (const encoding of segment.encodings) rest.push(encoding);
  }
  for (const arg of call.idIndex) rest.push(arg);
  if (call.expiresAtUnixMs !== undefined) rest.push(String(call.expiresAtUnixMs));
  return [
    keys.version,
    keys.header,
    ...keys.segments,
    keys.changes,
    keys.idempotency(call.idempotencyKey),
    keys.previousIds,
    keys.previousCalls,
    keys.idempotencyRecords,
    keys.home,
    String(call.expectedVersion),
    call.change,
    call.fingerprint,
    call.idempotencyTtlSeconds,
    call.maxChanges,
    // As one array (ioredis flattens it), not spread: a call takes only so many arguments.
    rest,
  ];
}

/**
 * Deletes a conversation: its version, header, segment lists and their id index, change stream
 * and idempotency records, at once.
 * KEYS: version, header, the four segment lists, changes stream, the previous release's id index
 * and call index, the idempotency record set, the home pointer.
 * ARGV: the expected version ("" = any). Returns {'ok', the version deleted, "0" when nothing was
 * stored} | {'conflict', current version} | {'corrupt', detail}, checked before the first write. The listing entries and the
 * usage ledger (other Cluster slots) are removed beside it.
 */
export const deleteScript = `#!lua
${scriptPrelude}
${homeCheck(11)}
local headerType, bad = checkStateTypes()
if bad then return bad end
local current = redis.call('GET', KEYS[1]) or '0'
if not isVersion(current) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(current, 1, 40) .. '", not a version') end
if ARGV[1] ~= '' and ARGV[1] ~= current then return {'conflict', current} end
local _
_, bad = typed('the idempotency record set', KEYS[10], 'zset')
if bad then return bad end
-- A list another conversation reads a prefix of stays for it (orphanList); a shared one this
-- conversation read loses a reader.
local sharing = redis.call('HMGET', KEYS[2], unpack(sharedFields))
local created = redis.call('HGET', KEYS[2], 'created') or ''
for i, name in ipairs(segmentNames) do
  if sharing[2 * i - 1] then leaveShared(sharing[2 * i - 1], KEYS[2]) end
  if redis.call('EXISTS', readersOf(KEYS[2 + i])) == 1 then
    if longestRead(KEYS[2 + i], name) > 0 then orphanList(KEYS[2 + i], name, created .. ':' .. current) end
    redis.call('UNLINK', readersOf(KEYS[2 + i]))
  end
  redis.call('UNLINK', idsOf(KEYS[2 + i]), callsOf(KEYS[2 + i]), sealersOf(KEYS[2 + i]))
end
-- UNLINK: the keys are gone at once, and a long list's memory is freed off Redis's main thread.
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
unlinkIdempotencyRecords(KEYS[10])
return {'ok', current}
`;

/**
 * The expiry sweep's removal of what an expired conversation leaves beside the keys Redis
 * expired: its idempotency records, unless the conversation was committed to again meanwhile
 * (then its first commit removed them). KEYS: version, the idempotency record set, the home pointer. Returns
 * {'ok', "1" when removed else "0"} | {'corrupt', detail}.
 */
export const sweepIdempotencyScript = `#!lua
${scriptPrelude}
${homeCheck(3)}
if redis.call('EXISTS', KEYS[1]) == 1 then return {'ok', '0'} end
local _, bad = typed('the idempotency record set', KEYS[2], 'zset')
if bad then return bad end
unlinkIdempotencyRecords(KEYS[2])
return {'ok', '1'}
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

/**
 * The keys of one tenant's token calibration records: `<prefix>:calibration:{<tenant>}` (a hash,
 * one field per `calibrationField`) and `<prefix>:calibration:{<tenant>}:reported` (a sorted set
 * of the same fields scored by their last report, Unix ms), the tenant escaped as conversation ids
 * are (`escapeKeyPart`, "%" for ""). The tenant's hash tag puts both in one Cluster slot, so one
 * script applies a report and its bounds.
 */
export function calibrationKeys(keyPrefix: string, tenant: string): { records: string; reported: string } {
  const records = `${keyPrefix}:calibration:{${tenant === "" ? "%" : escapeKeyPart(tenant)}}`;
  return { records, reported: `${records}:reported` };
}

/**
 * One usage report (`CalibrationStore.reportCalibration`), atomically. KEYS: the tenant's records
 * hash and its report-time index. ARGV: the field, estimated and actual tokens, now (ms), the
 * expiry (ms), the tenant's key bound, then the core's minimum and maximum correction, its
 * window and its largest step per report. A field's value is `<factor> <reports> <mean absolute relative error> <reported at ms>`,
 * numbers as %.17g, which a double survives exactly. The arithmetic is `learnCorrection`'s, the
 * same IEEE double operations in the same order. Then up to 8 expired fields go, and the least
 * recently reported ones past the bound; both keys expire with the tenant's last report. Replies
 * {'ok', factor, reports, error so far, this report's relative error} or {'corrupt', detail}
 * before any write.
 */
export const reportUsageScript = `#!lua
local field = ARGV[1]
local estimated, actual, now, ttl, maxKeys = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local minCorrection, maxCorrection, window, step = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
for _, key in ipairs({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}}) do
  local actualType = redis.call('TYPE', key[1])['ok']
  if actualType ~= 'none' and actualType ~= key[2] then return {'corrupt', key[1] .. ' is a ' .. actualType .. ', not a ' .. key[2]} end
end
local factor, reports, meanError = 1, 0, 0
local stored = redis.call('HGET', KEYS[1], field)
if stored then
  local f, r, m, at = string.match(stored, '^(%S+) (%d+) (%S+) (%d+)$')
  f, r, m, at = tonumber(f), tonumber(r), tonumber(m), tonumber(at)
  if not (f and r and m and at) then return {'corrupt', 'field ' .. field .. ' of ' .. KEYS[1] .. ' holds "' .. string.sub(stored, 1, 60) .. '", not a correction'} end
  if at > now - ttl then factor, reports, meanError = f, r, m end
end
local ratio = math.min(maxCorrection, math.max(minCorrection, actual / estimated))
local relativeError = math.abs(estimated * factor - actual) / actual
reports = reports + 1
local weight = 1 / math.min(reports, window)
local learnt = factor + weight * (ratio - factor)
meanError = meanError + weight * (relativeError - meanError)
learnt = math.min(factor * step, math.max(factor / step, learnt))
learnt = math.min(maxCorrection, math.max(minCorrection, learnt))
redis.call('HSET', KEYS[1], field, string.format('%.17g %.17g %.17g %.17g', learnt, reports, meanError, now))
redis.call('ZADD', KEYS[2], now, field)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%.17g', now - ttl), 'LIMIT', 0, 8)
local over = redis.call('ZCARD', KEYS[2]) - #gone - maxKeys
if over > 0 then
  for _, oldest in ipairs(redis.call('ZRANGE', KEYS[2], #gone, #gone + over - 1)) do table.insert(gone, oldest) end
end
for _, old in ipairs(gone) do
  redis.call('HDEL', KEYS[1], old)
  redis.call('ZREM', KEYS[2], old)
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {'ok', string.format('%.17g', learnt), string.format('%.17g', reports), string.format('%.17g', meanError), string.format('%.17g', relativeError)}
`;
