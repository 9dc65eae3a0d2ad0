import { homeCheck, scriptPrelude } from "./redis-scripts.js";
import { storedSegments } from "./segment-edits.js";
import type { ForkTail } from "./stored-copies.js";
import { forEachCall } from "./stored-id-index.js";

/**
 * `Fork` on one Redis, server-side: why it exists is that a fork through the commit script sends
 * every message of the source back to Redis (an RPUSH of 100,000 encodings, 2-4 s), and a `COPY` of
 * each list still copied every message inside Redis (21-46 ms and the lists' memory again at
 * 100,000). Here the fork reads its source's lists: its header names, per segment, the list and
 * the prefix of it it reads (readHeader in redis-scripts.ts), and the list's reader set records it,
 * so the fork writes the header's few fields, the version, the change record and one reader entry
 * per segment, whatever the messages. A fork at a past version does the same when the version is
 * a prefix of each current list (the undos since only cut appends off).
 * Under encryption at rest it shares alike: the shared elements stay sealed for the conversations
 * that sealed them (each list of two writers records which runs are whose, scriptPrelude's
 * sealersOf, and reads send them), and the sidecar passes the fork's rest, title and labels sealed
 * for it as a past version's: a fork at 100,000 messages went through the engine, every message
 * opened, sealed again and pushed (3.5-3.9 s), and now costs what a plain one does (1-2 ms,
 * docs/history.md "Encrypted forks share the lists (Redis)").
 * It needs the source's and the new conversation's keys in one script: on a cluster the new
 * conversation's keys are under its source's home, its own tag holding a pointer there
 * (redis-scripts.ts, conversationKeys), which the sidecar claims before this script runs.
 *
 * The fork shares the source's id index the same way: it is kept per segment list (\`<list>:ids\`,
 * \`<list>:calls\`, the prelude's idsOf and callsOf in redis-scripts.ts), and a conversation reads
 * the entries of a shared list inside the prefix it reads, so the fork writes no index entry and
 * its \`list_ids_at\` is 1 when the source's index is current (at a past version too). Before, the
 * fork \`COPY\`d the source's \`ids\` set and \`calls\` hash: 42-96 ms of Redis's one thread at 100,000
 * messages (INFO commandstats, docs/history.md "The id index kept per list"), every other tenant
 * waiting; now 0.13-0.41 ms. Without any index the fork's first commit (planned on the stored
 * tail) found it stale, read the fork whole and wrote the index whole: 787 ms at 100,000 messages.
 * KEYS: the source's version, header and four segment lists (as the other scripts, so the prelude's
 * checks read them), then the new conversation's version, header, four segment lists and change
 * stream, then the source's home pointer (homeCheck).
 * ARGV: the source version the sidecar read, `created` for the new conversation, the bytes appended
 * to the source's `rest` (the new conversation id and `forked_from`: protobuf's last-one-wins
 * for a field repeated in one encoding), the change record of version 1, the fork time (Unix ms),
 * the change stream MAXLEN (approximate), the most runs of sealers a list the fork reads may have
 * ("0" = no bound: without encryption); then, for a fork at a past version, "past", the length
 * of each segment's prefix the fork reads, and the past version's title and labels (the rest
 * argument is then the fork's whole rest), optionally followed by what the fork writes of its own
 * after each prefix (`forkTailArguments`: per segment the count, the encodings, their ids; then
 * the history's calls as id, name and position in its own list). Under encryption every fork
 * passes "past" (at the current version with its lengths, no own messages): its rest, title and
 * labels come sealed for it.
 * Why own messages: a fork at a version before a rewind, a removal or a compaction shares each
 * segment's longest prefix the source's current list still holds and pushes only the rest, its
 * index entries written here too; it went through the engine, every message pushed (2.1 s at
 * 100,000 on Redis Cluster, docs/history.md "A fork at any past version shares").
 * Returns {'ok'}; {'invalid', detail} for arguments it cannot take (a sidecar's bug); {'home', id} when the source's keys are under a home; {'moved', version} when the source is no longer at that version or expires
 * (the fork then goes through the engine); {'exists'} when
 * the new conversation has a version; {'corrupt', detail} when the source's keys cannot be trusted
 * or the new conversation's keys exist without a version.
 */
