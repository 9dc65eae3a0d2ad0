import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { defaultConfig, flags, loadConfig, printableConfig } from "../../../src/server/operations/config.js";

describe("configuration from flags and CONTEXTD_* environment", () => {
  it("uses defaults, then environment, then flags", () => {
    expect(loadConfig([], {})).toEqual(defaultConfig);
    const fromEnv = loadConfig([], { CONTEXTD_PORT: "9000", CONTEXTD_MAX_MESSAGES: "50", CONTEXTD_HOST: "0.0.0.0" });
    expect(fromEnv).toMatchObject({ port: 9000, maxMessages: 50, host: "0.0.0.0" });
    const fromFlags = loadConfig(["--port", "9001", "--max-messages", "60"], { CONTEXTD_PORT: "9000", CONTEXTD_MAX_MESSAGES: "50" });
    expect(fromFlags).toMatchObject({ port: 9001, maxMessages: 60 });
  });

  it("reads the compile text limit from --max-compile-text-bytes or CONTEXTD_MAX_COMPILE_TEXT_BYTES, at most what a string can hold", () => {
    expect(defaultConfig.maxCompileTextBytes).toBe(64 * 1024 * 1024);
    expect(loadConfig([], { CONTEXTD_MAX_COMPILE_TEXT_BYTES: "4096" }).maxCompileTextBytes).toBe(4096);
    expect(loadConfig(["--max-compile-text-bytes", "8192"], { CONTEXTD_MAX_COMPILE_TEXT_BYTES: "4096" }).maxCompileTextBytes).toBe(8192);
    expect(() => loadConfig(["--max-compile-text-bytes", String(2 ** 29)], {})).toThrow(/--max-compile-text-bytes or CONTEXTD_MAX_COMPILE_TEXT_BYTES "536870912": want an integer from 1 to 536870888/);
  });

  it("reads the history facts bounds from --history-facts-bytes / --history-facts-conversations or their variables; 0 turns them off", () => {
    expect(defaultConfig.historyFactsBytes).toBe(64 * 1024 * 1024);
    expect(defaultConfig.historyFactsConversations).toBe(10_000);
    expect(loadConfig(["--history-facts-bytes", "0"], { CONTEXTD_HISTORY_FACTS_CONVERSATIONS: "12" })).toMatchObject({ historyFactsBytes: 0, historyFactsConversations: 12 });
    expect(() => loadConfig(["--history-facts-conversations", "many"], {})).toThrow(/--history-facts-conversations or CONTEXTD_HISTORY_FACTS_CONVERSATIONS/);
  });

  it("reads Recall's bounds from --recall-index-bytes / --recall-scan-bytes or their variables; the index is off at 0, a scan needs 1,024 bytes", () => {
    expect(defaultConfig.recallIndexBytes).toBe(256 * 1024 * 1024);
    expect(defaultConfig.recallScanBytes).toBe(64 * 1024 * 1024);
    expect(loadConfig(["--recall-index-bytes", "0"], { CONTEXTD_RECALL_SCAN_BYTES: "4096" })).toMatchObject({ recallIndexBytes: 0, recallScanBytes: 4096 });
    expect(() => loadConfig(["--recall-scan-bytes", "10"], {})).toThrow(/--recall-scan-bytes or CONTEXTD_RECALL_SCAN_BYTES "10": want an integer from 1024/);
  });

  it("reads the ReadMessages pin bound from --read-pin-bytes or CONTEXTD_READ_PIN_BYTES; 256 MiB by default, 0 keeps none", () => {
    expect(defaultConfig.readPinBytes).toBe(256 * 1024 * 1024);
    expect(loadConfig([], { CONTEXTD_READ_PIN_BYTES: "0" }).readPinBytes).toBe(0);
    expect(loadConfig(["--read-pin-bytes", "1048576"], { CONTEXTD_READ_PIN_BYTES: "0" }).readPinBytes).toBe(1_048_576);
    expect(() => loadConfig(["--read-pin-bytes", "lots"], {})).toThrow(/--read-pin-bytes or CONTEXTD_READ_PIN_BYTES/);
  });

  it("reads the history window and read bound from --history-retention-versions / --history-read-messages or their variables", () => {
    expect([defaultConfig.historyRetentionVersions, defaultConfig.historyReadMessages]).toEqual([10_000, 1_000_000]);
    expect(loadConfig([], { CONTEXTD_HISTORY_RETENTION_VERSIONS: "50" }).historyRetentionVersions).toBe(50);
    expect(loadConfig(["--history-read-messages", "7"], { CONTEXTD_HISTORY_READ_MESSAGES: "9" }).historyReadMessages).toBe(7);
    expect(() => loadConfig(["--history-retention-versions", "0"], {})).toThrow(/--history-retention-versions or CONTEXTD_HISTORY_RETENTION_VERSIONS/);
  });

  it("reads the bound of one change's undo from --history-undo-bytes or CONTEXTD_HISTORY_UNDO_BYTES (1 MiB; 0 = none recorded)", () => {
    expect(defaultConfig.historyUndoBytes).toBe(1_048_576);
    expect(loadConfig([], { CONTEXTD_HISTORY_UNDO_BYTES: "0" }).historyUndoBytes).toBe(0);
    expect(loadConfig(["--history-undo-bytes", "4096"], { CONTEXTD_HISTORY_UNDO_BYTES: "0" }).historyUndoBytes).toBe(4096);
    expect(() => loadConfig(["--history-undo-bytes", "lots"], {})).toThrow(/--history-undo-bytes or CONTEXTD_HISTORY_UNDO_BYTES/);
  });

  it("reads --share-encrypted-forks or CONTEXTD_SHARE_ENCRYPTED_FORKS; on by default", () => {
    expect(defaultConfig.shareEncryptedForks).toBe(true);
    expect(loadConfig(["--share-encrypted-forks", "false"], {}).shareEncryptedForks).toBe(false);
    expect(loadConfig([], { CONTEXTD_SHARE_ENCRYPTED_FORKS: "false" }).shareEncryptedForks).toBe(false);
    expect(() => loadConfig(["--share-encrypted-forks", "later"], {})).toThrow(/--share-encrypted-forks or CONTEXTD_SHARE_ENCRYPTED_FORKS/);
  });

  it("reads --strict-tool-rounds or CONTEXTD_STRICT_TOOL_ROUNDS; off by default", () => {
    expect(defaultConfig.strictToolRounds).toBe(false);
    expect(loadConfig(["--strict-tool-rounds", "true"], {}).strictToolRounds).toBe(true);
    expect(loadConfig([], { CONTEXTD_STRICT_TOOL_ROUNDS: "true" }).strictToolRounds).toBe(true);
    expect(() => loadConfig(["--strict-tool-rounds", "sometimes"], {})).toThrow(/--strict-tool-rounds or CONTEXTD_STRICT_TOOL_ROUNDS/);
  });

  it("reads the idle TTLs from --idle-ttl-ms and --idle-ttl-per-tenant (tenant=ms), and the sweep's interval; refuses malformed entries naming the flag", () => {
    expect(loadConfig([], {})).toMatchObject({ idleTtlMs: 0, idleTtlPerTenant: {}, expirySweepMs: 1_000 });
    const config = loadConfig(["--idle-ttl-ms", "86400000", "--idle-ttl-per-tenant", "acme=60000, beta.io=0", "--expiry-sweep-ms", "0"], {});
    expect(config).toMatchObject({ idleTtlMs: 86_400_000, idleTtlPerTenant: { acme: 60_000, "beta.io": 0 }, expirySweepMs: 0 });
    expect(loadConfig([], { CONTEXTD_IDLE_TTL_PER_TENANT: "acme=5" }).idleTtlPerTenant).toEqual({ acme: 5 });
    expect(() => loadConfig(["--idle-ttl-per-tenant", "acme"], {})).toThrow('invalid --idle-ttl-per-tenant or CONTEXTD_IDLE_TTL_PER_TENANT entry "acme": want tenant=ms');
    expect(() => loadConfig(["--idle-ttl-per-tenant", "a/b=5"], {})).toThrow(/entry "a\/b=5"/);
    expect(() => loadConfig(["--idle-ttl-per-tenant", "acme=1,acme=2"], {})).toThrow('tenant "acme" given twice');
    expect(() => loadConfig(["--idle-ttl-ms", "3153600000001"], {})).toThrow(/--idle-ttl-ms/);
  });

  it("reads the default prune from --prune-max-messages, --prune-max-bytes and --prune-per-tenant (tenant=messages:bytes); refuses malformed entries naming the flag and the limits", () => {
    expect(loadConfig([], {})).toMatchObject({ pruneMaxMessages: 0, pruneMaxBytes: 0, prunePerTenant: {} });
    const config = loadConfig(["--prune-max-messages", "500", "--prune-max-bytes", "1048576", "--prune-per-tenant", "acme=200:0, beta.io=0:0,gamma=0:4096"], {});
    expect(config).toMatchObject({ pruneMaxMessages: 500, pruneMaxBytes: 1_048_576, prunePerTenant: { acme: { maxMessages: 200, maxBytes: 0 }, "beta.io": { maxMessages: 0, maxBytes: 0 }, gamma: { maxMessages: 0, maxBytes: 4096 } } });
    expect(loadConfig([], { CONTEXTD_PRUNE_PER_TENANT: "acme=5:6" }).prunePerTenant).toEqual({ acme: { maxMessages: 5, maxBytes: 6 } });
    expect(() => loadConfig(["--prune-per-tenant", "acme=5"], {})).toThrow('invalid --prune-per-tenant or CONTEXTD_PRUNE_PER_TENANT entry "acme=5": want tenant=messages:bytes');
    expect(() => loadConfig(["--prune-per-tenant", "acme=4294967296:0"], {})).toThrow(/the messages 0 to 4294967295/);
    expect(() => loadConfig(["--prune-per-tenant", "acme=1:1,acme=2:2"], {})).toThrow('tenant "acme" given twice');
    expect(() => loadConfig([], { CONTEXTD_PRUNE_MAX_MESSAGES: "4294967296" })).toThrow(/--prune-max-messages or CONTEXTD_PRUNE_MAX_MESSAGES "4294967296": want an integer from 0 to 4294967295/);
  });

  it("rejects invalid values naming the flag and the variable", () => {
    expect(() => loadConfig(["--port", "70000"], {})).toThrow(/--port or CONTEXTD_PORT "70000"/);
    expect(() => loadConfig([], { CONTEXTD_MAX_STREAMS: "0" })).toThrow(/--max-streams or CONTEXTD_MAX_STREAMS/);
    expect(() => loadConfig([], { CONTEXTD_SHUTDOWN_GRACE_MS: "soon" })).toThrow(/CONTEXTD_SHUTDOWN_GRACE_MS "soon"/);
    expect(() => loadConfig(["--metrics-path", "metrics"], {})).toThrow(/starting with "\/"/);
    expect(() => loadConfig(["--log-level", "loud"], {})).toThrow(/debug, info, warn or error/);
    expect(() => loadConfig(["--no-such-flag"], {})).toThrow();
  });

  it("reads tokens from CONTEXTD_AUTH_TOKENS or a file, with optional tenants, and never prints them", () => {
    const fromEnv = loadConfig([], { CONTEXTD_AUTH_TOKENS: "aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb=acme" });
    expect(fromEnv.authTokens).toEqual([
      { token: "aaaaaaaaaaaaaaaa", tenant: "" },
      { token: "bbbbbbbbbbbbbbbb", tenant: "acme" },
    ]);
    const file = join(mkdtempSync(join(tmpdir(), "contextd-config-")), "tokens");
    writeFileSync(file, "# comment\ncccccccccccccccc=beta\n");
    expect(loadConfig(["--auth-tokens-file", file], {}).authTokens).toEqual([{ token: "cccccccccccccccc", tenant: "beta" }]);
    expect(() => loadConfig([], { CONTEXTD_AUTH_TOKENS: "short" })).toThrow(/at least 16 characters/);
    expect(() => loadConfig([], { CONTEXTD_AUTH_TOKENS: "dddddddddddddddd=a/b" })).toThrow(/invalid tenant "a\/b"/);
    const printed = JSON.stringify(printableConfig({ ...fromEnv, redisUrl: "redis://user:secret@redis:6379/0" }));
    expect(printed).not.toContain("aaaaaaaaaaaaaaaa");
    expect(printed).not.toContain("secret");
    expect(printed).toContain('"authTokens":2');
  });
});

