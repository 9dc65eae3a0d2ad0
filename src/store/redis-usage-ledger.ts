import { tenantOf } from "../core/model/conversation-tenant.js";
import type { RedisConnection } from "./redis-connection.js";
import { escapeKeyPart } from "./redis-scripts.js";
import {
  corruptUsage,
  decodeUsageEntry,
  encodeUsageEntry,
  usageSumFields,
  usageSumsOf,
  type ConversationUsageRecord,
  type RecordedUsage,
  type TenantUsagePage,
  type UsageLedgerBounds,
  type UsageReport,
} from "./usage-ledger.js";

/**
 * The Redis store's usage ledger (`UsageLedgerStore`), one Lua script per call. Apart from the
 * conversation store because its keys, scripts and replies are its own; the store hands it its
 * connection.
 *
 * Keys, all under the tenant's hash tag (escaped as conversation ids are, "%" for ""), so one
 * script reaches a conversation's ledger and its tenant's totals on one Cluster slot:
 * - `<prefix>:usage:{<tenant>}`: a hash of the tenant's sums (`usageSumFields`);
 * - `<prefix>:usage:{<tenant>}:conversations`: a sorted set (scores 0) of its conversation ids, for pages by id;
 * - `<prefix>:usage:{<tenant>}:c:<escaped id>`: a hash of the conversation's sums;
 * - `…:c:<escaped id>:order`: a list of the kept entries' report ids, oldest first;
 * - `…:c:<escaped id>:entries`: a hash, report id → the entry (`encodeUsageEntry`).
 * The sums are HINCRBY integers (exact to 2^63 - 1). A tenant's ledger shares one slot: its
 * reports are serialised on one master, which is what makes the tenant's totals exact.
 */
export class RedisUsageLedger {
  constructor(
    private readonly connection: RedisConnection,
    private readonly keyPrefix: string,
  ) {
    const redis = connection.redis;
    redis.defineCommand("contextdRecordUsage", { numberOfKeys: 5, lua: recordUsageScript });
    redis.defineCommand("contextdReadUsage", { numberOfKeys: 3, lua: readUsageScript, readOnly: true });
    redis.defineCommand("contextdListTenantUsage", { numberOfKeys: 2, lua: listTenantUsageScript, readOnly: true });
    redis.defineCommand("contextdForgetUsage", { lua: forgetUsageScript });
  }

  private get scripts(): UsageScripts {
    return this.connection.redis as unknown as UsageScripts;
  }

  async record(tenant: string, conversationId: string, report: UsageReport, bounds: UsageLedgerBounds): Promise<RecordedUsage> {
    const keys = usageKeys(this.keyPrefix, tenant, conversationId);
    const reply = await this.connection.call("recording usage", () =>
      this.scripts.contextdRecordUsage(
        keys.tenant,
        keys.conversations,
        keys.totals,
        keys.order,
        keys.entries,
        report.reportId,
        encodeUsageEntry(report),
        conversationId,
        report.inputTokens,
        report.outputTokens,
        report.cachedInputTokens,
        report.compiledTokens,
        report.reportedAtMs,
        bounds.maxEntriesPerConversation,
      ),
    );
    if (reply[0] === "corrupt") throw corruptUsage(keys.totals, String(reply[1]));
    const totals = usageSumsOf(reply.slice(2) as string[], keys.totals);
    if (reply[0] === "duplicate") return { duplicate: true, entry: decodeUsageEntry(String(reply[1]), keys.entries), totals };
    return { duplicate: false, entry: report, totals };
  }

  /**
   * Removes the ledgers of `conversationIds` (deleted or expired conversations): one script per
   * tenant, since a tenant's ledger is one slot. The tenants' totals keep their reports.
   */
  async forget(conversationIds: readonly string[]): Promise<void> {
    const byTenant = new Map<string, string[]>();
    for (const id of conversationIds) {
      const tenant = tenantOf(id);
      byTenant.set(tenant, [...(byTenant.get(tenant) ?? []), id]);
    }
    const replies = await this.connection.call("removing the usage ledger of deleted conversations", () =>
      Promise.all(
        [...byTenant].map(([tenant, ids]) => {
          const keys = ids.map((id) => usageKeys(this.keyPrefix, tenant, id));
          return this.scripts.contextdForgetUsage(1 + 3 * ids.length, keys[0]!.conversations, ...keys.flatMap((key) => [key.totals, key.order, key.entries]), ...ids);
        }),
      ),
    );
    for (const reply of replies) if (reply[0] === "corrupt") throw corruptUsage(String(reply[2]), String(reply[1]));
  }

