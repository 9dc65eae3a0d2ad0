import { execFile, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { freePort } from "../../support/redis.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../../..", import.meta.url));
const dockerfile = readFileSync(`${root}Dockerfile`, "utf8");

/** The JSON array of a Dockerfile exec-form instruction, e.g. ENTRYPOINT ["node", "dist/src/main.js"]. */
function execForm(instruction: string): string[] {
  const line = dockerfile.split("\n").find((candidate) => candidate.startsWith(instruction));
  if (!line) throw new Error(`Dockerfile has no ${instruction}`);
  return JSON.parse(line.slice(line.indexOf("[")));
}

describe("Dockerfile", () => {
  it("copies only files that exist, builds in one stage and runs as a non-root user in another", () => {
    const sources = dockerfile
      .split("\n")
      .filter((line) => line.startsWith("COPY ") && !line.includes("--from="))
      .flatMap((line) => line.split(/\s+/).slice(1, -1));
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) expect(existsSync(`${root}${source}`), source).toBe(true);
    expect(dockerfile.match(/^FROM /gm)).toHaveLength(2);
    expect(dockerfile).toMatch(/^USER node$/m);
    // The build stage compiles exactly what the runtime stage runs.
    expect(execForm("ENTRYPOINT")).toEqual(["node", "dist/src/main.js"]);
    expect(existsSync(`${root}src/main.ts`) && existsSync(`${root}src/healthcheck.ts`)).toBe(true);
  });

  it("runs the image's exact ENTRYPOINT, environment and HEALTHCHECK command: healthy, then unhealthy once stopped", async () => {
    const port = await freePort();
    const env = { PATH: process.env.PATH, NODE_ENV: "production", CONTEXTD_HOST: "0.0.0.0", CONTEXTD_PORT: String(port) };
    const [command, ...args] = execForm("ENTRYPOINT");
    const server = spawn(command!, args, { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    const lines = createInterface({ input: server.stdout! });
    const address = await new Promise<string>((resolve, reject) => {
      server.once("exit", (code) => reject(new Error(`exited with ${code}`)));
      lines.on("line", (line) => {
        const entry = JSON.parse(line) as { msg: string; address?: string };
        if (entry.msg === "contextd listening") resolve(entry.address!);
      });
    });
    expect(address).toBe(`0.0.0.0:${port}`);

    const [probe, ...probeArgs] = execForm("HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD");
    const healthy = await run(probe!, probeArgs, { cwd: root, env });
    expect(healthy.stderr).toBe("");

    const exited = once(server, "exit");
    server.kill("SIGTERM");
    expect((await exited)[0]).toBe(0);
    const unhealthy = await run(probe!, probeArgs, { cwd: root, env }).catch((error: { code: number; stderr: string }) => error);
    expect(unhealthy).toMatchObject({ code: 1, stderr: expect.stringContaining("contextd health") });
  });
});