describe("--postgres-url", () => {
  it("reads --postgres-url or CONTEXTD_POSTGRES_URL, refuses it beside --redis-url or in another scheme, and never prints its password", () => {
    expect(loadConfig([], { CONTEXTD_POSTGRES_URL: "postgres://u:pw@db:5432/contextd" }).postgresUrl).toBe("postgres://u:pw@db:5432/contextd");
    expect(loadConfig(["--postgres-url", "postgresql://db/x"], {}).postgresUrl).toBe("postgresql://db/x");
    expect(() => loadConfig(["--postgres-url", "postgres://db/x"], { CONTEXTD_REDIS_URL: "redis://r" })).toThrow(/both set: choose one store/);
    expect(() => loadConfig(["--postgres-url", "mysql://u:pw@db/x"], {})).toThrow(/invalid --postgres-url or CONTEXTD_POSTGRES_URL "mysql:\/\/\(credentials\)@db\/x"/);
    const printed = JSON.stringify(printableConfig(loadConfig([], { CONTEXTD_POSTGRES_URL: "postgres://u:secret@db:5432/contextd" })));
    expect(printed).not.toContain("secret");
    expect(printed).toContain("postgres://(credentials)@db:5432/contextd");
  });
});

describe("--stored-token-estimator", () => {
  it("defaults to openai_chat:gpt-4o, takes none or provider:model, and refuses anything else naming the flag and variable", () => {
    expect(loadConfig([], {}).storedTokenEstimator).toBe("openai_chat:gpt-4o");
    expect(loadConfig(["--stored-token-estimator", "none"], {}).storedTokenEstimator).toBe("none");
    expect(loadConfig([], { CONTEXTD_STORED_TOKEN_ESTIMATOR: "anthropic_messages:claude-sonnet-4" }).storedTokenEstimator).toBe("anthropic_messages:claude-sonnet-4");
    expect(() => loadConfig(["--stored-token-estimator", "gpt-4o"], {})).toThrow(/invalid --stored-token-estimator or CONTEXTD_STORED_TOKEN_ESTIMATOR "gpt-4o": want none or provider:model/);
  });
});