  async read(tenant: string, conversationId: string): Promise<ConversationUsageRecord> {
    const keys = usageKeys(this.keyPrefix, tenant, conversationId);
    const reply = await this.connection.call("reading usage", () => this.scripts.contextdReadUsage(keys.totals, keys.order, keys.entries));
    if (reply[0] === "corrupt") throw corruptUsage(keys.totals, String(reply[1]));
    const [sums, entries] = [reply[1] as (string | null)[], reply[2] as (string | null)[]];
    return {
      totals: usageSumsOf(sums, keys.totals),
      entries: entries.map((entry) => {
        if (entry === null) throw corruptUsage(keys.entries, "a report id of the order list has no entry");
        return decodeUsageEntry(entry, keys.entries);
      }),
    };
  }

  async list(tenant: string, after: string, limit: number): Promise<TenantUsagePage> {
    const keys = usageKeys(this.keyPrefix, tenant, "");
    const reply = await this.connection.call("listing a tenant's usage", () =>
      this.scripts.contextdListTenantUsage(keys.tenant, keys.conversations, after === "" ? "-" : `(${after}`, limit + 1, `${keys.base}:c:`),
    );
    if (reply[0] === "corrupt") throw corruptUsage(keys.tenant, String(reply[1]));
    const rows = reply[2] as [string, (string | null)[]][];
    return {
      totals: usageSumsOf(reply[1] as (string | null)[], keys.tenant),
      conversations: rows.slice(0, limit).map(([conversationId, sums]) => ({ conversationId, totals: usageSumsOf(sums, `${keys.base}:c:${escapeKeyPart(conversationId)}`) })),
      more: rows.length > limit,
    };
  }
}

interface UsageScripts {
  contextdForgetUsage(keyCount: number, ...args: string[]): Promise<string[]>;
  contextdRecordUsage(...args: (string | number)[]): Promise<unknown[]>;
  contextdReadUsage(...args: string[]): Promise<unknown[]>;
  contextdListTenantUsage(...args: (string | number)[]): Promise<unknown[]>;
}

/** The ledger keys of a tenant and one of its conversations (see `RedisUsageLedger`). */
export function usageKeys(keyPrefix: string, tenant: string, conversationId: string) {
  const base = `${keyPrefix}:usage:{${tenant === "" ? "%" : escapeKeyPart(tenant)}}`;
  const conversation = `${base}:c:${escapeKeyPart(conversationId)}`;
  return { base, tenant: base, conversations: `${base}:conversations`, totals: conversation, order: `${conversation}:order`, entries: `${conversation}:entries` };
}

const sumFields = usageSumFields.map((field) => `'${field}'`).join(", ");

/** Checks that each key is absent or of its type; `corrupt` names the first that is not. */
const typeCheck = `
local function wrongType(keys)
  for _, key in ipairs(keys) do
    local actualType = redis.call('TYPE', key[1])['ok']
    if actualType ~= 'none' and actualType ~= key[2] then return key[1] .. ' is a ' .. actualType .. ', not a ' .. key[2] end
  end
  return nil
end
local sumFields = {${sumFields}}
local function sums(key)
  for _, field in ipairs(sumFields) do
    local value = redis.call('HGET', key, field)
    if value and not string.match(value, '^%-?%d+$') then return nil, key .. ' field ' .. field .. ' holds "' .. string.sub(value, 1, 40) .. '", not an integer' end
  end
  return redis.call('HMGET', key, unpack(sumFields))
end
`;

/**
 * Removes conversations' ledgers, atomically. KEYS: the tenant's conversation index, then per
 * conversation its sums, order list and entries. ARGV: the conversation ids. The tenant's sums are
 * not touched. Replies {'ok'} | {'corrupt', detail, key} before any write.
 */