export const forkScript = `#!lua
${scriptPrelude}
${homeCheck(14)}
local headerType, bad = checkStateTypes()
if bad then return bad end
local version = redis.call('GET', KEYS[1])
if not version then return {'moved', '0'} end
if not isVersion(version) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(version, 1, 40) .. '", not a version') end
if headerType == 'none' then return corrupt('version ' .. version .. ' is stored without its state') end
local header
header, bad = readHeader(version)
if bad then return bad end
if version ~= ARGV[1] then return {'moved', version} end
-- A source that expires goes through the engine (see forkCurrent): 'moved' sends it there.
local expires = redis.call('HGET', KEYS[2], 'expires_at_ms')
if expires and expires ~= '0' then return {'moved', version} end
if redis.call('EXISTS', KEYS[7]) == 1 then return {'exists'} end
for i = 8, 13 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return corrupt('the key ' .. KEYS[i] .. ' exists without its conversation version ' .. KEYS[7]) end
end
-- A fork at a past version reads the prefixes of the source's segments the sidecar names (what the
-- undos since were: appends cut off), with the past version's rest, title and labels.
local past = ARGV[8] == 'past'
local lengths = {}
for i, name in ipairs(segmentNames) do
  lengths[i] = tonumber(header[name])
  if past then
    if not (ARGV[8 + i] and isVersion(ARGV[8 + i]) and tonumber(ARGV[8 + i]) <= lengths[i]) then return {'moved', version} end
    lengths[i] = tonumber(ARGV[8 + i])
  end
end
-- What the fork writes of its own after each prefix (ARGV from 15): per segment a count, that
-- many encodings and their ids; then the count of the history's calls among them, and per call its
-- id, name and position in the fork's own history list. Checked whole before the first write.
local function invalid(detail) return {'invalid', detail} end
local tails = {{count = 0}, {count = 0}, {count = 0}, {count = 0}}
local calls = {first = 1, last = 0}
if past and #ARGV > 14 then
  local at = 15
  for i, name in ipairs(segmentNames) do
    local count = ARGV[at]
    if not (count and isVersion(count)) then return invalid(name .. ': the count of messages of its own must be a count') end
    count = tonumber(count)
    if at + 2 * count > #ARGV then return invalid(name .. ': ' .. count .. ' messages of its own announced, fewer given') end
    tails[i] = {count = count, first = at + 1}
    at = at + 1 + 2 * count
  end
  local count = ARGV[at]
  if not (count and isVersion(count)) then return invalid('the count of calls must be a count') end
  calls = {first = at + 1, last = at + 3 * tonumber(count)}
  if calls.last ~= #ARGV then return invalid(count .. ' calls announced, ' .. (#ARGV - at) .. ' arguments given') end
  for m = calls.first, calls.last, 3 do
    local place = ARGV[m + 2]
    if not (isVersion(place) and tonumber(place) < tails[2].count) then return invalid('call ' .. ARGV[m] .. ' is made at "' .. place .. '", not by a message of the history of its own') end
  end
end
-- Under encryption a list the fork reads must keep who sealed its elements within the bound
-- ARGV[7] ('0' = none), with the run the fork's own ownWhole would add later (scriptPrelude's
-- sealersOf): past it the fork goes through the engine, which seals every message for it.
local bound = tonumber(ARGV[7]) or 0
if bound > 0 then
  for i = 1, 4 do
    if lengths[i] > 0 then
      local runs
      if header.lists[i] and header.shared[i] < lengths[i] then runs = runCount(header.lists[i]) + 1 + runCount(KEYS[2 + i])
      else runs = runCount(header.lists[i] or KEYS[2 + i]) end
      if runs + 1 > bound then return {'moved', version} end
    end
  end
end
-- The source's index, kept per list, is the fork's when it is current: the fork reads prefixes of
-- the lists the source reads, and their indexes with them.
local sound
sound, bad = indexSound(header)
if bad then return bad end
local sharesIndex = sound and redis.call('HGET', KEYS[2], 'list_ids_at') == version
local added = redis.pcall('XADD', KEYS[13], 'MAXLEN', '~', ARGV[6], '1-0', 'change', ARGV[4])
if type(added) == 'table' and added.err then return corrupt('the change stream ' .. KEYS[13] .. ' does not take version 1 (' .. added.err .. ')') end
local listed
if past then listed = {ARGV[13], ARGV[14]} else listed = redis.call('HMGET', KEYS[2], 'title', 'labels') end
local fields = {'created', ARGV[2], 'rest', past and ARGV[3] or header.rest .. ARGV[3], 'rest_at', '1',
  'created_at_ms', ARGV[5], 'updated_at_ms', ARGV[5], 'title', listed[1] or '', 'labels', listed[2] or '{}'}
-- The fork reads each segment as a prefix of one list, its source's own or the one the source
-- shares; a source segment that is a shared prefix and an own tail first becomes one list (ownWhole).
for i, name in ipairs(segmentNames) do
  local length = lengths[i]
  fields[#fields + 1] = name
  fields[#fields + 1] = string.format('%d', length + tails[i].count)
  fields[#fields + 1] = name .. '_at'
  fields[#fields + 1] = '1'
  if length > 0 then
    if header.lists[i] and header.shared[i] < length then ownWhole(header, i, sharesIndex) end
    local list = header.lists[i] or KEYS[2 + i]
    redis.call('ZADD', readersOf(list), length, KEYS[8])
    fields[#fields + 1] = name .. '_list'
    fields[#fields + 1] = list
    fields[#fields + 1] = name .. '_shared'
    fields[#fields + 1] = string.format('%d', length)
  end
end
-- The fork's own lists start empty: so do their indexes (a previous release's delete of a
-- conversation under its id left them behind). Then its own messages go to them, indexed at their
-- positions there when the index is shared (a stale one is rebuilt by the fork's first commit).
for i = 9, 12 do redis.call('UNLINK', idsOf(KEYS[i]), callsOf(KEYS[i]), sealersOf(KEYS[i])) end
local chunk = 1000
for i = 1, 4 do
  local tail, key = tails[i], KEYS[8 + i]
  if tail.count > 0 then
    local last = tail.first + tail.count - 1
    for from = tail.first, last, chunk do redis.call('RPUSH', key, unpack(ARGV, from, math.min(from + chunk - 1, last))) end
    if sharesIndex then
      local entries = {}
      for k = 0, tail.count - 1 do
        entries[#entries + 1] = ARGV[last + 1 + k]
        entries[#entries + 1] = string.format('%d', k)
        if #entries == chunk then
          redis.call('HSET', idsOf(key), unpack(entries))
          entries = {}
        end
      end
      if #entries > 0 then redis.call('HSET', idsOf(key), unpack(entries)) end
    end
  end
end
if sharesIndex then
  local texts, called = {}, {}
  for m = calls.first, calls.last, 3 do
    local id = ARGV[m]
    if not texts[id] then
      texts[id] = {}
      called[#called + 1] = id
    end
    table.insert(texts[id], callText(tonumber(ARGV[m + 2]), ARGV[m + 1]))
  end
  for _, id in ipairs(called) do redis.call('HSET', callsOf(KEYS[10]), id, table.concat(texts[id])) end
  fields[#fields + 1] = 'list_ids_at'
  fields[#fields + 1] = '1'
end
redis.call('HSET', KEYS[8], unpack(fields))
redis.call('SET', KEYS[7], '1')
return {'ok'}
`;

