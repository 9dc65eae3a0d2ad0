import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = new URL("..", import.meta.url);
const { version, bin } = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as { version: string; bin: Record<string, string> };

describe("npm start (scripts/start.sh) and the contextd command", () => {
  it("starts the built sidecar without recompiling when dist/ was built from the current sources", async () => {
    // The suite builds before it runs, and regenerating gen/ts in between rewrites identical files.
    const recorded = readFileSync(new URL("dist/.sources", root), "utf8").trim();
    const { stdout: current } = await run("bash", ["scripts/start.sh", "--sources-hash"], { cwd: root });
    expect(current.trim()).toBe(recorded);
    const { stdout, stderr } = await run("bash", ["scripts/start.sh", "--version"], { cwd: root });
    expect(stdout.trim()).toBe(`contextd ${version}`);
    expect(stderr).not.toContain("building");
  });

  it("has a bin entry pointing at the entry point, which starts with a node shebang", () => {
    expect(bin).toEqual({ contextd: "dist/src/main.js" });
    expect(readFileSync(new URL(bin.contextd, root), "utf8").split("\n")[0]).toBe("#!/usr/bin/env node");
  });
});