const forgetUsageScript = `#!lua
${typeCheck}
local checks = {{KEYS[1], 'zset'}}
for i = 2, #KEYS, 3 do
  table.insert(checks, {KEYS[i], 'hash'})
  table.insert(checks, {KEYS[i + 1], 'list'})
  table.insert(checks, {KEYS[i + 2], 'hash'})
end
local problem = wrongType(checks)
if problem then return {'corrupt', problem, KEYS[1]} end
for i = 2, #KEYS, 3 do redis.call('UNLINK', KEYS[i], KEYS[i + 1], KEYS[i + 2]) end
redis.call('ZREM', KEYS[1], unpack(ARGV))
return {'ok'}
`;

/**
 * One report, atomically. KEYS: the tenant's sums, its conversation index, the conversation's
 * sums, order list and entries. ARGV: report id, entry text, conversation id, input, output,
 * cached and compiled tokens, now (ms), the entry bound. A report id already kept replies
 * {'duplicate', kept entry, sums...} and writes nothing; else {'ok', '', sums after...}.
 * {'corrupt', detail} before any write.
 */
const recordUsageScript = `#!lua
${typeCheck}
local problem = wrongType({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}, {KEYS[3], 'hash'}, {KEYS[4], 'list'}, {KEYS[5], 'hash'}})
if problem then return {'corrupt', problem} end
local _, tenantProblem = sums(KEYS[1])
if tenantProblem then return {'corrupt', tenantProblem} end
local before, conversationProblem = sums(KEYS[3])
if conversationProblem then return {'corrupt', conversationProblem} end
local kept = redis.call('HGET', KEYS[5], ARGV[1])
if kept then
  return {'duplicate', kept, unpack(before)}
end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[4], ARGV[1])
local maxEntries = tonumber(ARGV[9])
while redis.call('LLEN', KEYS[4]) > maxEntries do
  redis.call('HDEL', KEYS[5], redis.call('LPOP', KEYS[4]))
end
for _, key in ipairs({KEYS[1], KEYS[3]}) do
  redis.call('HINCRBY', key, 'reports', 1)
  redis.call('HINCRBY', key, 'input_tokens', ARGV[4])
  redis.call('HINCRBY', key, 'output_tokens', ARGV[5])
  redis.call('HINCRBY', key, 'cached_input_tokens', ARGV[6])
  redis.call('HINCRBY', key, 'compiled_tokens', ARGV[7])
  redis.call('HSETNX', key, 'first_ms', ARGV[8])
  redis.call('HSET', key, 'last_ms', ARGV[8])
end
redis.call('ZADD', KEYS[2], 0, ARGV[3])
return {'ok', '', unpack(redis.call('HMGET', KEYS[3], unpack(sumFields)))}
`;

/** A conversation's sums and kept entries, oldest first. KEYS: its sums, order list, entries. Replies {'ok', sums, entries}. */
const readUsageScript = `#!lua
${typeCheck}
local problem = wrongType({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'hash'}})
if problem then return {'corrupt', problem} end
local totals, sumsProblem = sums(KEYS[1])
if sumsProblem then return {'corrupt', sumsProblem} end
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
local entries = {}
if #ids > 0 then entries = redis.call('HMGET', KEYS[3], unpack(ids)) end
return {'ok', totals, entries}
`;

/**
 * A tenant's sums and a page of its conversations' sums. KEYS: the tenant's sums, its
 * conversation index. ARGV: the lex start ('-' or '(' .. after), how many, the prefix of a
 * conversation's sums key (the escaped id follows, escaped here as escapeKeyPart does).
 */
const listTenantUsageScript = `#!lua
${typeCheck}
local problem = wrongType({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}})
if problem then return {'corrupt', problem} end
local totals, sumsProblem = sums(KEYS[1])
if sumsProblem then return {'corrupt', sumsProblem} end
local rows = {}
for _, id in ipairs(redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))) do
  local escaped = string.gsub(id, '[%%{}:]', function(c) return string.format('%%%02X', string.byte(c)) end)
  local key = ARGV[3] .. escaped
  if redis.call('TYPE', key)['ok'] ~= 'hash' then return {'corrupt', key .. ' is not a hash'} end
  local conversationSums, rowProblem = sums(key)
  if rowProblem then return {'corrupt', rowProblem} end
  table.insert(rows, {id, conversationSums})
end
return {'ok', totals, rows}
`;
