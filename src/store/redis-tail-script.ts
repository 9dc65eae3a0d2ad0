import { homeCheck, scriptPrelude } from "./redis-scripts.js";

/**
 * What a commit planned on the stored tail reads (tail-commit.ts), in one round trip: the version,
 * the idempotency record, the header, the last `count` messages of history, the other three lists
 * whole, whether the id index is current, and the call index's names for the calls the batch
 * answers. Why it exists apart from the load and window scripts: a commit needs the record and the
 * index beside the window, and never the history's head.
 * KEYS: version, header, the four segment lists, idempotency record, home pointer (homeCheck; the
 * id index is named after the lists: scriptPrelude's idsOf, callsOf).
 * ARGV: "1" to also read the idempotency record; the window's count; then the call ids to look up.
 * Returns {'ok', false, fingerprint or false, record version or false} for a conversation never
 * written; else {'ok', version, fingerprint, recorded, created, rest_at, rest, '1' when the index
 * is current else '0', then per segment: _at, length, the index of its first message sent, those
 * messages (history: its last `count`, the others whole) and who sealed them (segmentSealers), then the names (false for none) of the
 * call ids asked}. {'corrupt', detail} as the load script.
 */
export const commitTailScript = `#!lua flags=no-writes
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
  -- As the load script: a record without its conversation answers nothing.
  return {'ok', false, false, false}
end
if not isVersion(version) then return corrupt('the version key ' .. KEYS[1] .. ' holds "' .. string.sub(version, 1, 40) .. '", not a version') end
if version == '0' then return corrupt('the version key ' .. KEYS[1] .. ' holds "0"') end
if headerType == 'none' then return corrupt('version ' .. version .. ' is stored without its state') end
local header
header, bad = readHeader(version)
if bad then return bad end
local sound
sound, bad = indexSound(header)
if bad then return bad end
local indexed = sound and redis.call('HGET', KEYS[2], 'list_ids_at') == version
local reply = {'ok', version, fingerprint, recorded, header.created, header.rest_at, header.rest, indexed and '1' or '0'}
local count = tonumber(ARGV[2])
for i, name in ipairs(segmentNames) do
  local length = tonumber(header[name])
  local from = 0
  if i == 2 and length > count then from = length - count end
  reply[#reply + 1] = header[name .. '_at']
  reply[#reply + 1] = length
  reply[#reply + 1] = from
  reply[#reply + 1] = segmentRange(header, i, from, length)
  reply[#reply + 1] = segmentSealers(header, i, from, length)
end
local names = {}
for k = 3, #ARGV do names[#names + 1] = latestCall(header, ARGV[k]) end
reply[#reply + 1] = names
return reply
`;