/**
 * The most runs of sealers a list may keep under encryption (scriptPrelude's sealersOf): each
 * fork of a fork, prepend or expiry that makes a segment one list adds one, and each read costs
 * O(runs) in Lua and per run in the sidecar; a fork whose lists would pass it goes through the
 * engine, which seals every message for the fork (one writer again).
 */
export const maxSealerRuns = 16;

/** How many of the fork script's arguments are keys. */
export const forkScriptKeys = 14;

/**
 * What a fork at a past version writes of its own, as the fork script's arguments after the title
 * and labels: per segment the count of its own messages, their encodings and their ids; then the
 * history's calls among them, each as call id, name and position in the fork's own history list.
 */
export function forkTailArguments(tails: readonly ForkTail[]): (string | Buffer)[] {
  const args: (string | Buffer)[] = [];
  for (const tail of tails) {
    args.push(String(tail.messages.length));
    // One push per item: spread as arguments, a long tail would overflow the stack.
    for (const encoding of tail.encodings) args.push(encoding);
    for (const message of tail.messages) args.push(message.id);
  }
  const calls: string[] = [];
  tails[storedSegments.indexOf("history")]!.messages.forEach((message, position) => forEachCall(message, (id, name) => calls.push(id, name, String(position))));
  args.push(String(calls.length / 3));
  for (const item of calls) args.push(item);
  return args;
}
