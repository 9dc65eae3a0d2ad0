import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { defaultConfig, loadConfig, printableConfig } from "../../../src/server/operations/config.js";

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

  it("rejects invalid values naming the flag and the variable", () => {
    expect(() => loadConfig(["--port", "70000"], {})).toThrow(/--port or CONTEXTD_PORT "70000"/);
    expect(() => loadConfig([], { CONTEXTD_MAX_STREAMS: "0" })).toThrow(/--max-streams or CONTEXTD_MAX_STREAMS/);
    expect(() => loadConfig([], { CONTEXTD_SHUTDOWN_GRACE_MS: "soon" })).toThrow(/CONTEXTD_SHUTDOWN_GRACE_MS "soon"/);
    expect(() => loadConfig(["--metrics-path", "metrics"], {})).toThrow(/starting with "\/"/);
    expect(() => loadConfig(["--log-level", "loud"], {})).toThrow(/debug, info or error/);
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
