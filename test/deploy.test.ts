// deploy/: the compose files' services started as processes with their own commands and
// environment (no Docker engine runs on our CI machines), and the Kubernetes manifest validated
// against the Kubernetes schema, strict, with a negative control that shows the check can fail.
import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { startPostgres } from "./support/postgres.js";
import { freePort } from "./support/redis.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));
const python = join(root, ".venv/bin/python");

interface ComposeService {
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
}

/** A compose file parsed by PyYAML (in the test venv, requirements-dev.txt). */
function compose(file: string): { services: Record<string, ComposeService> } {
  const json = execFileSync(python, ["-c", "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))", join(root, file)], { encoding: "utf8" });
  return JSON.parse(json) as { services: Record<string, ComposeService> };
}

/** The image's ENTRYPOINT (Dockerfile) with a compose service's environment; host names of other services mapped to loopback ports. */
async function startContextd(service: ComposeService, hosts: Record<string, number>): Promise<{ child: ChildProcess; address: string }> {
  const dockerfile = readFileSync(join(root, "Dockerfile"), "utf8");
  const entrypoint = JSON.parse(dockerfile.split("\n").find((line) => line.startsWith("ENTRYPOINT"))!.slice("ENTRYPOINT".length)) as string[];
  const environment: Record<string, string> = {};
  for (const [name, value] of Object.entries(service.environment ?? {})) {
    environment[name] = Object.entries(hosts).reduce((text, [host, port]) => text.replace(new RegExp(`@?\\b${host}:\\d+`), (match) => `${match.startsWith("@") ? "@" : ""}127.0.0.1:${port}`), value);
  }
  const port = await freePort();
  const child = spawn(entrypoint[0]!, entrypoint.slice(1), {
    cwd: root,
    env: { PATH: process.env.PATH, NODE_ENV: "production", CONTEXTD_HOST: "127.0.0.1", CONTEXTD_PORT: String(port), ...environment },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (chunk) => (stderr += chunk));
  const address = await new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`contextd exited with ${code}: ${stderr}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const entry = JSON.parse(line) as { msg: string; address?: string; store?: { reachable: boolean } };
      if (entry.msg === "contextd listening") {
        expect(entry.store?.reachable).toBe(true);
        resolve(entry.address!);
      }
    });
  });
  return { child, address };
}

/** A commit and a read through the sidecar's Connect JSON API. */
async function commitAndRead(address: string): Promise<void> {
  const call = async (method: string, body: unknown) => {
    const response = await fetch(`http://${address}/contextd.v1.ConversationService/${method}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(response.status, await response.clone().text()).toBe(200);
    return (await response.json()) as Record<string, unknown>;
  };
  const conversationId = `deploy-${Date.now()}`;
  const committed = await call("Commit", { conversationId, deltas: [{ appendMessages: { segment: "SEGMENT_HISTORY", messages: [{ role: "ROLE_USER", parts: [{ text: { text: "hello" } }] }] } }] });
  expect(committed.version).toBe("1");
  const state = (await call("GetState", { conversationId })) as { state: { version: string } };
  expect(state.state.version).toBe("1");
}

const stops: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
});
function stopOnExit(child: ChildProcess) {
  stops.push(async () => {
    if (child.exitCode !== null) return;
    const exited = once(child, "exit");
    child.kill("SIGTERM");
    await exited;
  });
}

describe("deploy/compose", () => {
  it("redis.yaml: redis-server with the service's command, contextd with its environment; a commit lands in Redis", async () => {
    const { services } = compose("deploy/compose/redis.yaml");
    expect(Object.keys(services).sort()).toEqual(["contextd", "redis"]);
    expect(services.contextd!.depends_on).toEqual({ redis: { condition: "service_healthy" } });
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "contextd-compose-redis-"));
    stops.push(async () => rmSync(dir, { recursive: true, force: true }));
    const [binary, ...args] = services.redis!.command!;
    expect(binary).toBe("redis-server");
    const redis = spawn(binary!, [...args, "--port", String(port), "--bind", "127.0.0.1", "--dir", dir], { stdio: "ignore" });
    stopOnExit(redis);
    // The service's own healthcheck command, against this port.
    const healthcheck = services.redis!.healthcheck!.test.slice(1);
    await expect.poll(async () => (await run(healthcheck[0]!, ["-p", String(port), ...healthcheck.slice(1)]).catch(() => ({ stdout: "" }))).stdout.trim(), { timeout: 10_000 }).toBe("PONG");

    const contextd = await startContextd(services.contextd!, { redis: port });
    stopOnExit(contextd.child);
    await commitAndRead(contextd.address);
    const keys = (await run("redis-cli", ["-p", String(port), "--scan"])).stdout;
    expect(keys).toMatch(/deploy-/);
  });

  it("postgres.yaml: a PostgreSQL set up as the image would from the service's environment, contextd with its own; a commit lands", async () => {
    const { services } = compose("deploy/compose/postgres.yaml");
    expect(Object.keys(services).sort()).toEqual(["contextd", "postgres"]);
    const postgres = await startPostgres();
    stops.push(() => postgres.destroy());
    // What the postgres image's entrypoint does with POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB.
    const { POSTGRES_USER: user, POSTGRES_PASSWORD: password, POSTGRES_DB: database } = services.postgres!.environment!;
    const admin = new pg.Client({ connectionString: postgres.url });
    await admin.connect();
    await admin.query(`CREATE ROLE ${user} LOGIN PASSWORD '${password}'`);
    await admin.query(`CREATE DATABASE ${database} OWNER ${user}`);
    await admin.end();

    const contextd = await startContextd(services.contextd!, { postgres: postgres.port });
    stopOnExit(contextd.child);
    await commitAndRead(contextd.address);
  });
});

describe("deploy/kubernetes", () => {
  const validate = (file: string) => run(join(root, ".venv/bin/kubernetes-validate"), ["--strict", "-k", "1.33.0", file]);

  it("agent-with-contextd.yaml passes the Kubernetes 1.33 schema, strict", async () => {
    const { stdout } = await validate(join(root, "deploy/kubernetes/agent-with-contextd.yaml"));
    expect(stdout).toContain("passed for resource deployment/agent");
  });

  it("the same check refuses the manifest with one misspelt field (the check can fail)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "contextd-k8s-"));
    try {
      const broken = join(dir, "broken.yaml");
      writeFileSync(broken, readFileSync(join(root, "deploy/kubernetes/agent-with-contextd.yaml"), "utf8").replace("readinessProbe:", "readynessProbe:"));
      const failure = await validate(broken).catch((error: { code: number; stdout: string; stderr: string }) => error);
      expect(failure).toMatchObject({ code: expect.any(Number) });
      expect(`${(failure as { stdout: string }).stdout}${(failure as { stderr: string }).stderr}`).toMatch(/readynessProbe/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the contextd container's flags are flags this build knows", async () => {
    const manifest = readFileSync(join(root, "deploy/kubernetes/agent-with-contextd.yaml"), "utf8");
    const flags = [...manifest.matchAll(/^\s+- (--[a-z-]+)=/gm)].map((match) => match[1]!);
    expect(flags.length).toBeGreaterThan(3);
    const { stdout: help } = await run(process.execPath, [join(root, "dist/src/main.js"), "--help"]);
    for (const flag of flags) expect(help, flag).toContain(`${flag} (`);
  });
});
