import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

// The README's first step on a machine with an older Node, or one without npm (Debian's nodejs):
// `export PATH="$(bash scripts/install-node.sh):$PATH"`. Run here in a fresh directory with a PATH
// that holds no node, npm or npx at all, only the commands the script says it needs, so the Node,
// npm and npx it prints can only be its own.

const run = promisify(execFile);
const script = fileURLToPath(new URL("../scripts/install-node.sh", import.meta.url));
const work = mkdtempSync(join(tmpdir(), "contextd-install-node-"));

/** A directory of links to the few commands the script runs, found on this machine's PATH. */
function bareTools(): string {
  const tools = join(work, "tools");
  mkdirSync(tools);
  const path = (process.env.PATH ?? "").split(delimiter);
  for (const command of ["bash", "sh", "env", "curl", "tar", "gzip", "sha512sum", "mktemp", "rm", "mkdir", "ln", "mv", "uname", "dirname", "cat"]) {
    const found = path.map((dir) => join(dir, command)).find((candidate) => existsSync(candidate));
    if (found === undefined) throw new Error(`${command} is not on PATH`);
    symlinkSync(found, join(tools, command));
  }
  return tools;
}

describe("scripts/install-node.sh", () => {
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it("gives node 24 with a working npm and npx in a fresh directory, on a PATH without any", async () => {
    const checkout = join(work, "checkout");
    mkdirSync(join(checkout, "scripts"), { recursive: true });
    copyFileSync(script, join(checkout, "scripts", "install-node.sh"));
    const tools = bareTools();
    const env = { PATH: tools, HOME: work, ...(process.env.npm_config_registry ? { npm_config_registry: process.env.npm_config_registry } : {}) };
    const installed = await run("bash", ["scripts/install-node.sh"], { cwd: checkout, env });
    const bin = installed.stdout.trim();
    expect(bin).toBe(join(checkout, ".tools", "node", "v24.22.3", "bin"));
    expect(readdirSync(bin).sort()).toEqual(["node", "npm", "npx"]);

    // As the README puts it on PATH; the machine's own node is not reachable from here.
    const onPath = { ...env, PATH: `${bin}${delimiter}${tools}` };
    expect((await run("node", ["--version"], { env: onPath })).stdout.trim()).toBe("v24.22.3");
    expect((await run("npm", ["--version"], { env: onPath })).stdout.trim()).toMatch(/^11\.\d+\.\d+$/);
    expect((await run("npm", ["config", "get", "prefix"], { env: onPath })).stdout.trim()).toBe(join(checkout, ".tools", "node", "v24.22.3"));

    // npm packs and installs a package, and npx runs its command, all on the installed node.
    const library = join(work, "greeter");
    mkdirSync(join(library, "bin"), { recursive: true });
    writeFileSync(join(library, "package.json"), JSON.stringify({ name: "greeter", version: "1.0.0", bin: { greet: "bin/greet.js" } }));
    writeFileSync(join(library, "bin", "greet.js"), "#!/usr/bin/env node\nconsole.log(`hello from node ${process.versions.node}`);\n");
    const packed = (await run("npm", ["pack", "--silent", "--pack-destination", work], { cwd: library, env: onPath })).stdout.trim();
    const project = join(work, "project");
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "project", private: true }));
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", join(work, packed)], { cwd: project, env: onPath });
    expect((await run("npx", ["greet"], { cwd: project, env: onPath })).stdout.trim()).toBe("hello from node 24.22.3");

    // A second run keeps what is there and prints the same directory.
    const again = await run("bash", ["scripts/install-node.sh"], { cwd: checkout, env });
    expect({ bin: again.stdout.trim(), said: again.stderr }).toEqual({ bin, said: "" });
  }, 180_000);
});