describe("contextd --help and --version", () => {
  const main = fileURLToPath(new URL("../../../dist/src/main.js", import.meta.url));
  const run = (...args: string[]) => execFileSync(process.execPath, [main, ...args], { encoding: "utf8" });

  it("--help lists every flag the sidecar accepts, with its variable and default, and exits 0", () => {
    const help = run("--help");
    for (const flag of Object.keys(flags)) {
      const variable = `CONTEXTD_${flag.toUpperCase().replaceAll("-", "_")}`;
      expect(help, flag).toContain(`--${flag} (${variable}, default `);
      // Every listed flag is one loadConfig accepts.
      expect(() => loadConfig([`--${flag}`, flag === "auth-tokens-file" ? "/dev/null" : "x"], {})).not.toThrow(/Unknown option/);
    }
    expect(help).toContain("--max-request-bytes (CONTEXTD_MAX_REQUEST_BYTES, default 16777216)");
    expect(help).toContain("--direct-unary-grpc (CONTEXTD_DIRECT_UNARY_GRPC, default true)");
  });

  it("--version prints the package version", () => {
    const { version } = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version: string };
    expect(run("--version").trim()).toBe(`contextd ${version}`);
  });
});

describe("--redis-cluster-nodes and --redis-tls-ca", () => {
  it("takes seeds as host:port or redis[s]:// URLs, refuses ones that disagree, and never prints their password", () => {
    const seeds = "rediss://app:pw-secret@a:6380,rediss://app:pw-secret@b:6380";
    const config = loadConfig(["--redis-cluster-nodes", seeds, "--redis-tls-ca", "/etc/ca.pem"], {});
    expect(config).toMatchObject({ redisClusterNodes: seeds.split(","), redisTlsCa: "/etc/ca.pem" });
    expect(JSON.stringify(printableConfig(config))).not.toContain("pw-secret");
    expect(JSON.stringify(printableConfig(config))).toContain("rediss://(credentials)@a:6380");
    expect(loadConfig([], { CONTEXTD_REDIS_CLUSTER_NODES: "a:1, b:2" }).redisClusterNodes).toEqual(["a:1", "b:2"]);
    expect(() => loadConfig(["--redis-cluster-nodes", "a:1,rediss://b:2"], {})).toThrow(/--redis-cluster-nodes or CONTEXTD_REDIS_CLUSTER_NODES: redis cluster seed "rediss:\/\/b:2" and "a:1" disagree on TLS/);
    expect(() => loadConfig(["--redis-cluster-nodes", "a"], {})).toThrow(/seed "a" is not host:port/);
  });

  it("takes --redis-command-timeout-ms from 1 ms, 2 s by default", () => {
    expect(loadConfig([], {}).redisCommandTimeoutMs).toBe(2_000);
    expect(loadConfig(["--redis-command-timeout-ms", "30000"], {}).redisCommandTimeoutMs).toBe(30_000);
    expect(loadConfig([], { CONTEXTD_REDIS_COMMAND_TIMEOUT_MS: "500" }).redisCommandTimeoutMs).toBe(500);
    expect(() => loadConfig(["--redis-command-timeout-ms", "0"], {})).toThrow(/invalid --redis-command-timeout-ms or CONTEXTD_REDIS_COMMAND_TIMEOUT_MS "0": want an integer from 1 to 2147483647/);
  });

  it("refuses --redis-tls-ca without a rediss:// URL or rediss:// seeds", () => {
    expect(loadConfig(["--redis-url", "rediss://:pw@r:6380", "--redis-tls-ca", "ca.pem"], {}).redisTlsCa).toBe("ca.pem");
    for (const store of [[], ["--redis-url", "redis://r:6379"], ["--redis-cluster-nodes", "a:1"]]) {
      expect(() => loadConfig([...store, "--redis-tls-ca", "ca.pem"], {})).toThrow(/--redis-tls-ca or CONTEXTD_REDIS_TLS_CA: it is for TLS to Redis/);
    }
  });
});
