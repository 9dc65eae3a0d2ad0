import { execFile, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { freePort } from "../../support/redis.js";
import { makeTestCertificates } from "../../support/tls-certificates.js";

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

describe("the HEALTHCHECK probe reads the server's own invocation", () => {
  /** Starts the image's ENTRYPOINT with flags on its command line (as `docker run contextd --port …` does). */
  async function entrypoint(flags: string[], env: NodeJS.ProcessEnv) {
    const [command, ...args] = execForm("ENTRYPOINT");
    const server = spawn(command!, [...args, ...flags], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    const lines = createInterface({ input: server.stdout! });
    await new Promise<void>((resolve, reject) => {
      server.once("exit", (code) => reject(new Error(`exited with ${code}`)));
      lines.on("line", (line) => {
        if ((JSON.parse(line) as { msg: string }).msg === "contextd listening") resolve();
      });
    });
    return server;
  }
  const probe = execForm("HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD");
  const image = { PATH: process.env.PATH, NODE_ENV: "production", CONTEXTD_HOST: "0.0.0.0", CONTEXTD_PORT: "7420" };

  it("finds --port and --tls-cert given on the command line (not in the environment), and speaks HTTPS", async () => {
    const certificates = makeTestCertificates();
    const port = await freePort();
    const server = await entrypoint(["--port", String(port), "--tls-cert", certificates.serverCert, "--tls-key", certificates.serverKey], image);
    try {
      const healthy = await run(probe[0]!, probe.slice(1), { cwd: root, env: { ...image, CONTEXTD_HEALTHCHECK_PID: String(server.pid) } });
      expect(healthy.stderr).toBe("");
      // Its own configuration alone (7420, cleartext) does not find this server: the invocation is what made it healthy.
      const blind = await run(probe[0]!, probe.slice(1), { cwd: root, env: { ...image, CONTEXTD_HEALTHCHECK_PID: String(process.pid) } }).catch((error: { code: number; stderr: string }) => error);
      expect(blind).toMatchObject({ code: 1, stderr: expect.stringContaining(":7420/") });
    } finally {
      server.kill("SIGTERM");
      await once(server, "exit");
      certificates.remove();
    }
  });

  it("with client certificates required, presents CONTEXTD_HEALTHCHECK_CERT, and says what is missing without it", async () => {
    const certificates = makeTestCertificates();
    const port = await freePort();
    const server = await entrypoint(
      ["--port", String(port), "--tls-cert", certificates.serverCert, "--tls-key", certificates.serverKey, "--tls-client-ca", certificates.caCert],
      image,
    );
    try {
      const env = { ...image, CONTEXTD_HEALTHCHECK_PID: String(server.pid) };
      const healthy = await run(probe[0]!, probe.slice(1), { cwd: root, env: { ...env, CONTEXTD_HEALTHCHECK_CERT: certificates.clientCert, CONTEXTD_HEALTHCHECK_KEY: certificates.clientKey } });
      expect(healthy.stderr).toBe("");
      const refused = await run(probe[0]!, probe.slice(1), { cwd: root, env }).catch((error: { code: number; stderr: string }) => error);
      expect(refused).toMatchObject({ code: 1, stderr: expect.stringContaining("set CONTEXTD_HEALTHCHECK_CERT") });
    } finally {
      server.kill("SIGTERM");
      await once(server, "exit");
      certificates.remove();
    }
  });
});
